"""One generic registry serves every open set (verifier kinds, task sources, policy and sandbox backends,
judges, rubric parts), each entry with its own params model; a verifier receives its validated params."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trialground.errors import TaskError
from trialground.policy.factory import BACKENDS as POLICY_BACKENDS
from trialground.registry import Registry
from trialground.sandbox.base import SandboxConfig
from trialground.sandbox.factory import BACKENDS as SANDBOX_BACKENDS
from trialground.tasks import sources
from trialground.tasks.io import read_tasks
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.verifiers import KINDS, NumericParams, Params, VerifierKind
from trialground.verify.grader import make_grader
from trialground.verify.judges.config import (
    JUDGES,
    JudgeCaps,
    JudgeConfig,
    JudgeKind,
    OpenAIJudgeParams,
    make_judge,
)
from trialground.verify.judges.judge import Judge
from trialground.verify.kinds.request import VerifyRequest
from trialground.verify.reward.rubric import PARTS
from trialground.verify.verdict import Verdict

sys.path.insert(0, str(Path(__file__).parent / "tasks" / "plugin_fixture"))


def test_every_open_set_is_one_registry() -> None:
    for registry in (sources.SOURCES, JUDGES, KINDS, POLICY_BACKENDS, SANDBOX_BACKENDS, PARTS):
        assert isinstance(registry, Registry)
    assert {"codegen", "math", "hf", "swe"} <= set(sources.SOURCES.names())
    assert [s.name for s in sources.known()] == sources.SOURCES.names()
    assert set(JUDGES.names()) == {"hf_classifier", "openai"}
    assert {"exact", "numeric", "code_tests", "judge"} <= set(KINDS.names())


def test_task_sources_resolve_through_the_registry() -> None:
    assert sources.check_spec("codegen") == (sources.SOURCES.lookup("codegen"), "")
    found = sources.lookup("tg_user_plugin:WORDS:French")
    assert found is not None and found[1] == "French"
    assert sources.SOURCES.lookup("words") is found[0]  # a plugin is registered under its own name
    with pytest.raises(TaskError, match="did you mean 'codegen'"):
        sources.check_spec("codegn")
    with pytest.raises(ValueError, match="already registered"):
        sources.register(sources.TaskSource("codegen", lambda r: [], "another codegen"))


class _FixedParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    score: float = Field(0.25, ge=0.0, le=1.0)


class _FixedJudge(Judge):
    def __init__(self, params: _FixedParams) -> None:
        self.params = params

    async def score(self, task: Task, submission: str) -> float:
        return self.params.score


FIXED = JudgeKind(
    "fixed_for_tests",
    _FixedJudge,
    JudgeCaps(local_model=False),
    settings=_FixedParams,
    doc="a constant score",
)


async def test_judges_are_built_by_kind_from_their_typed_params() -> None:
    JUDGES.register(FIXED, replace=True)
    config = JudgeConfig(kind="fixed_for_tests")
    assert config.params == _FixedParams()  # the default lives in the kind's model
    judge = make_judge(config)
    assert isinstance(judge, _FixedJudge) and await judge.score(TASK, "x") == 0.25
    openai = JudgeConfig(kind="openai", base_url="http://127.0.0.1:1/v1", model="m")
    assert isinstance(openai.params, OpenAIJudgeParams) and openai.params.timeout_s == 60.0
    with pytest.raises(ValidationError, match="score: Input should be less than or equal to 1"):
        JudgeConfig(kind="fixed_for_tests", score=2)
    with pytest.raises(ValidationError, match=r"max_retrie: Extra inputs .*did you mean 'max_retries'"):
        JudgeConfig(kind="openai", base_url="http://x", model="m", max_retrie=3)
    with pytest.raises(ValidationError, match="unknown judge kind 'telepathy'"):
        JudgeConfig(kind="telepathy")


TASK = Task(domain="qa", prompt="q", verifier=VerifierSpec(kind="numeric", params={"answer": 3}))


def test_a_task_keeps_its_params_as_written_and_their_typed_form() -> None:
    typed = TASK.verifier.typed_params
    assert isinstance(typed, NumericParams) and typed.answer == 3
    assert typed.rel_tol == NumericParams.model_fields["rel_tol"].default  # the default, from the model
    assert TASK.verifier.params == {"answer": 3}  # the on-disk form is unchanged
    assert Task.model_validate(TASK.model_dump()) == TASK
    with pytest.raises(TaskError, match="params are NumericParams, not _EchoParams"):
        TASK.verifier.params_as(_EchoParams)


def test_a_wrong_typed_param_fails_when_the_task_loads_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="verifier 'numeric' params: rel_tol: Input should be a valid"):
        VerifierSpec(kind="numeric", params={"answer": 3, "rel_tol": "wide"})
    path = tmp_path / "tasks.jsonl"
    row = {"domain": "qa", "prompt": "q", "verifier": {"kind": "numeric", "params": {"answer": 3}}}
    bad = {**row, "verifier": {"kind": "numeric", "params": {"answer": 3, "abs_tol": [1]}}}
    path.write_text(json.dumps(row) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TaskError, match=r"tasks\.jsonl:2: verifier: .*abs_tol: Input should be a valid"):
        read_tasks(path)


class _EchoParams(Params):
    gold: str
    shout: bool = False


SEEN: list[BaseModel] = []


async def _echo(grader: object, req: VerifyRequest) -> Verdict:
    SEEN.append(req.params)
    assert isinstance(req.params, _EchoParams)
    want = req.params.gold.upper() if req.params.shout else req.params.gold
    return Verdict(passed=req.submission == want, score=float(req.submission == want))


ECHO = VerifierKind("echo_for_tests", _EchoParams, _echo, "the submission is the gold text")


async def test_the_verifier_receives_the_tasks_typed_params() -> None:
    KINDS.register(ECHO, replace=True)
    task = Task(domain="qa", prompt="q", verifier=VerifierSpec(kind="echo_for_tests", params={"gold": "hi"}))
    grader = make_grader(SandboxConfig())
    try:
        SEEN.clear()
        graded = await grader.grade(task, "hi")
    finally:
        await grader.close()
    assert graded.verdict.passed
    assert len(SEEN) == 1 and SEEN[0] == _EchoParams(gold="hi", shout=False)
    assert SEEN[0] is task.verifier.typed_params  # validated once, when the task was made
