"""env.harness_preload: the program runs forked from an interpreter that imported the named modules
before any episode, with the virtualenv's sys.path, prefix and executable, its prompt on stdin and its
exit status; the grader's commands do not see the modules; commands bash must run are refused up front."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from trialground.envs.config import EnvConfig
from trialground.envs.harness import HarnessEnv, harness_sandbox_config, python_plan
from trialground.errors import EnvError
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
VENV = str(Path(sys.executable).parent.parent)

PROBE = r"""
import os, sys
preloaded = "openai" in sys.modules  # before this program imported anything of its own
from openai import OpenAI
prompt = sys.stdin.read()
facts = [
    f"preloaded={preloaded}", f"stdin={prompt == os.environ['TRIALGROUND_PROMPT']}",
    f"argv={sys.argv[1:]}", f"cwd={os.getcwd()}", f"prefix={sys.prefix == os.environ['VIRTUAL_ENV']}",
    f"exe={sys.executable.startswith(os.environ['VIRTUAL_ENV'])}", f"path0={sys.path[0]}",
    f"flag={os.environ.get('TG_FLAG')}", f"marker={'TRIALGROUND_PRELOADED' in os.environ}",
]
client = OpenAI(max_retries=0)
reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt}])
facts.append("reply=" + (reply.choices[0].message.content or ""))
open(os.environ["TRIALGROUND_ANSWER_FILE"], "w").write(" ".join(facts))
sys.exit(int(os.environ.get("TG_EXIT", "0")))
"""
WANT = (
    "preloaded=True stdin=True argv=['--x', 'a b'] cwd=/workspace prefix=True exe=True path0=/workspace "
    "flag=on marker=False reply=pong"
)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway()
    yield gw
    await gw.stop()


def _env(tmp_path: Path, command: str, preload: list[str]) -> EnvConfig:
    (tmp_path / "probe.py").write_text(PROBE)
    tmp_path.chmod(0o755)
    return EnvConfig(
        kind="harness", harness_command=command, harness_dir=str(tmp_path), harness_venv=VENV,
        max_episode_s=120, harness_preload=preload,
    )  # fmt: skip


@pytest.mark.parametrize("exit_status", [0, 3])
async def test_the_program_runs_forked_with_its_modules_preloaded(
    gateway: Gateway, tmp_path: Path, exit_status: int
) -> None:
    command = f"TG_FLAG=on TG_EXIT={exit_status} python -m probe --x 'a b'"
    env_config = _env(tmp_path, command, ["openai"])
    sandbox = harness_sandbox_config(SandboxConfig(), env_config, str(gateway.socket_dir))
    assert sandbox.preload == ("openai",) and any(p.endswith("site-packages") for p in sandbox.preload_path)
    # the grader's own commands run in the same sandbox without the preloaded modules
    check = "import sys\nassert 'openai' not in sys.modules\n"
    task = Task(
        prompt="ping", domain="probe", files={"solution.py": "x"},
        verifier=VerifierSpec(kind="exact", params={"answer": WANT}),
    )  # fmt: skip
    grader = make_grader(sandbox, RewardConfig())
    await gateway.start()
    policy = ScriptedPolicy(["pong"], tokenizer=load_tokenizer("tiny-agent"))
    try:
        (traj,) = await harness_group(
            gateway, policy, lambda: HarnessEnv(grader, env_config, sandbox), task, 1,
            params=SamplingParams(), group_id="g", max_context_tokens=512,
        )  # fmt: skip
        env = HarnessEnv(grader, env_config, sandbox)
        await env.reset(task)
        assert env.sandbox is not None
        result = await env.sandbox.exec(["python3", "-c", check])
        await env.close()
    finally:
        await grader.close()
    assert result.exit_code == 0, result.stderr
    assert traj.error is None, traj.error
    assert traj.finish_reason == ("exited" if exit_status == 0 else "exited_nonzero")
    traj = score(Rubric.from_config(RewardConfig()), traj)
    assert traj.reward is not None and traj.reward.outcome == 1.0  # every fact as wanted


def test_without_preload_the_program_is_not_preloaded(tmp_path: Path) -> None:
    env_config = _env(tmp_path, "python -m probe", [])
    sandbox = harness_sandbox_config(SandboxConfig(), env_config, "/tmp")
    assert sandbox.preload == () and python_plan(env_config, sandbox) is not None


@pytest.mark.parametrize(
    "command",
    ["python -m probe && echo done", "python -m probe | tee log", "/usr/bin/env python -m probe",
     "bash -c 'python -m probe'", "python -X dev -m probe", "python $HOME/probe.py"],
)  # fmt: skip
def test_a_command_that_needs_bash_cannot_preload(tmp_path: Path, command: str) -> None:
    env_config = _env(tmp_path, command, ["openai"])
    with pytest.raises(EnvError, match="harness_preload"):
        harness_sandbox_config(SandboxConfig(), env_config, "/tmp")


def test_a_preload_name_must_be_a_module_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="harness_preload"):
        _env(tmp_path, "python -m probe", ["openai; import os"])
