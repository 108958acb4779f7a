"""The verifier registry: each kind a task can name, its typed parameters, and the function that grades it.

    kind = lookup("numeric")            # or a plugin: lookup("my_pkg.verifiers:EDIT_DISTANCE")
    params = kind.params.model_validate(task.verifier.params)   # a clear error names the bad field

A task's `verifier.kind` is a registered name or a dotted path `package.module:NAME` to a `VerifierKind`
(imported on first use and registered under its own `name`), so a user adds a verifier without editing
the package: in a task file, or in the run config (`reward.verifiers: ["package.module:NAME"]`).

A kind's `verify` is an async function `(grader, request) -> Verdict`, or the dotted path of one
(resolved lazily, so this module imports no verifier). It receives the `Grader` (for its sandbox config,
reward config, judge and shared verifiers) and a `VerifyRequest` with the validated params. It raises
`TrialgroundError` on an infrastructure failure; a wrong submission is a failing `Verdict`, never an error.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trialground.errors import TaskError

if TYPE_CHECKING:
    from trialground.sandbox.base import Sandbox
    from trialground.tasks.model import Task
    from trialground.verify.grader import Grader
    from trialground.verify.verdict import Action, Verdict


class Params(BaseModel):
    """Base of every kind's parameters: frozen, and unknown fields are an error (a typo never passes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


Extract = Literal["auto", "whole"]


class CodeTestsParams(Params):
    solution_path: str = Field("solution.py", min_length=1, description="The file the submission is")
    solution_files: tuple[str, ...] = Field((), description="Other workspace files the checks may import")
    expected_tests: int | None = Field(None, ge=0, description="Hidden tests that must actually run")
    entry_point: str | None = Field(None, description="The function the tests call (for validation)")
    strict_types: bool | None = Field(None, description="Override of grading.strict_types")
    test_timeout_s: float | None = Field(None, gt=0, description="Override of grading.test_timeout_s")


class AnswerParams(Params):
    answer: str | int | float | list[str | int | float] = Field(
        description="The gold answer, or accepted ones"
    )
    extract: Extract = Field("auto", description="auto: last \\boxed{} / 'answer:' line / last line")
    case_sensitive: bool = False


class NumericParams(Params):
    answer: float | int | str = Field(description="The gold number")
    rel_tol: float = Field(1e-6, ge=0.0)
    abs_tol: float = Field(1e-9, ge=0.0)
    extract: Extract = "auto"


class RegexParams(Params):
    pattern: str = Field(description="Full match against the extracted answer")
    flags: str = Field("", pattern=r"^[ism]*$", description="Any of i, s, m")
    extract: Extract = "auto"


class MathParams(Params):
    answer: str | int | float = Field(description="The gold answer, LaTeX or plain")


class CheckProgramParams(Params):
    solution_path: str | None = Field(None, description="Where a single-turn submission is written")
    check_timeout_s: float | None = Field(None, gt=0, description="Override of grading.check_timeout_s")


class SweTestsParams(Params):
    repo: str = Field(min_length=1, description="The pinned repository (trialground.tasks.swe.repos)")
    version: str = Field(min_length=1, description="Its pinned version")
    fail_to_pass: tuple[str, ...] = Field(min_length=1, description="Test ids the fix must make pass")
    pass_to_pass: tuple[str, ...] = Field(min_length=1, description="Test ids that must keep passing")


class JudgeParams(Params):
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="Judge score needed to pass")


@dataclass(frozen=True)
class VerifyRequest:
    """One grading: the task, the submission, the episode's sandbox (tool episodes) and actions, and the
    kind's validated params."""

    task: Task
    submission: str
    params: BaseModel
    workspace: Sandbox | None = None
    actions: Sequence[Action] = ()


VerifyFn = Callable[["Grader", VerifyRequest], Awaitable["Verdict"]]


@dataclass(frozen=True)
class VerifierKind:
    """A registered verifier: `name` (what tasks write), `params` (its typed parameters), `verify`."""

    name: str
    params: type[BaseModel]
    verify: VerifyFn | str
    doc: str = ""
    _resolved: list[VerifyFn] = field(default_factory=list, repr=False, compare=False)

    def function(self) -> VerifyFn:
        if not isinstance(self.verify, str):
            return self.verify
        if not self._resolved:
            self._resolved.append(_import(self.verify, what=f"verifier {self.name!r}"))
        return self._resolved[0]

    def validate(self, params: Mapping[str, Any], *, where: str = "") -> BaseModel:
        try:
            return self.params.model_validate(dict(params))
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or '-'}: {err['msg']}" for err in e.errors()
            )
            raise TaskError(f"{where}verifier {self.name!r} params: {problems}", kind="bad_task") from None


_REGISTRY: dict[str, VerifierKind] = {}


def register(kind: VerifierKind, *, replace: bool = False) -> VerifierKind:
    """Add a kind. Re-registering a name with a different kind is an error unless `replace`."""
    old = _REGISTRY.get(kind.name)
    if old is not None and old is not kind and not replace:
        raise ValueError(f"verifier kind {kind.name!r} is already registered ({old.doc or old.verify!r})")
    _REGISTRY[kind.name] = kind
    return kind


def lookup(name: str) -> VerifierKind:
    """The kind called `name`, or the `VerifierKind` at the dotted path `package.module:NAME`."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        obj = _import(name, what="verifier plugin")
        if not isinstance(obj, VerifierKind):
            raise TaskError(
                f"verifier plugin {name!r} is a {type(obj).__name__}, not a VerifierKind", kind="bad_task"
            )
        existing = _REGISTRY.get(obj.name)
        if existing is not None and existing is not obj:
            raise TaskError(
                f"verifier plugin {name!r} is named {obj.name!r}, which is already another kind",
                kind="bad_task",
            )
        _REGISTRY[obj.name] = _REGISTRY[name] = obj
        return obj
    raise TaskError(
        f"unknown verifier kind {name!r}: known kinds are {', '.join(sorted(_REGISTRY))}, or name a plugin "
        "as 'package.module:NAME' (a trialground.verify.kinds.registry.VerifierKind)",
        kind="bad_task",
    )


def known() -> list[str]:
    return sorted(k for k in _REGISTRY if ":" not in k)


def _import(path: str, *, what: str) -> Any:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise TaskError(f"{what}: {path!r} is not 'package.module:NAME'", kind="bad_task")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise TaskError(f"{what}: cannot import {path!r}: {e}", kind="bad_task") from e


_G = "trialground.verify.kinds.builtin"
for _kind in (
    VerifierKind("code_tests", CodeTestsParams, f"{_G}:code_tests", "hidden tests in a fresh sandbox"),
    VerifierKind("check_program", CheckProgramParams, f"{_G}:check_program", "the task's check programs"),
    VerifierKind("math", MathParams, f"{_G}:math", "math-verify equivalence with the gold answer"),
    VerifierKind("exact", AnswerParams, f"{_G}:exact", "normalised exact match of the extracted answer"),
    VerifierKind("regex", RegexParams, f"{_G}:regex", "full regex match of the extracted answer"),
    VerifierKind("numeric", NumericParams, f"{_G}:numeric", "number within rel_tol / abs_tol"),
    VerifierKind("judge", JudgeParams, f"{_G}:judge", "the configured judge's score >= threshold"),
    VerifierKind(
        "swe_tests", SweTestsParams, f"{_G}:swe_tests", "FAIL_TO_PASS and PASS_TO_PASS on a pristine copy"
    ),
):
    register(_kind)
