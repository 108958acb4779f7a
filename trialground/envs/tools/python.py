"""`python(code)`: run Python code in /workspace, with the sandbox's Python (`env.python`)."""

from __future__ import annotations

from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, render_exec


async def run(call: ToolCall) -> ToolOutcome:
    res = await call.box.exec([call.box.python, "-B", "-"], call.limits, stdin=call.args["code"])
    return ToolOutcome(render_exec(res), res.ok)


TOOL = Tool(
    "python",
    run,
    ToolCaps(runs_program=True),
    params=(ToolParam("code", "the program"),),
    prompt="run Python code in /workspace",
    description="Run Python code in /workspace.",
    returns="The exit status, stdout and stderr.",
)
