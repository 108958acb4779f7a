"""`search(pattern, path?)`: bounded fixed-string search, run in the sandbox (`trialground.envs.navigate`)."""

from __future__ import annotations

from trialground.envs import navigate
from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, render_exec


async def run(call: ToolCall) -> ToolOutcome:
    pattern, path = call.args["pattern"], call.args.get("path") or "."
    if not pattern:
        return ToolOutcome("error: search needs a non-empty pattern", False, False, path)
    argv = navigate.search_argv(call.box.python, pattern, path)
    res = await call.box.exec(argv, navigate.nav_limits(call.limits))
    if res.status != "ok" and res.exit_code not in (0, 1, 2):  # timed out or killed: say so
        return ToolOutcome(render_exec(res), False, False, path)
    return ToolOutcome(res.stdout.rstrip("\n"), res.exit_code == 0, False, path)


TOOL = Tool(
    "search",
    run,
    ToolCaps(listed=False),
    params=(
        ToolParam("pattern", "the exact text to find"),
        ToolParam("path", "a file or folder to search (default: everything)", required=False),
    ),
    prompt="lines with `pattern` (file:line:text), under `path` or everywhere",
    description="Lines containing a fixed string, as file:line:text (bounded; a summary line gives the "
    "totals).",
    returns="Matching lines as file:line:text, at most 20, then a line with the totals.",
)
