"""Branching rollouts over real sandboxes: one trunk, k forks that start from the trunk's exact workspace
and token context, continue independently, are masked to their own turns, and form one GRPO group."""

from __future__ import annotations

import math
import re

import pytest
from reward_helpers import scored

pytest.importorskip("torch", reason="uses the bundled tiny tokenizer ([train] extra)")

from rollout_helpers import ShellEnv

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.errors import SandboxError
from trialground.policy.backends.scripted.scripted import ScriptedPolicy
from trialground.policy.base import SamplingParams
from trialground.pool import EnvPool, PoolConfig
from trialground.rollout.branching import branch_metrics, rollout_branched
from trialground.rollout.trajectory import BranchInfo, Trajectory, Turn
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task, VerifierSpec
from trialground.train.advantages import compute_advantages
from trialground.verify.grader import Grader, make_grader
from trialground.verify.reward.model import Reward

PARAMS = SamplingParams(max_new_tokens=400)
DIGEST = "export LC_ALL=C; find . -type f -print0 | sort -z | xargs -0 -r sha256sum | sha256sum"
FIXED = "def add(a, b):\n    return a + b\n"


def task() -> Task:
    return Task(
        id="add-1",
        domain="code",
        prompt="Fix add() in solution.py so the tests pass.",
        files={"solution.py": "def add(a, b):\n    return a - b\n"},
        visible_checks={
            "test_visible.py": "from solution import add\n\n\ndef test_a():\n    assert add(1, 2) == 3\n"
        },
        hidden_checks={
            "test_hidden.py": "from solution import add\n\n\ndef test_b():\n    assert add(2, 5) == 7\n"
        },
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
    )


def call(name: str, **arguments: str) -> str:
    return format_tool_call(name, arguments)


def n_calls(prompt: str) -> int:
    """Policy turns so far: every message holds one call; the task prompt shows one example call."""
    return prompt.count("<tool_call>") - 1


@pytest.fixture
async def grader():  # type: ignore[no-untyped-def]
    g = make_grader(SandboxConfig())
    yield g
    await g.close()


def tool_env(grader: Grader, **cfg: object) -> ToolEnv:
    return ToolEnv(grader, EnvConfig(kind="tool", **cfg), SandboxConfig())  # type: ignore[arg-type]


def digest_of(text: str) -> str:
    m = re.search(r"\b([0-9a-f]{64})\b", text)
    assert m, text
    return m.group(1)


async def test_branches_share_the_trunk_state_diverge_and_train_only_their_own_turns(grader: Grader) -> None:
    def respond(prompt: str, index: int) -> str:
        turn = n_calls(prompt)
        if turn == 0:  # the trunk: change the workspace, then show its digest
            return call("bash", command=f"echo trunk-state > trunk.txt && {DIGEST}")
        if turn == 1:  # each branch: its start digest, then a file only it writes
            return call("bash", command=f"{DIGEST}; echo {index} > mine_{index}.txt")
        if turn == 2:
            return call("bash", command="ls mine_* && cat trunk.txt")
        mine = int(re.findall(r"mine_(\d+)\.txt", prompt)[-1])
        if turn == 3 and mine % 2 == 0:  # half the branches fix the bug: the group has reward variance
            return call("write_file", path="solution.py", content=FIXED)
        return call("submit")

    policy = ScriptedPolicy(respond)
    pool = EnvPool(PoolConfig(max_active=4), env_config=EnvConfig(kind="tool", max_turns=6), grader=grader)
    k = 4
    try:
        group = scored(await rollout_branched(
            policy, lambda: pool.acquire(task()), task(), k, point="first_obs", params=PARAMS,
            group_id="g", max_context_tokens=4096, release=pool.release, batch_window_s=60.0,
        ))  # fmt: skip
        metrics = pool.metrics()
    finally:
        await pool.close()
    assert [t.sample_index for t in group] == list(range(k))
    assert all(t.error is None for t in group), [t.error for t in group]
    # the trunk's env went back to the pool (one warm sandbox, nothing leased); forks were not pooled
    assert metrics["pool/active"] == 0 and metrics["pool/idle"] == 1 and metrics["pool/created"] == 1

    trunk_obs = group[0].turns[2].text  # prompt, trunk policy turn, trunk observation
    trunk_digest = digest_of(trunk_obs)
    ids_of_prefix = list(group[0].prompt_ids)
    # the trunk ran once: one generation saw the task prompt alone; k saw exactly the trunk's context
    first_prompt = list(group[0].turns[0].token_ids)
    assert sum(c == first_prompt for c in policy.calls) == 1
    assert sum(c == ids_of_prefix for c in policy.calls) == k
    owners = set()
    for t in group:
        b = t.branch
        assert b is not None and not b.fallback and b.trunk_id == group[0].branch.trunk_id  # type: ignore[union-attr]
        assert b.prefix_turns == 1 and b.prefix_tokens == len(ids_of_prefix) - len(first_prompt)
        assert [u.role for u in t.turns[:3]] == ["prompt", "prompt", "prompt"]
        assert list(t.prompt_ids) == ids_of_prefix  # token-exact: the trunk's ids, verbatim
        # masked: completion() holds only the branch's own turns, the loss mask only its policy tokens
        ids, mask, _ = t.completion()
        own = [u for u in t.turns[3:]]
        assert ids == [i for u in own for i in u.token_ids]
        assert sum(mask) == sum(len(u.token_ids) for u in own if u.role == "policy")
        assert b.prefix_policy_tokens == len(t.turns[1].token_ids)
        first_own = t.turns[4].text  # the branch's first observation
        assert digest_of(first_own) == trunk_digest  # byte-identical to the trunk at the branch point
        listing = t.turns[6].text
        mine = re.findall(r"mine_(\d+)\.txt", listing)
        assert len(mine) == 1, listing  # a sibling's write is invisible
        assert "trunk-state" in listing
        owners.add(mine[0])
        assert t.workspace_digest == group[0].workspace_digest  # all started from the same task bytes
        assert t.reward is not None
    assert len(owners) == k
    solved = [t.reward.outcome for t in group if t.reward is not None]
    assert sorted(solved) == [0.0, 0.0, 1.0, 1.0]

    # advantages among the k siblings: GRPO by hand, (r - mean) / (sample std + 1e-6)
    rewards = [t.reward.total for t in group if t.reward is not None]
    mean = sum(rewards) / k
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (k - 1))
    expected = [(r - mean) / (std + 1e-6) for r in rewards]
    assert compute_advantages(group) == pytest.approx(expected, abs=1e-9)

    m = branch_metrics([group], branching=True)
    assert m["rollout/branch_groups"] == 1 and m["rollout/branch_fallbacks"] == 0
    assert m["rollout/branch_prefix_tokens_mean"] == group[0].branch.prefix_tokens  # type: ignore[union-attr]
    assert m["rollout/branch_generated_tokens_saved"] == (k - 1) * len(group[0].turns[1].token_ids)


def test_advantages_of_a_branched_group_match_hand_computed_grpo() -> None:
    info = BranchInfo(trunk_id="t", point="first_obs", prefix_turns=1, prefix_tokens=3)
    turns = (
        Turn(role="prompt", token_ids=(1, 2, 3, 4, 5)),
        Turn(role="policy", token_ids=(6,), logprobs=(-1.0,)),
    )

    def traj(i: int, total: float | None) -> Trajectory:
        reward = None if total is None else Reward(outcome=total)
        err = None if total is not None else SandboxError("gone", kind="sandbox_died").info()
        return Trajectory(task_id="x", group_id="g", sample_index=i, policy_version=0, turns=turns,
                          reward=reward, error=err, branch=info)  # fmt: skip

    # rewards 1, 0, 0, 1: mean 0.5, sample std sqrt(1/3) -> +-0.5 * sqrt(3) = +-0.8660...
    adv = compute_advantages([traj(0, 1.0), traj(1, 0.0), traj(2, 0.0), traj(3, 1.0)])
    assert adv == pytest.approx([0.8660239, -0.8660239, -0.8660239, 0.8660239], abs=1e-6)
    # a branch whose sandbox died has no advantage and is left out of its siblings' baseline
    adv = compute_advantages([traj(0, 1.0), traj(1, None), traj(2, 0.0)])
    assert adv[1] is None and adv[0] == pytest.approx(0.7071058, abs=1e-6)
    assert adv[2] == pytest.approx(-0.7071058, abs=1e-6)


async def test_trunk_that_submits_at_once_falls_back_to_independent_episodes(grader: Grader) -> None:
    policy = ScriptedPolicy([call("submit")])
    group = scored(await rollout_branched(
        policy, lambda: tool_env(grader), task(), 3, point="first_obs", params=PARAMS, group_id="g",
        max_context_tokens=4096,
    ))  # fmt: skip
    assert [t.sample_index for t in group] == [0, 1, 2]
    assert all(t.ok and t.reward is not None and t.reward.outcome == 0.0 for t in group)
    assert group[0].branch is not None and group[0].branch.fallback
    assert group[1].branch is None and group[2].branch is None
    assert len(policy.calls) == 3  # one trunk + two independent episodes, each one turn from the task
    for t in group:  # whole episodes: nothing is masked as a prefix
        assert [u.role for u in t.turns] == ["prompt", "policy"]
        assert sum(t.completion()[1]) == len(t.turns[1].token_ids)
    m = branch_metrics([group], branching=True)
    assert m["rollout/branch_fallbacks"] == 1 and m["rollout/branch_groups"] == 0


async def test_first_failure_branches_at_the_failing_test_run(grader: Grader) -> None:
    def respond(prompt: str, index: int) -> str:
        turn = n_calls(prompt)
        if turn == 0:
            return call("bash", command="ls")  # succeeds: no branch yet
        if turn == 1:
            return call("run_tests")  # the buggy add() fails: branch here
        if turn == 2:
            return call("write_file", path="solution.py", content=FIXED if index % 2 else "x = 1\n")
        return call("submit")

    group = scored(await rollout_branched(
        ScriptedPolicy(respond), lambda: tool_env(grader), task(), 2, point="first_failure", params=PARAMS,
        group_id="g", max_context_tokens=4096, batch_window_s=60.0,
    ))  # fmt: skip
    assert all(t.ok for t in group), [t.error for t in group]
    for t in group:
        assert t.branch is not None and t.branch.point == "first_failure" and not t.branch.fallback
        assert t.branch.prefix_turns == 2
        assert "FAILED" in t.turns[4].text and t.turns[4].role == "prompt"  # the failing run is shared
        assert [u.role for u in t.turns[5:]] == ["policy", "env", "policy"]
    assert sorted(t.reward.outcome for t in group if t.reward) == [0.0, 1.0]


async def test_first_failure_without_a_failure_falls_back(grader: Grader) -> None:
    script = [call("write_file", path="solution.py", content=FIXED), call("run_tests"), call("submit")]

    def respond(prompt: str, index: int) -> str:
        return script[min(n_calls(prompt), 2)]

    group = scored(await rollout_branched(
        ScriptedPolicy(respond), lambda: tool_env(grader), task(), 2, point="first_failure", params=PARAMS,
        group_id="g", max_context_tokens=4096,
    ))  # fmt: skip
    assert group[0].branch is not None and group[0].branch.fallback
    assert [u.role for u in group[0].turns] == ["prompt", "policy", "env", "policy", "env", "policy"]
    assert all(t.reward is not None and t.reward.outcome == 1.0 for t in group)


async def test_failed_fork_and_dead_branch_are_data_and_every_fork_is_closed(grader: Grader) -> None:
    forks: list[Sandbox] = []
    made: list[Sandbox] = []

    async def opener(config: SandboxConfig, files):  # type: ignore[no-untyped-def]
        box = await open_sandbox(config, files)
        made.append(box)
        real_fork = box.fork

        async def fork() -> Sandbox:
            n = len(forks)
            forks.append(box)
            if n == 1:  # injected infrastructure failure: the second fork fails
                raise SandboxError("injected fork failure", kind="injected")
            child = await real_fork()
            made.append(child)
            if n == 2:  # the third branch gets a sandbox that is already dead
                await child.close()
            return child

        box.fork = fork  # type: ignore[method-assign]
        return box

    def respond(prompt: str, index: int) -> str:
        return [call("bash", command="echo hi"), call("write_file", path="solution.py", content=FIXED),
                call("submit")][min(n_calls(prompt), 2)]  # fmt: skip

    env_cfg = EnvConfig(kind="tool")
    group = scored(await rollout_branched(
        ScriptedPolicy(respond), lambda: ToolEnv(grader, env_cfg, SandboxConfig(), opener=opener), task(), 3,
        point="first_obs", params=PARAMS, group_id="g", max_context_tokens=4096,
    ))  # fmt: skip
    assert group[0].ok and group[0].reward is not None and group[0].reward.outcome == 1.0
    assert group[1].error is not None and group[1].error.kind == "fork_failed"
    assert group[2].error is not None and group[2].error.kind == "closed"
    assert group[1].reward is None and group[2].reward is None
    assert all(t.branch is not None and not t.branch.fallback for t in group)
    assert compute_advantages(group) == [0.0, None, None]  # one valid sibling: no baseline
    assert len(made) == 3  # the trunk's sandbox and two forks, all closed afterwards
    assert all(box._closed for box in made)  # type: ignore[attr-defined]


async def test_an_environment_that_cannot_fork_plays_its_trunk_to_the_end() -> None:
    envs: list[ShellEnv] = []

    def make() -> ShellEnv:
        envs.append(ShellEnv(turns=2))
        return envs[-1]

    group = scored(await rollout_branched(
        ScriptedPolicy(["ab"]), make, task(), 3, point="first_obs", params=PARAMS, group_id="g",
        max_context_tokens=4096,
    ))  # fmt: skip
    assert all(t.ok for t in group), [t.error for t in group]
    assert group[0].branch is not None and group[0].branch.fallback
    assert [sum(u.role == "policy" for u in t.turns) for t in group] == [2, 2, 2]  # whole episodes
    assert len(envs) == 3 and all(e.closed for e in envs)
