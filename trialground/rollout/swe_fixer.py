"""A scripted player of repository tasks through the repair tools (`fixes`, `apply_fix`, `run_tests`).

`play_fixes(env, task)` plays one episode of a `ToolEnv` the way the repair tools are meant to be used:
list the candidates (`fixes()`), apply the first (`apply_fix(1)`), run the suite (`run_tests()`); when it
fails, apply the next candidate and run it again; submit when it passes or after `tries` candidates. It
reads only the tools' outputs (how many candidates were listed, whether the suite passed), never the
task's reference or hidden tests. `shortcut=True` plays the habit of trusting the top candidate: apply it
and submit without running the tests (right only when the top candidate is). `next_fix=True` calls
`apply_fix()` without a number (the next candidate) and, when the listing runs out before `tries`, once more
to be told every candidate was applied, then submits: the strategy as a loop that never counts.

`scripts/pretrain_agent.py --swe-fixes` continues a bundled policy on such episodes; docs/swe.md measures
the share of each task set the full strategy solves.
"""

from __future__ import annotations

import re
from typing import Any

from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.tasks.model import Task

_LISTED = re.compile(r"^(\d+) fixes ")


async def play_fixes(
    env: ToolEnv, task: Task, *, tries: int = 4, shortcut: bool = False, next_fix: bool = False
) -> dict[str, Any]:
    """One episode; the trace as `scripts/pretrain_agent.py` stores it (prompt, turns, solved) plus
    `tried` (candidates applied) and `listed` (candidates the listing showed)."""
    obs = await env.reset(task)
    trace: dict[str, Any] = {"prompt": obs.text, "turns": [], "family": "swe_fixes", "tried": 0}

    async def call(name: str, **arguments: str) -> bool:
        nonlocal obs
        text = format_tool_call(name, arguments, "json_tags")
        obs = await env.step(text)
        trace["turns"].append([text, obs.text])
        actions = env.state.actions
        return bool(actions and actions[-1].ok)

    listed = 0
    if await call("fixes"):
        found = _LISTED.match(obs.text)
        listed = int(found.group(1)) if found else 0
    trace["listed"] = listed

    def number(k: int) -> dict[str, str]:
        return {} if next_fix else {"n": str(k)}

    if shortcut:
        trace["shortcut"] = True
        if listed:
            await call("apply_fix", **number(1))
            trace["tried"] = 1
    else:
        passed = False
        for k in range(1, min(listed, tries) + 1):
            if obs.done:
                break
            await call("apply_fix", **number(k))
            trace["tried"] = k
            passed = obs.done or await call("run_tests")
            if passed:
                break
        if next_fix and listed and not passed and listed < tries and not obs.done:
            await call("apply_fix")  # answered: every candidate was applied
    if not obs.done:
        await call("submit")
    graded = obs.end.graded if obs.done and obs.end is not None else None
    trace["solved"] = bool(graded is not None and graded.verdict.passed and graded.verdict.error is None)
    return trace
