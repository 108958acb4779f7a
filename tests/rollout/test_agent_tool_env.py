"""The agent loop over the real multi-turn tool environment: sandbox tools, hidden-test grading, and a
token context that is exactly the policy's ids plus masked observation turns."""

from __future__ import annotations

import pytest
from reward_helpers import scored

pytest.importorskip("torch", reason="uses the tiny tokenizer ([train] extra)")

from rollout_helpers import Recorder, tiny_policy

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.scripted.scripted import ScriptedPolicy
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import rollout, rollout_group
from trialground.sandbox.base import SandboxConfig
from trialground.verify.grader import make_grader


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return tiny_policy(tmp_path_factory.mktemp("tiny")).tokenizer


async def test_tool_episode_is_token_exact_and_graded(tokenizer) -> None:  # type: ignore[no-untyped-def]
    task = generate_codegen_tasks(1, seed=5, split="train")[0]
    assert task.reference is not None
    script = [
        format_tool_call("bash", {"command": "ls"}),
        format_tool_call("write_file", {"path": "solution.py", "content": task.reference}),
        format_tool_call("submit", {}),
    ]
    rec = Recorder(ScriptedPolicy(script, tokenizer=tokenizer))
    grader = make_grader(SandboxConfig())
    env = ToolEnv(grader, EnvConfig(kind="tool"), SandboxConfig())
    try:
        t = scored(
            await rollout(
                rec,
                env,
                task,
                params=SamplingParams(max_new_tokens=400),
                group_id="t",
                sample_index=0,
                max_context_tokens=4096,
            )
        )
    finally:
        await env.close()
        await grader.close()
    assert t.error is None, t.error
    assert t.reward is not None and t.reward.outcome == 1.0
    assert [u.role for u in t.turns] == ["prompt", "policy", "env", "policy", "env", "policy"]
    # each generation saw exactly the context built so far, and its ids were kept verbatim
    context = list(t.prompt_ids)
    for u in t.turns[1:]:
        if u.role == "policy":
            assert rec.take(context, u.token_ids).text == u.text
        context.extend(u.token_ids)
    env_turns = [u for u in t.turns if u.role == "env"]
    assert all(u.text in tokenizer.decode(list(u.token_ids)) for u in env_turns)
    ids, mask, _ = t.completion()
    assert sum(mask) == sum(len(u.token_ids) for u in t.turns if u.role == "policy")
    assert len(ids) - sum(mask) == sum(len(u.token_ids) for u in env_turns)


async def test_tool_group_one_bad_episode_does_not_hurt_siblings(tokenizer) -> None:  # type: ignore[no-untyped-def]
    task = generate_codegen_tasks(1, seed=6, split="train")[0]
    good = [
        format_tool_call("write_file", {"path": "solution.py", "content": task.reference}),
        format_tool_call("submit", {}),
    ]
    calls = iter(range(100))

    def respond(_prompt: str, _index: int) -> str:
        # every third message is garbage: answered as an invalid call, never an exception
        n = next(calls)
        return "not a tool call" if n % 3 == 2 else good[min(n % 3, 1)]

    grader = make_grader(SandboxConfig())
    try:
        group = scored(
            await rollout_group(
                ScriptedPolicy(respond, tokenizer=tokenizer),
                lambda: ToolEnv(grader, EnvConfig(kind="tool", max_turns=4), SandboxConfig()),
                task,
                2,
                params=SamplingParams(max_new_tokens=400),
                group_id="g",
                max_context_tokens=4096,
            )
        )
    finally:
        await grader.close()
    assert all(t.error is None for t in group), [t.error for t in group]
    assert all(t.reward is not None for t in group)
    observations = [u.text for t in group for u in t.turns if u.role == "env"]
    assert any("no tool call found" in o for o in observations)  # the garbage was answered, as data
