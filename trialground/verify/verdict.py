"""Verdicts, flags and actions: the data that grading produces.

A `Verdict` is what a verifier decided about one submission; the reward paid for it is decided later, by the
rubric (`trialground.verify.reward`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trialground.errors import ErrorInfo

TestOutcome = Literal["passed", "failed", "error", "skipped", "missing"]


class TestResult(BaseModel):
    """One test's outcome, read from a report the submission could not write."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False  # not a pytest class

    name: str
    outcome: TestOutcome
    detail: str = ""


class Flag(BaseModel):
    """A suspicion about a submission, with the evidence that raised it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Detector name, e.g. test_tampering, early_exit, always_equal")
    evidence: str = Field(description="What was seen, where")
    severity: Literal["info", "warn", "hack"] = "hack"


class Verdict(BaseModel):
    """What a verifier decided. `error` is set when no decision could be reached (infrastructure)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    passed: bool
    score: float = Field(0.0, ge=0.0, le=1.0, description="Fraction of checks passed")
    tests: tuple[TestResult, ...] = ()
    flags: tuple[Flag, ...] = ()
    detail: str = ""
    error: ErrorInfo | None = None
    shortcut: Literal["", "shared", "host_syntax"] = Field(
        "",
        description="How a code grading was decided without a sandbox run of its own: 'shared' (an identical "
        "submission to the same task was being graded at the same moment: its verdict), 'host_syntax' (the "
        "solution does not compile: every test fails on import, as the runner would report)",
    )


class Action(BaseModel):
    """One tool action of an episode, as the grader's process and redundancy scores see it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(
        description="Tool name: bash, python, read_file, write_file, edit_file, apply_patch, run_tests, "
        "search, read_lines, submit"
    )
    argument_digest: str = Field(description="Hash of the normalised arguments (repeats have equal digests)")
    ok: bool = Field(description="The tool call was valid and did not error")
    changed_workspace: bool | None = Field(None, description="Whether the action changed any file")
    target: str | None = Field(None, description="File the action read or wrote, if any")


class Graded(BaseModel):
    """What the grader returns for one submission: the verdict and, when the run's judge cross-checked this
    submission, its score. The reward is not decided here: the rubric scores it once the episode is over."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verdict: Verdict
    judge_score: float | None = Field(None, description="The judge's score, when the judge scored it")
    judge_failed: bool = Field(False, description="The judge was asked and gave no usable score")
    seconds: float = Field(0.0, ge=0.0, description="Seconds the grading took")
