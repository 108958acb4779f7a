"""The task model: what an agent is asked to do and how its answer is checked.

A `Task` is frozen data. Its `id` is a content hash of everything that defines it, so two tasks with
the same content have the same id wherever they were made.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from trialground.errors import TaskError
from trialground.sandbox.base import Limits

JSONScalar = str | int | float | bool | None

_NAME_MAX, _PART_MAX = 4096, 255
P = TypeVar("P", bound=BaseModel)


def check_file_name(name: str) -> str:
    """`name` when it is a task file name: a relative POSIX path of plain parts that stays beneath its
    directory (no leading `/`, no `..`, `.` or empty part, no NUL or other control character, parts of at
    most 255 bytes). Raises ValueError otherwise."""
    why = None
    if not name:
        why = "it is empty"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        why = "it has a NUL or control character"
    elif name.startswith("/"):
        why = "it is absolute"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        why = "it has an empty, '.' or '..' part"
    elif len(name) > _NAME_MAX or any(len(p.encode()) > _PART_MAX for p in name.split("/")):
        why = "it is too long"
    if why is not None:
        raise ValueError(f"file name {name!r} is refused: {why} (names are relative paths beneath the task)")
    return name


Split = Literal["train", "eval"]

EVAL_PER_MILLE = 200  # the share of every generated family's instance space that is held out, per mille


def split_of(key: str, *, namespace: str = "") -> Split:
    """The one train/eval rule of every task generator: a hash of the instance's key (what it asks, never
    its wording or incidental data), so an instance and its rewordings share a split and the two splits
    never meet. `namespace` keeps families' key spaces apart."""
    digest = int.from_bytes(hashlib.sha256((namespace + key).encode()).digest()[:8], "big")
    return "eval" if digest % 1000 < EVAL_PER_MILLE else "train"


class VerifierSpec(BaseModel):
    """Which verifier grades a task, and its parameters (e.g. the gold answer, a tolerance). `kind` is a
    registered kind or a plugin's dotted path (`trialground.tasks.verifiers`); `params` must validate
    against that kind's params model, so a typo or a missing gold answer fails when the task is made; the
    validated object (`typed_params`) is kept, and verifiers read it, never the raw `params` dict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(
        min_length=1, description="code_tests, math, exact, regex, numeric, check_program, judge, or a plugin"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Verifier parameters, JSON values")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        from trialground.tasks.verifiers import lookup

        try:
            lookup(kind)
        except TaskError as e:
            raise ValueError(str(e)) from None
        return kind

    _typed: BaseModel | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _valid_params(self) -> VerifierSpec:
        from trialground.tasks.verifiers import lookup

        try:
            self._typed = lookup(self.kind).validate(self.params)
        except TaskError as e:
            raise ValueError(str(e)) from None
        return self

    @property
    def typed_params(self) -> BaseModel:
        """`params` validated once, when the spec was made, into the kind's params model (defaults filled
        in): what the verifier reads."""
        if self._typed is None:  # built without validation (model_construct)
            from trialground.tasks.verifiers import lookup

            self._typed = lookup(self.kind).validate(self.params)
        return self._typed

    def params_as(self, model: type[P]) -> P:
        """`typed_params` as the `model` a verifier expects; a `TaskError` when the kind declares another."""
        typed = self.typed_params
        if not isinstance(typed, model):
            raise TaskError(
                f"verifier {self.kind!r}: params are {type(typed).__name__}, not {model.__name__}",
                kind="bad_task",
            )
        return typed


class Task(BaseModel):
    """One task. Hidden checks never enter the agent's sandbox; the verifier runs them afterwards."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field("", description="Content hash of the task; computed when empty")
    domain: str = Field(description="Domain, e.g. code, math, data, ops")
    prompt: str = Field(description="What the agent is asked")
    files: dict[str, str] = Field(default_factory=dict, description="Workspace files, path -> text")
    visible_checks: dict[str, str] = Field(
        default_factory=dict, description="Checks the agent may see and run, path -> text"
    )
    hidden_checks: dict[str, str] = Field(
        default_factory=dict, description="Checks run only by the grader, path -> text"
    )
    reference: str | None = Field(None, description="Reference solution (program or answer text)")
    verifier: VerifierSpec = Field(description="How the submission is graded")
    limits: Limits | None = Field(None, description="Sandbox limits for this task (default: the run's)")
    split: Literal["train", "eval"] = Field("train", description="Which split the task belongs to")
    metadata: dict[str, JSONScalar] = Field(default_factory=dict, description="Free-form scalar facts")

    @field_validator("files", "visible_checks", "hidden_checks")
    @classmethod
    def _file_names(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            check_file_name(name)
        return files

    @model_validator(mode="after")
    def _fill_id(self) -> Task:
        digest = self.content_hash()
        if not self.id:
            object.__setattr__(self, "id", digest)
        return self

    def content_hash(self) -> str:
        body = self.model_dump(mode="json", exclude={"id", "metadata", "split"})
        blob = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
