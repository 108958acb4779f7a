"""`write_file(path, content)`: create or overwrite a file."""

from __future__ import annotations

from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam
from trialground.envs.tools.read_file import PATH
from trialground.envs.tools.toolbox import FileError


async def run(call: ToolCall) -> ToolOutcome:
    path, content = call.args["path"], call.args["content"]
    before = await call.box.read_text(path)
    try:
        await call.box.write(path, content)
    except FileError as e:
        return ToolOutcome(f"error: cannot write {path}: {e}", False, False, path)
    return ToolOutcome(f"wrote {len(content)} chars to {path}", True, before != content, path)


TOOL = Tool(
    "write_file",
    run,
    ToolCaps(),
    params=(PATH, ToolParam("content", "the whole new content")),
    prompt="create or overwrite a file",
    description="Create or overwrite a file.",
    returns="What was written.",
)
