"""`read_file(path)`: show a file. A file over `READ_FILE_MAX_BYTES` shows its first and last half of that,
cut inside the sandbox, so the host never holds more than that for one call."""

from __future__ import annotations

import shlex

from trialground.envs.tools.base import Deadline, Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam
from trialground.envs.tools.toolbox import READ_FILE_MAX_BYTES, FileError, FileTooLarge
from trialground.sandbox.base import ExecResult

PATH = ToolParam("path", "file path, relative to /workspace")


async def run(call: ToolCall) -> ToolOutcome:
    path = call.args["path"]
    try:
        data = await call.box.read(path)
    except FileTooLarge:
        return await _read_ends(call, path)
    except FileError as e:
        return ToolOutcome(f"error: cannot read {path}: {e}", False, False, path)
    return ToolOutcome(data.decode("utf-8", errors="replace"), True, False, path)


async def _read_ends(call: ToolCall, path: str) -> ToolOutcome:
    """A file over READ_FILE_MAX_BYTES (the host-side read refused it by its size): its first and last
    half of that, cut by `head` and `tail` inside the sandbox, and how much lies between."""
    half = READ_FILE_MAX_BYTES // 2
    quoted = shlex.quote(path)
    cut = call.limits.model_copy(update={"output_bytes": max(call.limits.output_bytes, half + 64)})
    deadline = Deadline(cut)
    done: list[ExecResult] = []
    for cmd in (f"wc -c < {quoted}", f"head -c {half} -- {quoted}", f"tail -c {half} -- {quoted}"):
        left = deadline.next()
        if left is None:
            return ToolOutcome(f"error: cannot read {path}: out of time", False, False, path)
        done.append(await call.box.exec(cmd, left))
    size, head, tail = done
    if not (size.ok and head.ok and tail.ok) or not size.stdout.strip().isdigit():
        return ToolOutcome(f"error: cannot read {path}: it changed while being read", False, False, path)
    hidden = max(0, int(size.stdout) - 2 * half)
    note = (
        f"\n[... {hidden} bytes not shown: read_file shows {READ_FILE_MAX_BYTES} bytes of a file at "
        "most; search and read_lines reach the rest ...]\n"
    )
    return ToolOutcome(head.stdout + note + tail.stdout, True, False, path)


TOOL = Tool(
    "read_file",
    run,
    ToolCaps(),
    params=(PATH,),
    prompt="show a file",
    description="Show a file.",
    returns="The file's text.",
)
