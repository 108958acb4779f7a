"""Configuration of grading and of the composite reward."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trialground.verify.judges.config import JudgeConfig


class GradingConfig(BaseModel):
    """How verifiers run: timeouts, the sandbox's Python, strictness."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    python: str = Field("python3", min_length=1, description="Python interpreter inside the sandbox")
    site_packages: bool = Field(
        False, description="Let solutions import site-packages (slower start; off: standard library only)"
    )
    reuse_sandboxes: int = Field(
        8,
        ge=0,
        le=1024,
        description="Idle grading sandboxes kept for reuse (each handed over: a new workspace filesystem "
        "and new namespaces, nothing of the last grading); 0: new each time",
    )
    max_parallel: int = Field(4, ge=1, le=1024, description="Grading sandbox execs running at once")
    max_batch: int = Field(
        16,
        ge=1,
        le=256,
        description="Single-turn code gradings batched into one sandbox exec (1: no batching)",
    )
    batch_window_s: float = Field(
        0.005, ge=0.0, le=1.0, description="How long a grading waits for others to share its batch"
    )
    share_identical: bool = Field(
        True,
        description="Single-turn code gradings of the same submission text for the same task that are in "
        "flight together run once and share the verdict (GRPO groups repeat samples); a nondeterministic "
        "submission then gets one draw for all its copies",
    )
    precheck_syntax: bool = Field(
        True,
        description="A solution that does not compile is failed on the host (every test an import error, "
        "as the runner reports it) without a sandbox run, once a grading has shown that the sandbox's "
        "Python is the host's exact build",
    )
    host_parse_max_bytes: int = Field(
        65_536,
        ge=0,
        le=64 << 20,
        description="The largest submitted solution file the host compiles or parses (the syntax precheck, "
        "the static checks): host-side work on the model's text stays bounded (compiling dense code costs "
        "~1 us and ~0.35 KB of memory per byte, parsing it for the static checks ~4 us). A larger one is "
        "left to the sandbox run and flagged `oversized_solution`",
    )
    max_solution_bytes: int = Field(
        8 << 20,
        ge=1,
        le=256 << 20,
        description="The largest solution file read from an agent's workspace and copied into the grading "
        "sandbox; a larger one fails the grading as unreadable (`too_large`) without being read",
    )
    preload: tuple[str, ...] = Field(
        ("typing", "math", "itertools", "heapq", "bisect", "string"),
        description="Standard modules imported once per batch (of 4+), before the workers fork",
    )
    test_timeout_s: float = Field(5.0, gt=0, le=600, description="Deadline of one test function")
    total_timeout_s: float = Field(30.0, gt=0, le=3600, description="Deadline of all tests of one grading")
    strict_types: bool = Field(
        True,
        description="Code tests: flag `always_equal` when a solution function returns non-plain data "
        "(such a value never reaches the checks either way)",
    )
    math_timeout_s: float = Field(5.0, gt=0, le=120, description="Hard timeout of one math-verify call")
    check_timeout_s: float = Field(30.0, gt=0, le=3600, description="Deadline of a task's check program")
    run_visible: bool = Field(
        True, description="Also run visible checks (to flag solutions that pass them but fail hidden ones)"
    )
    static_checks: bool = Field(True, description="Run the static (AST) hack detectors on code submissions")


class PartSpec(BaseModel):
    """One more rubric part (`trialground.verify.reward.rubric`): a registered name or a plugin's
    `package.module:NAME`, the weight its components are paid with, and its own params."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    part: str = Field(min_length=1, description="A rubric part's name, or a plugin as package.module:NAME")
    weight: float = Field(1.0, ge=-10.0, le=10.0, description="Weight of the part's components")
    params: dict[str, Any] = Field(default_factory=dict, description="The part's params (its own model)")


class RewardConfig(BaseModel):
    """The rubric's weights (trialground.verify.reward.rubric): 0 when the outcome fails, else
    1 + w_p*process - w_r*redundant (+ w_j*judge); minus the hack, truncation and overlong penalties."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    process_weight: float = Field(0.2, ge=0.0, le=10.0, description="Weight of process_score in [0, 1]")
    redundancy_weight: float = Field(0.01, ge=0.0, le=10.0, description="Penalty per redundant action")
    judge_weight: float = Field(0.0, ge=0.0, le=10.0, description="Weight of a judge score (0 = logged only)")
    judge_sample_rate: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Fraction of rule-graded submissions also scored by the judge (cross-check)",
    )
    judge: JudgeConfig | None = Field(
        None, description="The judge (reward model) for judge_sample_rate cross-checks and `judge` tasks"
    )
    canaries: int = Field(
        8,
        ge=0,
        le=10_000,
        description="Evaluation tasks with a reference re-scored at every evaluation (canary/* metrics): "
        "the reference must pass, another task's reference must fail; 0: off",
    )
    hack_action: Literal["zero", "penalty", "drop"] = Field(
        "zero", description="What a hack flag does to the trajectory"
    )
    hack_penalty: float = Field(1.0, ge=0.0, description="Subtracted when hack_action=penalty")
    truncation_penalty: float = Field(
        0.0, ge=0.0, le=10.0, description="Subtracted from an episode cut by the context budget (0: reward 0)"
    )
    overlong_penalty: float = Field(
        0.0, ge=0.0, le=10.0, description="DAPO overlong penalty for responses at the token budget (0: off)"
    )
    overlong_buffer: int = Field(
        0, ge=0, description="Soft overlong zone (tokens before the max) where the penalty ramps up; 0 = hard"
    )
    tests_part: float = Field(0.5, ge=0.0, le=1.0, description="process_score share: tests run before submit")
    errors_part: float = Field(0.25, ge=0.0, le=1.0, description="process_score share: no tool errors")
    waste_part: float = Field(0.25, ge=0.0, le=1.0, description="process_score share: no wasted turns")
    test_tools: tuple[str, ...] = Field(
        ("run_tests",), description="Tool names that count as running the tests"
    )
    edit_tools: tuple[str, ...] = Field(
        ("write_file", "edit_file", "apply_patch"),
        description="Tool names that edit files (no-op edits are redundant)",
    )
    read_tools: tuple[str, ...] = Field(
        ("read_file",), description="Tool names that read files (re-reads of unchanged files are redundant)"
    )
    grading: GradingConfig = Field(default_factory=GradingConfig, description="How verifiers run")
    parts: tuple[PartSpec, ...] = Field(
        (), description="More rubric parts, after the built-in ones (a plugin by package.module:NAME)"
    )
