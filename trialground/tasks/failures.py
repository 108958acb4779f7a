"""Failures observed outside training, turned into tasks: the closed loop "evaluation -> failure
attribution -> task construction -> retraining" for interactions recorded in deployment or review.

    trialground tasks from-failures failures.jsonl --out online.jsonl
    trialground train examples/agent.yaml --set 'tasks.regression_files=[online.jsonl]'

One JSON object per line of FILE (`FailureRecord`): the prompt the model saw (or the chat log, `messages`
in the OpenAI format, whose last assistant message is the failed response, with the `outcome` that showed
it failed: a failed test, a thumbs-down, an exit code), the workspace files it had,
and what a correct answer must satisfy -- either `check` (a pytest-style file of `test_*` functions run
against `solution_path` as hidden tests, graded by `code_tests`) or `answer` (graded `exact`); plus
`origin` (where it was observed) and optionally the model's failed `response`. Each record becomes one
train-split task whose metadata carries its provenance (`origin`, `failure_record`: the line number,
`failure_sha`: a hash of the line). Validation happens here, before any run: the record's fields are
typed, file names are checked by the task model, a check must parse and define at least one test, and a
recorded `response` must not already satisfy an `answer` (it would not be a failure). A bad line is an
error that names it; nothing is written then.

A run with `tasks.regression_files` puts these tasks in its regression queue at the start (reason
`online_failure` in `regressions.jsonl`); they are drawn with `tasks.regression_weight` until passed
`tasks.regression_passes` times, and every step that draws them logs `regressions/online_episodes` and
`regressions/online_pass_rate`; the report's regression table shows their later attempts.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trialground.errors import TaskError
from trialground.tasks.checks import test_function_names
from trialground.tasks.io import STDIN_NAME
from trialground.tasks.model import Task, VerifierSpec

ORIGIN_KEY = "origin"
RECORD_KEY = "failure_record"


class ChatMessage(BaseModel):
    """One message of a chat log in the OpenAI format: a role and a text (or a list of parts whose
    `text` fields are joined)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    role: str = Field(pattern=r"^(system|developer|user|assistant|tool)$", description="Who wrote it")
    content: str | list[dict[str, object]] | None = Field(None, description="Its text or content parts")

    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))
        return self.content or ""


class Outcome(BaseModel):
    """What showed the interaction failed, kept as provenance: e.g. `failed_test`, `thumbs_down`,
    `exit_code`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(min_length=1, max_length=64, description="failed_test, thumbs_down, exit_code, ...")
    detail: str = Field("", max_length=2000, description="The failing test, the user's note, the status...")


class FailureRecord(BaseModel):
    """One recorded failed interaction: a `prompt`, or a chat log (`messages`, OpenAI format) whose last
    assistant message is the failed response."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str | None = Field(None, min_length=1, description="What the model was asked")
    messages: tuple[ChatMessage, ...] | None = Field(
        None, min_length=1, description="The chat log instead of a prompt (OpenAI message format)"
    )
    outcome: Outcome | None = Field(None, description="What showed it failed (provenance)")
    reference: str | None = Field(None, description="A correct solution for `check` (validation runs it)")
    files: dict[str, str] = Field(default_factory=dict, description="Workspace files it had")
    check: str | None = Field(
        None, description="Hidden tests (pytest-style test_* functions) a fix must pass"
    )
    solution_path: str = Field("solution.py", description="The file the check imports")
    answer: str | None = Field(None, min_length=1, description="The expected answer (graded exact)")
    domain: str = Field("online", min_length=1, description="Domain of the task")
    origin: str = Field(min_length=1, description="Where the failure was observed")
    response: str | None = Field(None, description="What the model answered (kept as provenance)")

    @model_validator(mode="after")
    def _one_target(self) -> FailureRecord:
        if (self.check is None) == (self.answer is None):
            raise ValueError("give exactly one of `check` (hidden tests) or `answer`")
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of `prompt` or `messages` (a chat log)")
        if self.messages is not None and not any(m.role == "user" for m in self.messages):
            raise ValueError("messages: the chat log has no user message")
        return self

    def asked(self) -> tuple[str, str | None]:
        """(the prompt, the failed response): from a chat log, every message before the last assistant
        message (each as `ROLE: text`), and that message's text."""
        if self.messages is None:
            assert self.prompt is not None
            return self.prompt, self.response
        msgs = list(self.messages)
        last = max((i for i, m in enumerate(msgs) if m.role == "assistant"), default=len(msgs))
        before = msgs[:last] if any(m.role == "user" for m in msgs[:last]) else msgs
        prompt = "\n\n".join(f"{m.role.upper()}: {m.text()}" for m in before)
        response = self.response if self.response is not None or last == len(msgs) else msgs[last].text()
        return prompt, response


def _task(record: FailureRecord, line_no: int, sha: str) -> Task:
    meta: dict[str, str | int] = {ORIGIN_KEY: record.origin, RECORD_KEY: line_no, "failure_sha": sha}
    if record.outcome is not None:
        meta |= {"outcome": record.outcome.kind, "outcome_detail": record.outcome.detail[:500]}
    prompt, response = record.asked()
    if record.check is not None:
        try:
            names = test_function_names(record.check)
        except Exception as e:
            raise ValueError(f"check does not parse: {e}") from None
        if not names:
            raise ValueError("check defines no test_* function")
        verifier = VerifierSpec(
            kind="code_tests", params={"solution_path": record.solution_path, "expected_tests": len(names)}
        )
        hidden = {"test_online_failure.py": record.check}
    else:
        assert record.answer is not None
        if response is not None and response.strip() == record.answer.strip():
            raise ValueError("the recorded response already equals the answer: not a failure")
        verifier = VerifierSpec(kind="exact", params={"answer": record.answer})
        hidden = {}
    return Task(
        domain=record.domain,
        prompt=prompt,
        files=record.files,
        hidden_checks=hidden,
        reference=record.answer if record.answer is not None else record.reference,
        verifier=verifier,
        split="train",
        metadata=meta,
    )


def tasks_from_failures(path: str | Path) -> list[Task]:
    """Every record of `path` (`-`: standard input) as a validated task; raises `TaskError` naming the
    first bad line."""
    out: list[Task] = []
    if str(path) == "-":
        path = STDIN_NAME
        read = sys.stdin.buffer.read
    else:
        read = Path(path).read_bytes
    try:
        lines = read().decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{path}: cannot read: {e}", kind="bad_file") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = FailureRecord.model_validate(json.loads(line))
            out.append(_task(record, n, hashlib.sha256(line.encode()).hexdigest()[:16]))
        except (json.JSONDecodeError, ValidationError, ValueError) as e:
            reason = str(e).splitlines()[0] if not isinstance(e, ValidationError) else _first(e)
            raise TaskError(f"{path}:{n}: {reason}", kind="bad_record") from None
    if not out:
        raise TaskError(f"{path}: no failure records", kind="bad_file")
    return out


def _first(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{'.'.join(map(str, err['loc'])) or 'record'}: {err['msg']}"


def is_online_failure(task: Task) -> bool:
    return RECORD_KEY in task.metadata
