"""`bash(command)`: run a bash script in /workspace."""

from __future__ import annotations

from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, program_outcome


async def run(call: ToolCall) -> ToolOutcome:
    return await program_outcome(call, call.args["command"])


TOOL = Tool(
    "bash",
    run,
    ToolCaps(runs_program=True),
    params=(ToolParam("command", "the script"),),
    prompt="run a bash script in /workspace",
    description="Run a bash script in /workspace.",
    returns="The exit status, stdout and stderr.",
    example={"command": "ls"},
)
