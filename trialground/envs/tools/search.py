"""`search(pattern, path?)`: bounded fixed-string search, run in the sandbox (`trialground.envs.navigate`)."""

from __future__ import annotations

from trialground.envs import navigate
from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, page_outcome


async def run(call: ToolCall) -> ToolOutcome:
    pattern, path = call.args["pattern"], call.args.get("path") or "."
    if not pattern:
        return ToolOutcome("error: search needs a non-empty pattern", False, False, path)
    return await page_outcome(call, navigate.search_argv(call.box.python, pattern, path), path)


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
