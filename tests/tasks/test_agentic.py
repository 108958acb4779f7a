"""The `agent` task families: sound instances, held-out splits, and feedback that is necessary.

Every check plays real episodes in a real `ToolEnv` (real sandboxes, the real grader): the scripted expert
solves each instance; without reading what the tools print (one turn, or the decisive step guessed) it
does not.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from reward_helpers import error_of, reward_of

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.families.agent.source import FAMILIES, Instance, agent_instances, agent_tasks, parse_families
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.dedup import exact_duplicates
from trialground.tasks.sources import load_source
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader, make_grader
from trialground.verify.validate import validate_tasks


@pytest.fixture
async def grader() -> AsyncIterator[Grader]:
    g = make_grader(SandboxConfig())
    yield g
    await g.close()


ENV = EnvConfig(kind="tool", max_turns=8, observation_budget_chars=1000, max_calls_per_turn=1)


def test_deterministic_disjoint_splits_and_all_families() -> None:
    a = agent_tasks(60, seed=3, split="train")
    assert [t.id for t in a] == [t.id for t in agent_tasks(60, seed=3, split="train")]
    ev = agent_instances(60, seed=3, split="eval")
    train_keys = {i.key for i in agent_instances(600, seed=4, split="train")}
    assert not train_keys & {i.key for i in ev}  # no held-out instance is ever a training instance
    assert {t.metadata["family"] for t in a} == {f"agent:{f}" for f in FAMILIES}
    assert all(t.split == "train" for t in a) and all(i.task.split == "eval" for i in ev)
    assert not exact_duplicates(a)  # same template prompt, different workspaces: different tasks
    assert [t.id for t in load_source("agent:repair,config", seed=3, n=10)] == [
        i.task.id for i in agent_instances(10, 3, "train", ("repair", "config"))
    ]


def test_unknown_family_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown agent families"):
        parse_families("repair,bogus")


async def _play(
    grader: Grader,
    inst: Instance,
    calls: list[tuple[str, dict]],
    turns: int = 8,
    scoring: RewardConfig | None = None,
) -> float:
    env = ToolEnv(grader, ENV.model_copy(update={"max_turns": turns}), SandboxConfig())
    try:
        obs = await env.reset(inst.task)
        assert len(obs.start.workspace_digest) == 16
        for name, args in calls:
            obs = await env.step(format_tool_call(name, args, "json_tags"))
            if obs.done:
                break
        reward = reward_of(obs, scoring)
        assert obs.done and reward is not None and error_of(obs) is None
        return reward.total
    finally:
        await env.close()


def _guess(inst: Instance, rng: random.Random) -> list[tuple[str, dict]]:
    """The expert's calls with the decisive one made without the information the tools give."""
    calls = [(n, dict(a)) for n, a in inst.expert]
    for name, args in calls:
        if name == "submit" and "answer" in args:
            args["answer"] = str(rng.randint(10, 99))
        elif name == "edit_file":
            args["new"] = args["new"].split("=")[0] + "= " + str(rng.randint(0, 9))
        elif name == "write_file":
            args["content"] = f"def f(x):\n    x = x + {rng.randint(1, 9)}\n    return x\n"
    return calls


async def test_expert_solves_every_family_and_guessing_or_one_turn_fails(grader: Grader) -> None:
    rng = random.Random(0)
    instances = agent_instances(12, seed=11, split="eval")
    solved = await asyncio.gather(*(_play(grader, i, list(i.expert)) for i in instances))
    assert all(r > 1.0 for r in solved)  # outcome 1 plus the process bonus
    guessed = await asyncio.gather(*(_play(grader, i, _guess(i, rng)) for i in instances))
    one_turn = await asyncio.gather(*(_play(grader, i, list(i.expert), turns=1) for i in instances))
    assert sum(r > 0 for r in guessed) <= 2
    assert not any(one_turn)  # one turn shows the tool output but leaves no turn to act on it


async def test_redundant_repeat_costs_and_tests_before_submit_pay(grader: Grader) -> None:
    # the config family's check is `bash python3 app.py`: bash counts as running the tests, as in the recipes
    scoring = RewardConfig(test_tools=("run_tests", "bash"))
    inst = agent_instances(3, seed=5, split="train", families=("config",))[0]
    clean = await _play(grader, inst, list(inst.expert), scoring=scoring)
    probe = inst.expert[0]
    repeated = await _play(grader, inst, [probe, probe, *inst.expert[1:]], scoring=scoring)
    unchecked = await _play(grader, inst, [c for i, c in enumerate(inst.expert) if i != 2], scoring=scoring)
    assert clean > repeated > 1.0  # a repeated probe is redundant: -0.01 and a lower process score
    assert clean > unchecked > 1.0  # submitting without re-running after the edit earns less process


async def test_validation_is_clean_for_every_family() -> None:
    tasks = agent_tasks(9, seed=2, split="train")
    report = await validate_tasks(tasks, runs=2, source="agent", sandbox_config=SandboxConfig())
    bad = [(t.name, t.problems) for t in report.tasks if t.status != "valid"]
    assert not bad
