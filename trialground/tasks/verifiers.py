"""What a task can name as its verifier: each kind's name, its typed parameters, and where its grading
function is (`trialground.verify` implements them; this layer only names and validates them).

    kind = KINDS.lookup("numeric")      # or a plugin: KINDS.lookup("my_pkg.verifiers:EDIT_DISTANCE")
    params = kind.validate(task.verifier.params)   # a clear error names the bad field

A task's `verifier.kind` is a registered name or a dotted path `package.module:NAME` to a `VerifierKind`
(imported on first use and registered under its own `name`), so a user adds a verifier without editing
the package: in a task file, or in the run config (`reward.verifiers: ["package.module:NAME"]`).

A kind's `verify` is an async function `(resource, request) -> Verdict` (`request` a
`trialground.verify.kinds.request.VerifyRequest` holding the validated params), or the dotted path of one
(resolved on first use). `resource` is what the kind's own `resource` factory made for this grader (a
pool of grading sandboxes, a worker process), or the grader's `GradingContext` when it names none: a kind
owns what it needs, and the grader builds nothing for any kind. It raises `TrialgroundError` on an
infrastructure failure; a wrong submission is a failing `Verdict`, never an error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trialground.errors import TaskError
from trialground.registry import Registry, import_path


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


# `bool` first in the answer unions: a gold `true` stays `True` (not the int 1), as the task file wrote it.
class AnswerParams(Params):
    answer: bool | str | int | float | list[bool | str | int | float] = Field(
        description="The gold answer, or accepted ones"
    )
    extract: Extract = Field("auto", description="auto: last \\boxed{} / 'answer:' line / last line")
    case_sensitive: bool = False


class NumericParams(Params):
    answer: bool | float | int | str = Field(description="The gold number")
    rel_tol: float = Field(1e-6, ge=0.0)
    abs_tol: float = Field(1e-9, ge=0.0)
    extract: Extract = "auto"


class RegexParams(Params):
    pattern: str = Field(description="Full match against the extracted answer")
    flags: str = Field("", pattern=r"^[ism]*$", description="Any of i, s, m")
    extract: Extract = "auto"


class MathParams(Params):
    answer: bool | str | int | float = Field(description="The gold answer, LaTeX or plain")


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


VerifyFn = Callable[[Any, Any], Awaitable[Any]]
ResourceFactory = Callable[[Any], Any]


@dataclass(frozen=True)
class VerifierKind:
    """A registered verifier: `name` (what tasks write), `params` (its typed parameters), `verify`;
    `gameable`: deliberately exploitable (a test bed), so an audit that finds it paid says so;
    `resource`: the factory of what the kind needs kept between gradings (a function of the grader's
    `GradingContext`, or its dotted path; see `trialground.verify.kinds.context`), None for none."""

    name: str
    params: type[BaseModel]
    verify: VerifyFn | str
    doc: str = ""
    gameable: bool = False
    resource: ResourceFactory | str | None = None
    test_runs: Any = None
    """`(task) -> [run]` (each with a `label` and an `argv`) or its dotted path: the visible tests of a task
    whose checks are a repository's suite (the `run_tests` tool runs them as grading does); None for a kind
    whose tests are the task's visible check files."""
    _resolved: list[VerifyFn] = field(default_factory=list, repr=False, compare=False)
    _factory: list[ResourceFactory] = field(default_factory=list, repr=False, compare=False)

    def function(self) -> VerifyFn:
        if not isinstance(self.verify, str):
            return self.verify
        if not self._resolved:
            self._resolved.append(
                import_path(self.verify, what=f"verifier {self.name!r}", error=TaskError, kind="bad_task")
            )
        return self._resolved[0]

    def resource_factory(self) -> ResourceFactory | None:
        if not isinstance(self.resource, str):
            return self.resource
        if not self._factory:
            what = f"verifier {self.name!r} resource"
            self._factory.append(import_path(self.resource, what=what, error=TaskError, kind="bad_task"))
        return self._factory[0]

    def validate(self, params: Mapping[str, Any], *, where: str = "") -> BaseModel:
        return KINDS.params(self.params, params, where=f"{where}verifier {self.name!r} ")


KINDS: Registry[VerifierKind] = Registry("verifier kind", VerifierKind, TaskError, error_kind="bad_task")


def repository_task(kind: str) -> bool:
    """Whether tasks of verifier kind `kind` are repository tasks: their visible tests are a repository's
    suite, run as grading runs it (`VerifierKind.test_runs`)."""
    return lookup(kind).test_runs is not None


def lookup(name: str) -> VerifierKind:
    """The kind called `name`, or the `VerifierKind` at the dotted path `package.module:NAME`."""
    return KINDS.lookup(name)


_G = "trialground.verify.kinds.builtin"
_CODE_GRADING = "trialground.verify.kinds.code_grading:CodeGrading"
for _kind in (
    VerifierKind(
        "code_tests",
        CodeTestsParams,
        f"{_G}:code_tests",
        "hidden tests in a fresh sandbox",
        resource=_CODE_GRADING,
    ),
    VerifierKind(
        "check_program",
        CheckProgramParams,
        f"{_G}:check_program",
        "the task's check programs",
        resource="trialground.verify.kinds.check_program:resource",
    ),
    VerifierKind(
        "math",
        MathParams,
        f"{_G}:math",
        "math-verify equivalence with the gold answer",
        resource="trialground.verify.kinds.math:resource",
    ),
    VerifierKind("exact", AnswerParams, f"{_G}:exact", "normalised exact match of the extracted answer"),
    VerifierKind("regex", RegexParams, f"{_G}:regex", "full regex match of the extracted answer"),
    VerifierKind("numeric", NumericParams, f"{_G}:numeric", "number within rel_tol / abs_tol"),
    VerifierKind("judge", JudgeParams, f"{_G}:judge", "the configured judge's score >= threshold"),
    VerifierKind(
        "swe_tests",
        SweTestsParams,
        f"{_G}:swe_tests",
        "FAIL_TO_PASS and PASS_TO_PASS on a pristine copy",
        resource=f"{_G}:swe_resource",
        test_runs="trialground.tasks.swe.harness:test_runs",
    ),
    VerifierKind(
        "failed_tests",
        CodeTestsParams,
        "trialground.families.hackable.kinds:failed_tests",
        "GAMEABLE (the hackable test bed): hidden tests, paid unless one failed; errors and unrun tests pass",
        gameable=True,
        resource=_CODE_GRADING,  # the same grading sandboxes and batches as code_tests
    ),
):
    KINDS.register(_kind)
