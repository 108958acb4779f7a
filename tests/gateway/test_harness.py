"""env.kind=harness in real bubblewrap sandboxes: the program (outside the package) runs in the task's
workspace with the prompt on stdin and in TRIALGROUND_PROMPT, reaches the gateway and nothing else, and
the task's grader grades what it leaves; the example ReAct program drives a policy through the SDK."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from trialground.envs.config import EnvConfig
from trialground.envs.harness import HarnessEnv, harness_sandbox_config
from trialground.families.agent.source import agent_tasks
from trialground.gateway.episode import harness_group
from trialground.gateway.server import Gateway
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams
from trialground.rollout.scoring import score
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.reward.rubric import Rubric

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap")
ROOT = Path(__file__).resolve().parents[2]
VENV = str(Path(sys.executable).parent.parent)

PROBE = r"""
import os, socket, sys
from openai import OpenAI
prompt = sys.stdin.read()
out = [f"stdin={prompt == os.environ['TRIALGROUND_PROMPT']}", f"cwd={os.getcwd()}"]
for host, port in [("127.0.0.1", int(os.environ["HOST_PORT"])), ("10.0.2.2", 80), ("1.1.1.1", 53)]:
    try:
        socket.create_connection((host, port), timeout=2).close()
        out.append(f"{host}=open")
    except OSError:
        out.append(f"{host}=refused")
try:
    open("/run/trialground-gateway/x", "w")
    out.append("socketdir=writable")
except OSError:
    out.append("socketdir=readonly")
try:  # the sockets' names are capabilities: another episode's must not be listed
    os.listdir("/run/trialground-gateway")
    out.append("socketdir=listed")
except OSError:
    out.append("socketdir=unlisted")
client = OpenAI(max_retries=0)
reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt}])
out.append("reply=" + (reply.choices[0].message.content or ""))
open("solution.txt", "w").write(" ".join(out))
"""


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway()
    yield gw
    await gw.stop()


def _host_listener() -> tuple[socket.socket, int]:
    """A TCP listener on the host's loopback that must stay out of the sandbox's reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    threading.Thread(target=lambda: [srv.accept()[0].close() for _ in range(8)], daemon=True).start()
    return srv, srv.getsockname()[1]


async def test_the_program_reaches_the_gateway_only_and_is_graded(gateway: Gateway, tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    tmp_path.chmod(0o755)  # the sandbox's uid reads the program
    srv, port = _host_listener()
    env_config = EnvConfig(
        kind="harness", harness_command=f"HOST_PORT={port} python -m probe", harness_dir=str(tmp_path),
        harness_venv=VENV, max_episode_s=120,
    )  # fmt: skip
    sandbox = harness_sandbox_config(SandboxConfig(), env_config, str(gateway.socket_dir))
    grader = make_grader(sandbox, RewardConfig())
    await gateway.start()
    want = (
        "stdin=True cwd=/workspace 127.0.0.1=refused 10.0.2.2=refused 1.1.1.1=refused "
        "socketdir=readonly socketdir=unlisted reply=pong"
    )
    task = Task(
        prompt="ping", domain="probe",
        verifier=VerifierSpec(kind="exact", params={"answer": want}),
    )  # fmt: skip
    policy = ScriptedPolicy(["pong"], tokenizer=load_tokenizer("tiny-agent"))
    command = env_config.harness_command + " && cp solution.txt .trialground_answer"
    env_config_answer = env_config.model_copy(update={"harness_command": command})
    try:
        (traj,) = await harness_group(
            gateway, policy, lambda: HarnessEnv(grader, env_config_answer, sandbox), task, 1,
            params=SamplingParams(), group_id="g", max_context_tokens=512,
        )  # fmt: skip
    finally:
        srv.close()
        await grader.close()
    assert traj.error is None, traj.error
    assert traj.finish_reason == "exited"
    traj = score(Rubric.from_config(RewardConfig()), traj)
    assert (
        traj.reward is not None and traj.reward.outcome == 1.0
    )  # the exact answer above, every probe as wanted
    assert [t.role for t in traj.turns] == ["prompt", "policy"]
    assert traj.turns[1].token_ids[-1] == policy.tokenizer.eos_token_id


async def test_the_example_program_drives_the_policy_over_several_calls(gateway: Gateway) -> None:
    task = next(t for t in agent_tasks(20, 0, "train") if t.domain == "data")
    answer = task.verifier.params["answer"]
    script = [
        '<tool_call>{"name": "bash", "arguments": {"command": "cat orders.csv"}}</tool_call>',
        '<tool_call>{"name": "read_file", "arguments": {"path": "prices.csv"}}</tool_call>',
        '<tool_call>{"name": "submit", "arguments": {"answer": "' + str(answer) + '"}}</tool_call>',
    ]
    env_config = EnvConfig(
        kind="harness", harness_command="python -m react_agent --max-turns 6",
        harness_dir=str(ROOT / "examples" / "harness"), harness_venv=VENV, max_episode_s=120,
    )  # fmt: skip
    sandbox = harness_sandbox_config(SandboxConfig(), env_config, str(gateway.socket_dir))
    grader = make_grader(sandbox, RewardConfig())
    await gateway.start()
    policy = ScriptedPolicy(script, tokenizer=load_tokenizer("tiny-agent"))
    try:
        trajs = await harness_group(
            gateway, policy, lambda: HarnessEnv(grader, env_config, sandbox), task, 1,
            params=SamplingParams(), group_id="g", max_context_tokens=2048, tool_role="user",
        )  # fmt: skip
    finally:
        await grader.close()
    (traj,) = trajs
    traj = score(Rubric.from_config(RewardConfig()), traj)
    assert traj.error is None and traj.reward is not None and traj.reward.outcome == 1.0
    roles = [t.role for t in traj.turns]
    assert roles == ["prompt", "policy", "env", "policy", "env", "policy"]  # 3 calls, one trajectory
    sampled = [t.token_ids for t in traj.turns if t.role == "policy"]
    assert [len(s) for s in sampled] == [len(c) for c in sampled] and all(
        s[-1] == policy.tokenizer.eos_token_id for s in sampled
    )
    # the env turn holds the tool's output as the program sent it: `cat orders.csv`'s text
    env_text = policy.tokenizer.decode(list(traj.turns[2].token_ids))
    assert ("[exit 0]" in env_text and "A43" in env_text) or "order" in env_text.lower()


def test_a_virtualenv_under_a_path_the_sandbox_mounts_is_shown_elsewhere() -> None:
    from trialground.envs.harness import VENV_MOUNT, venv_target

    assert venv_target("/tmp/checkout/.venv") == VENV_MOUNT  # the sandbox has its own /tmp
    assert venv_target("/opt/checkout/.venv") == "/opt/checkout/.venv"  # its scripts name this path
