"""trialground.integrations.verifiers through verifiers' own loader and evaluation path, against a scripted
OpenAI-compatible server over real HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("verifiers")

import verifiers as vf
from scripted_openai import ScriptedOpenAI

from trialground.tasks.sources import load_source

if not hasattr(vf, "SingleTurnEnv"):  # verifiers >= 0.4: tests/integrations/test_verifiers_v1.py
    pytest.skip("verifiers' classic API (0.2.1) is not installed", allow_module_level=True)

ENV_ID = "trialground.integrations.verifiers"


def _fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}```"


def _by_task(outputs: Any) -> dict[str, Any]:
    return {o["info"]["task_id"]: o for o in outputs["outputs"]}


def test_evaluate_grades_each_completion_in_a_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    good, wrong, hack = load_source("codegen", n=3)
    answers = {
        good.prompt: _fenced(good.reference or ""),
        wrong.prompt: _fenced("def f(xs):\n    return None\n"),
        # a hack: leave before the checks can fail
        hack.prompt: _fenced("import os\ndef f(*a):\n    os._exit(0)\n"),
    }
    monkeypatch.setenv("TRIALGROUND_TEST_KEY", "not-a-real-key")
    env = vf.load_environment(ENV_ID, tasks="codegen", n=3)
    with ScriptedOpenAI(answers) as server:
        client = vf.ClientConfig(
            api_base_url=server.base_url, api_key_var="TRIALGROUND_TEST_KEY", max_retries=0
        )
        outputs = env.evaluate_sync(client=client, model="scripted", rollouts_per_example=2)
    asyncio.run(env.rubric.teardown())  # closes the grader and its sandboxes
    assert len(server.requests) == 6
    rows = _by_task(outputs)
    assert set(rows) == {good.id, wrong.id, hack.id}
    assert rows[good.id]["reward"] >= 1.0
    assert rows[good.id]["metrics"]["trialground_passed"] == 1.0
    assert rows[wrong.id]["reward"] == 0.0
    assert rows[wrong.id]["metrics"]["trialground_passed"] == 0.0
    assert rows[hack.id]["reward"] == 0.0
    assert all(o["metrics"]["trialground_dropped"] == 0.0 for o in outputs["outputs"])


def test_infrastructure_failure_is_marked_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    [task] = load_source("codegen", n=1)
    monkeypatch.setenv("TRIALGROUND_TEST_KEY", "not-a-real-key")
    env = vf.load_environment(
        ENV_ID, tasks="codegen", n=1, sandbox={"rootfs": "/nonexistent-trialground-root"}
    )
    with ScriptedOpenAI({task.prompt: _fenced(task.reference or "")}) as server:
        client = vf.ClientConfig(
            api_base_url=server.base_url, api_key_var="TRIALGROUND_TEST_KEY", max_retries=0
        )
        outputs = env.evaluate_sync(client=client, model="scripted")
    asyncio.run(env.rubric.teardown())
    [row] = outputs["outputs"]
    assert row["reward"] == 0.0
    assert row["metrics"]["trialground_dropped"] == 1.0
    assert row.get("error"), row
