"""`submit(answer?)`: end the episode; the workspace (or `answer`) is graded."""

from __future__ import annotations

from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam


async def run(call: ToolCall) -> ToolOutcome:
    return ToolOutcome("submitted", True, False, submit=True, answer=call.args.get("answer"))


TOOL = Tool(
    "submit",
    run,
    ToolCaps(ends_episode=True),
    params=(ToolParam("answer", "the answer, if one is asked", required=False),),
    prompt="finish; the workspace (or `answer`) is graded",
    description="Finish; the workspace (or `answer`) is graded.",
    returns="The grading's summary.",
)
