"""A harness program cannot take more of the trainer than its episode's budget: calls, `n` and generations
are bounded by `env.max_turns` and `env.harness_max_n`, a session past its budget is ended and graded,
and a huge message is refused before it is tokenised, so other sessions go on (real local servers)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from trialground.envs.config import EnvConfig
from trialground.envs.harness import BUDGET_EXHAUSTED, HarnessEnv, harness_sandbox_config
from trialground.gateway.budget import SessionBudget
from trialground.gateway.episode import harness_group
from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams
from trialground.rollout.scoring import score
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.reward.rubric import Rubric

VENV = str(Path(sys.executable).parent.parent)
HI = {"messages": [{"role": "user", "content": "hi"}]}

# Forty calls of n=64 (the review's 2,560 generations), errors ignored, then it lingers.
FLOOD = r"""
import time
from openai import OpenAI
client = OpenAI(max_retries=0)
for _ in range(40):
    try:
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], n=64)
    except Exception:
        pass
    try:
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], n=2)
    except Exception:
        pass
open(".trialground_answer", "w").write("too late")
time.sleep(300)
"""


@pytest.fixture
async def tcp_gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


def _policy() -> ScriptedPolicy:
    return ScriptedPolicy(["pong"], tokenizer=load_tokenizer("tiny-agent"))


async def test_calls_n_and_generations_past_the_budget_are_refused_and_end_the_session(
    tcp_gateway: Gateway,
) -> None:
    policy = _policy()
    budget = SessionBudget.for_episode(max_turns=3, max_n=2, max_new_tokens=8, inflight=4)
    session = Session(policy, SamplingParams(max_new_tokens=8), "policy", budget=budget)
    ep = tcp_gateway.open(session)
    headers = {"Authorization": f"Bearer {ep.key}"}
    async with httpx.AsyncClient(base_url=tcp_gateway.url + ep.path, headers=headers, timeout=60) as client:
        r = await client.post("/chat/completions", json={**HI, "n": 64})
        assert r.status_code == 400 and "at most 2 choices" in r.text
        assert not session.ended.is_set()
        for _ in range(3):
            assert (await client.post("/chat/completions", json={**HI, "n": 2})).status_code == 200
        r = await client.post("/completions", json={"prompt": "hi", "n": 1})
        assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exhausted"
        assert session.ended.is_set() and "3 model calls" in (session.spent.exhausted or "")
        assert (await client.post("/chat/completions", json=HI)).status_code == 429
    assert sum(len(g) for g in policy.calls) > 0
    assert len(policy.calls) == 6  # 3 calls x n=2 rows reached the policy, nothing after


async def test_a_huge_message_is_refused_before_tokenising_and_others_go_on(tcp_gateway: Gateway) -> None:
    """A 40 MB message in a session with a context budget is a 400 without being tokenised (it held the
    event loop for 73-90 s before); another session's call is answered meanwhile."""
    big, small = (
        Session(_policy(), SamplingParams(max_new_tokens=8), "policy", max_context_tokens=1024)
        for _ in range(2)
    )
    a, b = tcp_gateway.open(big), tcp_gateway.open(small)
    body = {"messages": [{"role": "user", "content": "x" * 40_000_000}]}
    async with httpx.AsyncClient(base_url=tcp_gateway.url, timeout=300) as client:
        flood = asyncio.create_task(
            client.post(a.path + "/chat/completions", json=body, headers={"Authorization": f"Bearer {a.key}"})
        )
        other = await client.post(
            b.path + "/chat/completions", json=HI, headers={"Authorization": f"Bearer {b.key}"}
        )
        assert other.status_code == 200
        r = await flood
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert big.truncated and not small.truncated


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")
async def test_a_flooding_program_is_stopped_at_its_budget_and_graded(tmp_path: Path) -> None:
    gateway = Gateway()
    (tmp_path / "flood.py").write_text(FLOOD)
    tmp_path.chmod(0o755)
    env_config = EnvConfig(
        kind="harness", harness_command="python -m flood", harness_dir=str(tmp_path), harness_venv=VENV,
        max_episode_s=240, max_turns=3, harness_max_n=2,
    )  # fmt: skip
    sandbox = harness_sandbox_config(SandboxConfig(), env_config, str(gateway.socket_dir))
    grader = make_grader(sandbox, RewardConfig())
    task = Task(prompt="ping", domain="probe", verifier=VerifierSpec(kind="exact", params={"answer": "x"}))
    policy = _policy()
    try:
        await gateway.start()
        (traj,) = await harness_group(
            gateway, policy, lambda: HarnessEnv(grader, env_config, sandbox), task, 1,
            params=SamplingParams(max_new_tokens=8), group_id="g", max_context_tokens=512,
        )  # fmt: skip
    finally:
        await grader.close()
        await gateway.stop()
    assert traj.error is None, traj.error
    assert traj.finish_reason == BUDGET_EXHAUSTED  # stopped, not left to its 300 s sleep or the time limit
    assert len(policy.calls) <= 3 * 2  # generations drawn: at most max_turns x harness_max_n
    traj = score(Rubric.from_config(RewardConfig()), traj)
    assert traj.reward is not None and traj.reward.outcome == 0.0
