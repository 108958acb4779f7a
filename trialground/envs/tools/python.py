"""`python(code)`: run Python code in /workspace, with the sandbox's Python (`env.python`)."""

from __future__ import annotations

from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, program_outcome


async def run(call: ToolCall) -> ToolOutcome:
    return await program_outcome(call, [call.box.python, "-B", "-"], stdin=call.args["code"])


TOOL = Tool(
    "python",
    run,
    ToolCaps(runs_program=True),
    params=(ToolParam("code", "the program"),),
    prompt="run Python code in /workspace",
    description="Run Python code in /workspace.",
    returns="The exit status, stdout and stderr.",
)
