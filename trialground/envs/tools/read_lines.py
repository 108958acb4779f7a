"""`read_lines(path, start?, count?)`: paged reading, run in the sandbox (`trialground.envs.navigate`)."""

from __future__ import annotations

from trialground.envs import navigate
from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, render_exec
from trialground.envs.tools.read_file import PATH


async def run(call: ToolCall) -> ToolOutcome:
    path = call.args["path"]
    bounds = navigate.page_bounds(call.args.get("start"), call.args.get("count"))
    if isinstance(bounds, str):
        return ToolOutcome(f"error: {bounds}", False, False, path)
    argv = navigate.read_argv(call.box.python, path, *bounds)
    res = await call.box.exec(argv, navigate.nav_limits(call.limits))
    if res.status != "ok" and res.exit_code not in (0, 1, 2):
        return ToolOutcome(render_exec(res), False, False, path)
    return ToolOutcome(res.stdout.rstrip("\n"), res.exit_code == 0, False, path)


TOOL = Tool(
    "read_lines",
    run,
    ToolCaps(listed=False),
    params=(
        PATH,
        ToolParam("start", "first line, 1-based (default 1)", required=False, type=int),
        ToolParam("count", "lines to show (default 20, at most 200)", required=False, type=int),
    ),
    prompt="`count` lines (default 20) of a file from line `start`",
    description="Show a page of a file: `count` numbered lines from line `start`.",
    returns="The numbered lines, under a header giving the range and the file's length.",
)
