"""`read_lines(path, start?, count?)`: paged reading, run in the sandbox (`trialground.envs.navigate`)."""

from __future__ import annotations

from trialground.envs import navigate
from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, page_outcome
from trialground.envs.tools.read_file import PATH


async def run(call: ToolCall) -> ToolOutcome:
    path = call.args["path"]
    bounds = navigate.page_bounds(call.args.get("start"), call.args.get("count"))
    if isinstance(bounds, str):
        return ToolOutcome(f"error: {bounds}", False, False, path)
    return await page_outcome(call, navigate.read_argv(call.box.python, path, *bounds), path)


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
