"""Verdicts, flags and rewards: the data that grading produces.

A `Verdict` is what a verifier decided about one submission. A `Reward` is the paid number, carrying
every named component and every flag; its `total` is a pure function of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

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


class RewardComponent(BaseModel):
    """A named part of the reward: its raw value and the weight it is paid with (0 = logged only).

    A gated component is paid only when the outcome passed (shaping); an ungated one always (the overlong
    penalty, which must also reach failed episodes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: float
    weight: float
    gated: bool = True


class Reward(BaseModel):
    """outcome gate + weighted shaping. `total` is computed, never stored independently."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: float = Field(description="1.0 when the outcome check passed, else 0.0")
    components: tuple[RewardComponent, ...] = ()
    flags: tuple[Flag, ...] = ()
    gated: bool = Field(True, description="Shaping is paid only when the outcome passed")
    zeroed: bool = Field(False, description="A hack flag forced the reward to 0")
    penalty: float = Field(0.0, ge=0.0, description="Subtracted from the total (hack_action=penalty)")
    dropped: bool = Field(
        False,
        description="Excluded from the group baseline and the loss (hack_action=drop, or an infrastructure "
        "failure)",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        always = sum(c.weight * c.value for c in self.components if not c.gated) - self.penalty
        if self.zeroed or (self.gated and self.outcome <= 0.0):
            return 0.0 + always
        return self.outcome + sum(c.weight * c.value for c in self.components if c.gated) + always

    def component(self, name: str) -> RewardComponent | None:
        """The component called `name`, if present."""
        return next((c for c in self.components if c.name == name), None)


class Action(BaseModel):
    """One tool action of an episode, as the grader's process and redundancy scores see it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(
        description="Tool name: bash, python, read_file, write_file, edit_file, run_tests, submit"
    )
    argument_digest: str = Field(description="Hash of the normalised arguments (repeats have equal digests)")
    ok: bool = Field(description="The tool call was valid and did not error")
    changed_workspace: bool | None = Field(None, description="Whether the action changed any file")
    target: str | None = Field(None, description="File the action read or wrote, if any")
