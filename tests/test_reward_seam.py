"""One reward seam: the same episode earns the same reward whichever trainer drives it (the native loop's
rollout and scoring, TRL's reward function and environment factory, the OpenEnv server through OpenEnv's own
client), and a rubric part added by plugin path from the config changes a real run's rewards."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the [train] extra")

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.orchestrator.collect import Collector, RolloutSettings
from trialground.policy.backends.scripted.scripted import ScriptedPolicy
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import rollout
from trialground.rollout.scoring import score
from trialground.rollout.trajectory import CONTEXT_BUDGET, Trajectory
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.io import write_jsonl
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import PartSpec, RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.reward.rubric import Rubric

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

sys.path.insert(0, str(Path(__file__).parent / "tasks" / "plugin_fixture"))
sys.path.insert(0, str(Path(__file__).parent / "integrations"))

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
IMPORT = "from solution import add\n\n\n"
PARAMS = SamplingParams(max_new_tokens=200)


def add_task() -> Task:
    return Task(
        domain="code",
        prompt="Fix add() in solution.py so the tests pass.",
        files={"solution.py": BUGGY},
        visible_checks={"test_visible.py": f"{IMPORT}def test_small():\n    assert add(1, 2) == 3\n"},
        hidden_checks={
            "test_hidden.py": f"{IMPORT}def test_big():\n    assert add(10, 20) == 30\n\n\n"
            "def test_neg():\n    assert add(-1, -2) == -3\n"
        },
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 2}),
    )


def call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


SCRIPT = [call("write_file", path="solution.py", content=FIXED), call("run_tests"), call("submit")]


async def native_tool_episode(
    task: Task, reward: RewardConfig, *, max_context_tokens: int = 4096
) -> Trajectory:
    """The native loop's path for one episode: the agent loop in a ToolEnv, then the rubric."""
    grader = make_grader(SandboxConfig(), reward)
    env = ToolEnv(grader, EnvConfig(kind="tool"), SandboxConfig())
    try:
        traj = await rollout(
            ScriptedPolicy(SCRIPT), env, task, params=PARAMS, group_id="g", sample_index=0,
            max_context_tokens=max_context_tokens,
        )  # fmt: skip
    finally:
        await env.close()
        await grader.close()
    scored = score(Rubric.from_config(reward), traj)
    assert scored.error is None and scored.reward is not None, scored
    return scored


def trl_tool_reward(task: Task, reward: RewardConfig, *, truncated: bool = False) -> float | None:
    from trialground.integrations.trl import environment_factory

    factory = environment_factory([task], reward=reward)
    try:
        env = factory()
        env.reset(task_id=task.id)
        env.write_file(path="solution.py", content=FIXED)
        if truncated:  # the trainer's context ran out here
            return env.get_reward(truncated=True)
        env.run_tests()
        env.submit()
        return env.get_reward()
    finally:
        factory.close()


@pytest.mark.slow
def test_the_same_tool_episode_earns_the_same_reward_natively_through_trl_and_openenv(
    tmp_path: Path,
) -> None:
    pytest.importorskip("openenv")
    pytest.importorskip("trl")
    from interop_servers import serve
    from openenv.core.generic_client import GenericEnvClient

    task = add_task()
    native = asyncio.run(native_tool_episode(task, RewardConfig())).reward.total  # type: ignore[union-attr]
    assert native > 1.0  # outcome 1 plus the process bonus for running the tests before submitting
    assert trl_tool_reward(task, RewardConfig()) == native

    token = "seam-test-token-0123456789abcdef"
    (tmp_path / "token").write_text(token)
    write_jsonl([task], tmp_path / "tasks.jsonl")
    args = [
        "env",
        "serve",
        str(tmp_path / "tasks.jsonl"),
        "--port",
        "0",
        "--token-file",
        str(tmp_path / "token"),
    ]

    async def over_openenv(url: str) -> float | None:
        async with GenericEnvClient(base_url=url) as env:
            await env.reset()
            await env.step({"tool": "write_file", "arguments": {"path": "solution.py", "content": FIXED}})
            await env.step({"tool": "run_tests"})
            result = await env.step({"tool": "submit"})
            assert result.done
            return result.reward

    with serve(args) as served:
        assert asyncio.run(over_openenv(f"{served.url}/oe/{token}")) == native


@pytest.mark.slow
def test_the_same_truncated_episode_earns_the_same_reward_natively_and_through_trl() -> None:
    pytest.importorskip("trl")
    task = add_task()
    reward = RewardConfig(truncation_penalty=0.25)
    whole = asyncio.run(native_tool_episode(task, reward))
    # room for the prompt and the first call only: the context budget ends the episode ungraded
    room = len(whole.prompt_ids) + len(whole.turns[1].token_ids) + 2
    cut = asyncio.run(native_tool_episode(task, reward, max_context_tokens=room))
    assert cut.finish_reason == CONTEXT_BUDGET and cut.end is None and cut.truncated
    native = cut.reward.total  # type: ignore[union-attr]
    assert native == -0.25
    assert trl_tool_reward(task, reward, truncated=True) == native


@pytest.mark.slow
async def test_the_same_completion_earns_the_same_reward_natively_and_through_trl() -> None:
    pytest.importorskip("trl")
    from trialground.integrations.trl import reward_function

    tasks = generate_codegen_tasks(2, seed=3, split="eval")
    completions = [f"```python\n{tasks[0].reference}```", "```python\ndef f(x):\n    return None\n```"]
    reward = RewardConfig()
    grader = make_grader(SandboxConfig(), reward)
    native: list[float] = []
    try:
        for task, completion in zip(tasks, completions, strict=True):
            collector = Collector(
                ScriptedPolicy([completion]), Rubric.from_config(reward), RolloutSettings(1, 1024), grader
            )
            [[traj]] = await collector.collect([task], 1, PARAMS)
            assert traj.reward is not None
            native.append(traj.reward.total)
    finally:
        await grader.close()
    assert native[0] == 1.0 and native[1] == 0.0
    trl = reward_function(tasks, reward=reward)
    try:
        got = await asyncio.to_thread(
            trl, [t.prompt for t in tasks], completions, task_id=[t.id for t in tasks]
        )
    finally:
        trl.close()
    assert got == native


@pytest.mark.slow
def test_a_rubric_part_added_by_plugin_path_changes_a_runs_rewards(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from trialground.orchestrator.loop import run
    from trialground.orchestrator.run_config import load_config

    quickstart = Path(__file__).parents[1] / "examples" / "quickstart.yaml"
    short = [
        f"output_dir={tmp_path}", "loop.steps=1", "loop.batch_tasks=2", "loop.samples_per_task=2",
        "loop.rollout_concurrency=2", "loop.eval_interval=0", "tasks.num_train=16", "tasks.num_eval=2",
        "reward.canaries=0",
    ]  # fmt: skip
    rewards = {}
    for name, parts in (
        ("plain", ()),
        ("plugin", (PartSpec(part="tg_user_plugin:BREVITY", weight=0.5, params={"max_tokens": 10_000}),)),
    ):
        config = load_config(quickstart, [*short, f"name={name}"])
        config = config.model_copy(update={"reward": config.reward.model_copy(update={"parts": parts})})
        asyncio.run(run(config))
        rows = pq.read_table(tmp_path / name / "trajectories" / "step_1.parquet").to_pylist()
        rewards[name] = [r["reward"] for r in rows]
    # the same seed samples the same first-step completions; the plugin pays every one of them 0.5 more
    assert len(rewards["plain"]) == 4
    assert rewards["plugin"] == pytest.approx([r + 0.5 for r in rewards["plain"]])


def test_a_bad_rubric_part_fails_before_the_run_with_its_name() -> None:
    from trialground.errors import ConfigError

    with pytest.raises(ConfigError, match="rubric part plugin: cannot import 'tg_user_plugin:NOPE'"):
        Rubric.from_config(RewardConfig(parts=(PartSpec(part="tg_user_plugin:NOPE"),)))
    with pytest.raises(ConfigError, match=r"reward.parts\[0\] \(tg_user_plugin:BREVITY\) params: max_tokens"):
        Rubric.from_config(
            RewardConfig(parts=(PartSpec(part="tg_user_plugin:BREVITY", params={"max_tokens": 0}),))
        )
