"""`env.observations`: the feedback ablation replaces what the agent sees, never what the tools do."""

from __future__ import annotations

import pytest
from envkit import call, code_task
from reward_helpers import verdict_of

from trialground.envs.config import EnvConfig
from trialground.envs.observations import PLACEHOLDER
from trialground.envs.tool_env import ToolEnv
from trialground.tasks.model import Task
from trialground.verify.grader import Grader


def _cfg(mode: str) -> EnvConfig:
    return EnvConfig(kind="tool", max_turns=10, observations=mode)  # type: ignore[arg-type]


async def _episode(grader: Grader, sandbox_config, mode: str, task: Task) -> list[str]:
    env = ToolEnv(grader, _cfg(mode), sandbox_config)
    try:
        await env.reset(task)
        seen = [(await env.step(call("run_tests"))).text]
        seen.append((await env.step(call("bash", command="cat notes/readme.txt"))).text)
        await env.step(call("edit_file", path="solution.py", old="a - b", new="a + b"))
        seen.append((await env.step(call("bash", command="grep -c 'a + b' solution.py"))).text)
        obs = await env.step(call("submit"))
        assert verdict_of(obs) is not None and verdict_of(obs).passed, (
            "the tools still act: the fix is graded"
        )
        seen.append("passed")
        return seen
    finally:
        await env.close()


async def test_full_shows_real_outputs(grader: Grader, sandbox_config) -> None:
    seen = await _episode(grader, sandbox_config, "full", code_task())
    assert "FAILED" in seen[0] and "hello" in seen[1] and "1" in seen[2]


async def test_blank_hides_every_output_but_keeps_effects(grader: Grader, sandbox_config) -> None:
    seen = await _episode(grader, sandbox_config, "blank", code_task())
    assert seen[:3] == [PLACEHOLDER] * 3


async def test_shuffled_shows_outputs_of_another_task(grader: Grader, sandbox_config) -> None:
    base = code_task()
    other = Task.model_validate(
        {**base.model_dump(), "id": "", "files": {**base.files, "notes/readme.txt": "zebra\n"}}
    )
    assert other.id != base.id
    await _episode(grader, sandbox_config, "shuffled", other)  # records the other task's real outputs
    seen = await _episode(grader, sandbox_config, "shuffled", code_task())
    assert all(s != PLACEHOLDER for s in seen[:3])
    assert "hello" not in "".join(seen[:3]), "never this workspace's own output"


def test_bad_mode_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="observations"):
        EnvConfig(kind="tool", observations="none")  # type: ignore[arg-type]
