"""`edit_file(path, old, new)`: exact-match replace; no match or several matches is an error observation."""

from __future__ import annotations

from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam
from trialground.envs.tools.read_file import PATH
from trialground.envs.tools.toolbox import READ_FILE_MAX_BYTES, FileError, FileTooLarge


async def run(call: ToolCall) -> ToolOutcome:
    path, old, new = call.args["path"], call.args["old"], call.args["new"]
    try:
        text: str | None = (await call.box.read(path)).decode("utf-8", errors="surrogateescape")
    except FileTooLarge:
        return ToolOutcome(
            f"error: cannot edit {path}: edit_file edits files up to {READ_FILE_MAX_BYTES} bytes "
            "(write_file replaces a larger one)",
            False,
            False,
            path,
        )
    except FileError:
        text = None
    if text is None:
        return ToolOutcome(f"error: cannot edit {path}: no such file", False, False, path)
    if not old:
        return ToolOutcome("error: edit_file needs a non-empty `old`", False, False, path)
    count = text.count(old)
    if count == 0:
        return ToolOutcome(f"error: `old` text not found in {path}; nothing changed", False, False, path)
    if count > 1:
        return ToolOutcome(
            f"error: `old` text is ambiguous: {count} matches in {path}; include more context",
            False,
            False,
            path,
        )
    updated = text.replace(old, new, 1)
    try:
        await call.box.write(path, updated.encode("utf-8", errors="surrogateescape"))
    except FileError as e:
        return ToolOutcome(f"error: cannot write {path}: {e}", False, False, path)
    return ToolOutcome(f"edited {path} (1 replacement)", True, updated != text, path)


TOOL = Tool(
    "edit_file",
    run,
    ToolCaps(),
    params=(PATH, ToolParam("old", "text to replace"), ToolParam("new", "replacement")),
    prompt="replace the one exact occurrence of `old` with `new`",
    description="Replace the one exact occurrence of `old` with `new` in a file.",
    returns="What changed, or why nothing did.",
)
