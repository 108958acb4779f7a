"""Agent-loop conformance: trained tokens are exactly the policy's tokens; budgets, timings, failures."""

from __future__ import annotations

import pytest
from reward_helpers import scored

pytest.importorskip("torch", reason="agent-loop tests use the tiny HF policy ([train] extra)")

from rollout_helpers import Recorder, ShellEnv, tiny_policy

from trialground.envs.single_turn import SingleTurnEnv
from trialground.errors import EnvError
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.scripted.scripted import ScriptedPolicy
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import rollout, rollout_group
from trialground.rollout.chat import ChatRenderer
from trialground.rollout.trajectory import Trajectory
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.grader import make_grader

# seed=None: the policy draws a fresh seed per call (a fixed seed would repeat samples across calls)
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=12)
TASK = Task(
    domain="code",
    prompt="Count the bytes you write.",
    verifier=VerifierSpec(kind="exact", params={"answer": "-"}),
)


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> HFPolicy:
    return tiny_policy(tmp_path_factory.mktemp("tiny"))


def _check_token_exact(t: Trajectory, rec: Recorder) -> None:
    """Every policy turn is verbatim what the policy returned for exactly the context before it."""
    context = list(t.prompt_ids)
    for turn in t.turns[1:]:
        if turn.role == "policy":
            gen = rec.take(context, turn.token_ids)
            assert turn.logprobs == gen.logprobs
        context.extend(turn.token_ids)
    ids, mask, logps = t.completion()
    policy_ids = [i for turn in t.turns if turn.role == "policy" for i in turn.token_ids]
    assert [i for i, m in zip(ids, mask, strict=True) if m] == policy_ids
    env_ids = [i for turn in t.turns if turn.role == "env" for i in turn.token_ids]
    assert [i for i, m in zip(ids, mask, strict=True) if not m] == env_ids
    assert [lp for lp, m in zip(logps, mask, strict=True) if m] == [
        lp for turn in t.turns if turn.role == "policy" for lp in turn.logprobs
    ]


async def test_single_turn_group_is_one_batched_call(policy: HFPolicy) -> None:
    task = generate_codegen_tasks(1, seed=3, split="train")[0]
    grader = make_grader(SandboxConfig())
    rec = Recorder(policy)
    group = scored(
        await rollout_group(
            rec, lambda: SingleTurnEnv(grader), task, 4, params=PARAMS, group_id="g", max_context_tokens=1024
        )
    )
    await grader.close()
    assert len(rec.calls) == 1 and len(rec.calls[0][0]) == 4  # one generate call, k prompts
    prompt = ChatRenderer(policy.tokenizer).prompt_ids([{"role": "user", "content": task.prompt}])
    assert [t.sample_index for t in group] == [0, 1, 2, 3]
    for t in group:
        assert t.error is None and t.reward is not None, t.error
        assert t.prompt_ids == prompt
        _check_token_exact(t, rec)
        assert all(m == 1 for m in t.completion()[1])
        assert {"reset_s", "generate_s", "env_s", "total_s"} <= set(t.timings)
        assert t.policy_version == policy.version
    # sampling in one batch gives k different samples
    assert len({t.turns[1].token_ids for t in group}) > 1


async def test_multi_turn_appends_verbatim_and_masks_observations(policy: HFPolicy) -> None:
    rec = Recorder(policy)
    envs: list[ShellEnv] = []

    def make() -> ShellEnv:
        envs.append(ShellEnv(turns=3))
        return envs[-1]

    group = scored(
        await rollout_group(
            rec, make, TASK, 3, params=PARAMS, group_id="m", max_context_tokens=2048, batch_window_s=5.0
        )
    )
    assert all(e.closed for e in envs)
    # a window longer than any env step: every turn's generations go out as one batched call
    assert [len(prompts) for prompts, _, _ in rec.calls] == [3, 3, 3]
    renderer = ChatRenderer(policy.tokenizer)
    for t in group:
        assert t.error is None and t.reward is not None and not t.truncated
        roles = [turn.role for turn in t.turns]
        assert roles == ["prompt", "policy", "env", "policy", "env", "policy"]
        _check_token_exact(t, rec)
        for turn in t.turns:
            if turn.role == "env":
                assert turn.token_ids[-len(renderer.observation_ids("", after=[0])) :]  # non-empty
                assert turn.text in policy.tokenizer.decode(list(turn.token_ids))
            if turn.role in ("policy", "env"):
                assert turn.seconds > 0


async def test_context_matches_the_chat_template(policy: HFPolicy) -> None:
    """With a policy that ends its turns with eos, the token context is the template's rendering of the
    whole conversation (ids of the policy's text, not a re-tokenisation of it)."""
    pol = ScriptedPolicy(["first answer", "second answer", "third"], tokenizer=policy.tokenizer)
    tok = pol.tokenizer
    t = scored(
        await rollout(
            pol, ShellEnv(turns=3), TASK, params=PARAMS, group_id="s", sample_index=0, max_context_tokens=2048
        )
    )
    assert t.ok
    context = [i for turn in t.turns for i in turn.token_ids]
    messages = [{"role": "user", "content": TASK.prompt}]
    for turn in t.turns[1:]:
        messages.append({"role": "assistant" if turn.role == "policy" else "user", "content": turn.text})
    expected = tok.apply_chat_template(messages, tokenize=False)
    # the template closes the last assistant turn with "<|end|>\n"; the policy stopped at its eos
    assert tok.decode(context) + "\n" == expected
    # eos ended each policy turn: the close marker was not written twice
    assert tok.decode(context).count("<|end|>") == len(messages)


async def test_context_budget_truncates_and_is_recorded(policy: HFPolicy) -> None:
    prompt_len = len(ChatRenderer(policy.tokenizer).prompt_ids([{"role": "user", "content": TASK.prompt}]))
    params = SamplingParams(temperature=1.0, max_new_tokens=40, seed=1)
    # single generation cut by the budget
    t = scored(
        await rollout(
            policy,
            ShellEnv(turns=1),
            TASK,
            params=params,
            group_id="b",
            sample_index=0,
            max_context_tokens=prompt_len + 5,
        )
    )
    assert t.truncated and len(t.turns[1].token_ids) <= 5
    assert len(t.prompt_ids) + len(t.completion()[0]) <= prompt_len + 5
    assert t.reward is not None  # a capped single turn is still graded
    # multi-turn: no room for the next turn -> ended ungraded; the rubric's truncation part pays outcome 0
    t2 = scored(
        await rollout(
            ScriptedPolicy(["a b c"], tokenizer=policy.tokenizer),
            ShellEnv(turns=5),
            TASK,
            params=params,
            group_id="b",
            sample_index=1,
            max_context_tokens=prompt_len + 12,
        )
    )
    assert t2.truncated and t2.finish_reason == "context_budget" and t2.end is None and t2.error is None
    finished = t2  # scored as the loop scores it: the rubric's truncation part
    assert finished.ok and finished.reward is not None and finished.reward.total == 0.0
    assert finished.reward.component("context_truncated") is not None
    assert len(t2.prompt_ids) + len(t2.completion()[0]) <= prompt_len + 12
    # a prompt over budget is an error, not a zero
    t3 = scored(
        await rollout(
            policy, ShellEnv(), TASK, params=params, group_id="b", sample_index=2, max_context_tokens=3
        )
    )
    assert t3.error is not None and t3.error.kind == "prompt_too_long" and t3.reward is None


async def test_failures_are_recorded_never_raised(policy: HFPolicy) -> None:
    # sibling 1's sandbox fails at its second step; the others finish
    fails = iter([None, 2, None])
    group = scored(
        await rollout_group(
            policy,
            lambda: ShellEnv(turns=2, fail_step=next(fails)),
            TASK,
            3,
            params=PARAMS,
            group_id="f",
            max_context_tokens=2048,
        )
    )
    assert [t.error is None for t in group] == [True, False, True]
    assert group[1].error is not None and group[1].error.boundary == "sandbox" and group[1].reward is None
    assert group[0].reward is not None and group[2].reward is not None

    # the policy fails: recorded as a policy error
    rec = Recorder(policy, fail_calls=[0])
    t = scored(
        await rollout(
            rec, ShellEnv(), TASK, params=PARAMS, group_id="f", sample_index=0, max_context_tokens=512
        )
    )
    assert t.error is not None and t.error.boundary == "policy" and not t.ok

    # the env factory fails for one sibling
    count = iter(range(3))

    def factory() -> ShellEnv:
        if next(count) == 0:
            raise EnvError("no environment available", kind="exhausted")
        return ShellEnv(turns=1)

    group = scored(
        await rollout_group(policy, factory, TASK, 3, params=PARAMS, group_id="f", max_context_tokens=512)
    )
    assert group[0].error is not None and group[0].error.kind == "exhausted"
    assert all(t.ok for t in group[1:])

    # grading failure reported by the environment in its final observation
    task = generate_codegen_tasks(1, seed=4, split="train")[0]

    class BrokenGrader:
        async def grade(self, *args: object, **kwargs: object) -> tuple:
            raise RuntimeError("grader exploded")

    t = scored(
        await rollout(
            policy,
            SingleTurnEnv(BrokenGrader()),
            task,
            params=PARAMS,
            group_id="f",
            sample_index=0,  # type: ignore[arg-type]
            max_context_tokens=1024,
        )
    )
    assert t.error is not None and t.error.boundary == "verifier" and t.reward is None
