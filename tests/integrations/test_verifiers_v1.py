"""trialground's verifiers 0.4 taskset (`trialground-verifiers`, trialground.integrations.verifiers_v1)
through verifiers' own plugin loader and scoring: right, wrong and hacking replies graded in real sandboxes.
Runs where verifiers >= 0.4 is installed (the project pins 0.4.0; see docs/verifiers.md)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.tasks.sources import load_source

pytest.importorskip("verifiers.v1.utils.loaders", reason="verifiers >= 0.4 is not installed")

import verifiers.v1 as vf
from scripted_openai import ScriptedOpenAI
from verifiers.v1.utils.loaders import load_taskset

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

TASKSET_ID = "trialground-verifiers"


def _trace(task: Any, reply: str) -> Any:
    return vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(), name="solver"),
        root_reply=reply,
    )


def _fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}```"


def test_the_taskset_loads_by_id_and_grades_replies() -> None:
    config = vf.EnvConfig.model_validate({"taskset": {"id": TASKSET_ID, "tasks": "codegen", "n": 3}}).taskset
    assert type(config).__name__ == "TrialgroundTasksetConfig"
    taskset = load_taskset(config)
    tasks = list(taskset)
    good, wrong, hack = load_source("codegen", n=3)
    assert [t.data.task_id for t in tasks] == [good.id, wrong.id, hack.id]
    assert tasks[0].data.prompt == good.prompt and tasks[0].key == tasks[0].hash
    replies = [
        _fenced(good.reference or ""),
        _fenced("def f(xs):\n    return None\n"),
        _fenced("import os\ndef f(*a):\n    os._exit(0)\n"),  # leave before the checks can fail
    ]
    traces = [_trace(task, reply) for task, reply in zip(tasks, replies, strict=True)]

    async def score_all() -> None:
        for task, trace in zip(tasks, traces, strict=True):
            await task.score(trace)

    asyncio.run(score_all())
    right, failed, hacked = traces
    assert right.rewards["trialground"].score >= 1.0 and right.metrics["trialground_passed"] == 1.0
    assert right.reward == right.rewards["trialground"].score
    assert failed.rewards["trialground"].score == 0.0 and failed.metrics["trialground_passed"] == 0.0
    assert hacked.rewards["trialground"].score == 0.0 and hacked.metrics["trialground_flagged"] == 1.0
    assert right.info["trialground"]["passed"] is True and right.info["trialground"]["task_id"] == good.id
    right.model_dump_json()  # the trace still serializes (traces.jsonl)


def test_an_infrastructure_failure_is_an_error_not_a_zero() -> None:
    sandbox = {"backend": "remote", "remote_url": "http://127.0.0.1:9"}  # nothing listens there
    config = vf.EnvConfig.model_validate(
        {"taskset": {"id": TASKSET_ID, "tasks": "codegen", "n": 1, "sandbox": sandbox}}
    ).taskset
    [task] = list(load_taskset(config))
    trace = _trace(task, _fenced("def f(xs):\n    return xs\n"))
    with pytest.raises(vf.TaskError, match="gave no reward"):
        asyncio.run(task.score(trace))
    assert trace.info["trialground"]["error"]


BIN = str(Path(sys.executable).parent)  # the environment's own uv (the dev extra), else one on PATH
UV_PATH = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.skipif(
    shutil.which("uv", path=UV_PATH) is None, reason="verifiers' harness programs run through uv"
)
def test_vf_eval_runs_the_taskset_end_to_end(tmp_path: Path) -> None:
    """`vf-eval trialground-verifiers`: verifiers' null harness (one chat turn, its program run by uv in a
    subprocess runtime) asks a scripted model; trialground grades each reply in a sandbox."""
    good, wrong = load_source("codegen", n=2)
    answers = {
        good.prompt: _fenced(good.reference or ""),
        wrong.prompt: _fenced("def f(xs):\n    return []\n"),
    }
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PATH": UV_PATH, "PYTHONPATH": str(root), "PRIME_API_KEY": "not-a-real-key"}
    with ScriptedOpenAI(answers) as server:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "vf-eval"), "trialground-verifiers",
                "--env.taskset.tasks", "codegen", "--env.taskset.n", "2",
                "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
                "-m", "scripted", "--client.base-url", server.base_url, "--no-push", "-o", str(tmp_path),
            ],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [traces] = list(tmp_path.glob("*/traces.jsonl"))
    rollouts = [json.loads(line) for line in traces.read_text().splitlines()]
    by_task = {r["task"]["data"]["task_id"]: r["traces"][0] for r in rollouts}
    assert by_task[good.id]["rewards"]["trialground"]["score"] >= 1.0
    assert by_task[good.id]["metrics"]["trialground_passed"] == 1.0
    assert by_task[wrong.id]["rewards"]["trialground"]["score"] == 0.0
    assert by_task[wrong.id]["metrics"]["trialground_passed"] == 0.0
