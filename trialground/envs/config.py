"""Configuration of environments."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trialground.plugin import FrozenParams, Params, section_validators


class ToolSection(BaseModel):
    """One tool a run lists in the prompt beyond the default ones, with its own settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        description="A tool of trialground.envs.tools (search, read_lines, apply_patch, fixes, apply_fix, "
        "...) or a plugin's 'package.module:NAME'"
    )
    params: Params = Field(
        default_factory=FrozenParams, description="The tool's own settings, validated against its model"
    )

    _known, _params = section_validators("name", "trialground.envs.tools.registry:TOOLS", "env.tools.")


class EnvConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(
        "single_turn",
        description="Environment kind (trialground.envs.kinds): single_turn, tool (the trainer's agent "
        "loop), harness (your own agent program, run in the task's sandbox against the gateway: "
        "docs/harness.md), or a plugin's 'package.module:NAME'",
    )
    params: Params = Field(
        default_factory=FrozenParams,
        description="The kind's own settings, validated against its settings model (a plugin's; the "
        "built-in kinds take theirs from the fields below)",
    )
    max_turns: int = Field(8, ge=1, le=1000, description="Turns per episode (tool env)")
    max_episode_s: float = Field(300.0, gt=0, description="Wall seconds per episode")
    tool_format: Literal["json_tags", "xml", "auto"] = Field(
        "json_tags", description="Tool-call syntax: json_tags, xml, or auto (both)"
    )
    observation_budget_chars: int = Field(4000, ge=64, description="Observations are cut to this size")
    tool_observation_chars: dict[str, int] = Field(
        default_factory=dict,
        description="Per-tool observation budgets, e.g. {run_tests: 120}: that tool's output is cut to this "
        "many characters (middle dropped) instead of observation_budget_chars",
    )
    tool_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Wall seconds of one bash/python/run_tests call (capped by episode)"
    )
    tools: tuple[ToolSection, ...] = Field(
        (),
        description="Tools listed in the prompt after the default ones (bash, python, read_file, write_file, "
        "edit_file, run_tests), in order: a name or {name, params}; a plugin tool is callable only where "
        "named here",
    )
    navigation_tools: bool = Field(
        False,
        description="List search and read_lines in the prompt's tool list (they are callable either way); "
        "on for tasks whose workspace is far larger than the context",
    )
    patch_tool: bool = Field(
        False,
        description="List apply_patch in the prompt's tool list (callable either way); on for repository "
        "tasks",
    )
    repair_tools: bool = Field(
        False,
        description="List fixes and apply_fix (ranked candidate one-line repairs of a repository task, "
        "trialground.envs.repair) in the prompt's tool list (callable either way)",
    )
    max_calls_per_turn: int = Field(
        4, ge=1, le=64, description="Tool calls executed per model turn; further ones are invalid"
    )
    grade_on_limit: bool = Field(
        True, description="At the turn or time limit, grade the workspace as it is (else: no reward)"
    )
    workspace_digest: bool = Field(
        True,
        description="Tool env: hash the workspace at the start of every episode (in the sandbox; logged "
        "per trajectory, so k samples of a task can be shown to start from the same bytes)",
    )
    visible_check_hashes: bool = Field(
        True,
        description="Tool env: sha256 of each visible check file at the start and end of every episode "
        "(logged per trajectory and as hack/visible_tests_changed_rate; evidence, never the verdict)",
    )
    observations: Literal["full", "blank", "shuffled"] = Field(
        "full",
        description="Tool env feedback ablation: full (real tool outputs), blank (each output replaced by a "
        "fixed placeholder), shuffled (by a real output from another task); tools and grading unchanged",
    )
    python: str = Field(
        "python3", min_length=1, description="Python inside the sandbox (python/run_tests tools)"
    )
    harness_command: str | None = Field(
        None,
        min_length=1,
        description="harness: the command line (bash) that runs your agent program; it gets the prompt on "
        "stdin and in TRIALGROUND_PROMPT, the gateway in OPENAI_BASE_URL / OPENAI_API_KEY",
    )
    harness_dir: str | None = Field(
        None,
        description="harness: a host directory holding the program, shown read-only at "
        "/run/trialground-harness and put on PATH and PYTHONPATH",
    )
    harness_venv: str | None = Field(
        None, description="harness: a host virtualenv shown read-only at its own path; its bin/ leads PATH"
    )
    harness_memory_mb: int = Field(
        1024, ge=64, le=65536, description="harness: memory ceiling of the program (and its children)"
    )
    harness_pids: int = Field(128, ge=8, le=4096, description="harness: processes and threads at most")
    harness_max_n: int = Field(
        4,
        ge=1,
        le=64,
        description="harness: choices (`n`) one model call may ask for; an episode may draw max_turns x "
        "harness_max_n generations in all (max_turns bounds its calls); past either it is ended and graded",
    )
    harness_max_inflight: int = Field(
        4, ge=1, le=64, description="harness: model requests of one episode in flight at once (more: 429)"
    )
    harness_max_connections: int = Field(
        8,
        ge=1,
        le=256,
        description="harness: connections one episode's program may hold open to the gateway at once (the "
        "training process's descriptors for it: this many plus its listener); one more ends the episode",
    )
    harness_max_body_mb: int = Field(
        4, ge=1, le=64, description="harness: the largest request body one episode may send (MiB; more: 413)"
    )
    harness_preload: list[str] = Field(
        [],
        description="harness: Python modules imported once per sandbox, before any episode, by the sandbox's "
        "supervisor; each episode's program is then forked from an interpreter that holds them (for a "
        "command `[VAR=value ...] python ...` whose python is the sandbox's own, e.g. harness_venv's); "
        "e.g. [openai, openai.resources.chat]: docs/harness.md",
    )

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_names(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            return tuple({"name": v} if isinstance(v, str) else v for v in value)
        return value

    @model_validator(mode="after")
    def _tool_budgets(self) -> EnvConfig:
        from trialground.envs.tools.registry import ToolSet

        known = ToolSet.of(self).callable
        for name, chars in self.tool_observation_chars.items():
            if name not in known:
                raise ValueError(
                    f"env.tool_observation_chars: unknown tool {name!r}; tools: {', '.join(known)}"
                )
            if chars < 16:
                raise ValueError(f"env.tool_observation_chars.{name}: {chars} is under 16 characters")
        return self

    _known_kind, _params_of_kind = section_validators("kind", "trialground.envs.kinds:KINDS", "env.")

    @model_validator(mode="after")
    def _harness(self) -> EnvConfig:
        for name in ("harness_dir", "harness_venv"):
            value = getattr(self, name)
            if value is None:
                continue
            if not os.path.isabs(value):
                raise ValueError(f"env.{name}: {value!r} is not an absolute path")
            if not os.path.isdir(value):
                raise ValueError(f"env.{name}: {value!r} is not a directory")
        for name in self.harness_preload:
            if not name or not all(part.isidentifier() for part in name.split(".")):
                raise ValueError(f"env.harness_preload: {name!r} is not a module name")
        if self.harness_venv is not None and not os.path.isdir(os.path.join(self.harness_venv, "bin")):
            raise ValueError(f"env.harness_venv: {self.harness_venv!r} has no bin/ (not a virtualenv)")
        return self
