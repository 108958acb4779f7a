"""`bash(command)`: run a bash script in /workspace."""

from __future__ import annotations

from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, render_exec


async def run(call: ToolCall) -> ToolOutcome:
    res = await call.box.exec(call.args["command"], call.limits)
    return ToolOutcome(render_exec(res), res.ok)


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
