"""The typed run configuration: one `RunConfig` composed of each component's own config.

YAML files plus dotted overrides (`--set trainer.lr=1e-5`). Any unknown key, wrong type or
out-of-range value raises `ConfigError` naming the file, the dotted path and what was expected.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trialground.envs.config import EnvConfig
from trialground.envs.kinds import KINDS as ENV_KINDS
from trialground.errors import ConfigError
from trialground.monitor.config import MonitorConfig
from trialground.orchestrator.aliases import alias_override, apply_aliases
from trialground.orchestrator.config import LoopConfig
from trialground.plugin import Requirement
from trialground.policy.backends import BACKENDS as POLICY_BACKENDS
from trialground.policy.config import PolicyConfig
from trialground.pool.backends import BACKENDS as POOL_BACKENDS
from trialground.pool.config import PoolConfig
from trialground.sandbox.backends import BACKENDS as SANDBOX_BACKENDS
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.config import TaskPoolConfig
from trialground.train.config import TrainerConfig
from trialground.verify.config import RewardConfig
from trialground.verify.judges.config import JUDGES

# One directory name under output_dir: no '/', no '\\', no leading '.' (so never '.' or '..'), nothing
# absolute; checked when the config is built, before any directory is made.
RUN_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


class RunConfig(BaseModel):
    """Everything a run needs. Each section belongs to one component."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        "run",
        min_length=1,
        max_length=128,
        description="Run name: the run directory is <output_dir>/<name>; one path component of letters, "
        "digits, '.', '_' and '-' that does not start with '.' (no separators, no '..', not absolute)",
    )
    output_dir: str = Field("runs", description="Parent directory of run directories")
    seed: int = Field(
        0,
        description="Run seed: Python, numpy and torch global RNGs and the policy's sampling "
        "(tasks.seed picks the task set)",
    )
    cluster: Literal["local", "ray"] = Field("local", description="local: one process; ray: a Ray cluster")
    tasks: TaskPoolConfig = Field(default_factory=TaskPoolConfig, description="Task sources and the pool")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Sandboxes")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="The composite reward")
    env: EnvConfig = Field(default_factory=EnvConfig, description="Environments")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="The environment pool")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="The policy model")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The trainer")
    loop: LoopConfig = Field(default_factory=LoopConfig, description="The training loop")
    monitor: MonitorConfig = Field(default_factory=MonitorConfig, description="Metrics and alerts")

    @field_validator("name")
    @classmethod
    def _one_directory_name(cls, name: str) -> str:
        if not re.fullmatch(RUN_NAME_PATTERN, name):
            raise ValueError(
                f"{name!r} is not a run name: one directory name of letters, digits, '.', '_' and '-', "
                "not starting with '.' (no '/', no '..', not an absolute path)"
            )
        return name

    @model_validator(mode="after")
    def _ray_ranks_need_ray(self) -> RunConfig:
        if self.trainer.data_parallel > 1 and self.cluster != "ray":
            raise ValueError(
                f"trainer.data_parallel={self.trainer.data_parallel} starts its ranks through Ray: set "
                "cluster: ray, or launch with torchrun --nproc_per_node N (and data_parallel: 1)"
            )
        return self

    @model_validator(mode="after")
    def _env_kind_needs(self) -> RunConfig:
        kind = ENV_KINDS.lookup(self.env.kind).capabilities
        if kind.host_views and not SANDBOX_BACKENDS.lookup(self.sandbox.backend).capabilities.host_views:
            able = [b.name for b in SANDBOX_BACKENDS.entries() if b.capabilities.host_views]
            raise ValueError(
                f"env.kind={self.env.kind} shows host directories in its sandboxes (the gateway's socket, "
                f"your program): sandbox.backend={self.sandbox.backend} cannot; set sandbox.backend: "
                f"{' or '.join(able)}"
            )
        if not kind.branches and self.loop.branch != "off":
            raise ValueError(
                f"loop.branch forks the trainer's own agent loop: env.kind={self.env.kind} needs it off"
            )
        return self

    @property
    def pool_config(self) -> PoolConfig:
        """The environment pool's config as the run uses it (`cluster: ray` puts its sandboxes on Ray)."""
        return self.pool.model_copy(update={"backend": "ray"}) if self.cluster == "ray" else self.pool

    @property
    def uses_env_pool(self) -> bool:
        """Episodes take their environments from the pool: the env kind needs a sandbox, or the cluster
        puts even single-turn grading on workers."""
        return ENV_KINDS.lookup(self.env.kind).capabilities.needs_sandbox or self.cluster == "ray"

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def _parse_scalar(text: str) -> Any:
    """An override value is YAML, so `--set loop.steps=3` gives an int and `a=[1,2]` a list."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict[str, Any], dotted: str) -> None:
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r}: expected KEY=VALUE, e.g. trainer.lr=1e-5")
    key, _, raw = dotted.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"override {dotted!r}: empty key")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = _parse_scalar(raw)


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the config section that holds `loc[-1]` (for a did-you-mean)."""
    model: type[BaseModel] = RunConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        found: type[BaseModel] | None = None
        for arg in (field.annotation, *get_args(field.annotation)):
            candidates = (arg, *get_args(arg))
            found = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
            if found is not None:
                break
        if found is None:
            return []
        model = found
    return list(model.model_fields)


def _describe(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration"]
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        got = e.get("input")
        got_text = "" if isinstance(got, dict) else f" (got {got!r})"
        hint = ""
        if e["type"] == "extra_forbidden" and e["loc"]:
            close = difflib.get_close_matches(str(e["loc"][-1]), _fields_at(tuple(e["loc"])), n=1)
            hint = f"; did you mean {'.'.join([*map(str, e['loc'][:-1]), close[0]])!r}?" if close else ""
        lines.append(f"  {path}: {e['msg']}{got_text}{hint}")
    return "\n".join(lines)


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML file (`-`: standard input; None: defaults only), apply overrides, validate."""
    source = str(path) if path is not None else "<defaults>"
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if str(path) != "-" and not p.is_file():
            raise ConfigError(f"{source}: no such config file")
        try:
            loaded = yaml.safe_load(sys.stdin.read() if str(path) == "-" else p.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: the top level must be a mapping, got {type(loaded).__name__}")
        data = loaded
    apply_aliases(data, source)  # TRL's and verl's names for our keys (orchestrator/aliases.py)
    for item in overrides:
        apply_override(data, alias_override(item))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc


def require_extras(config: RunConfig) -> None:
    """Raise `ConfigError` naming the extra to install when the config asks for a package that is missing
    (before a run starts, not at its end)."""
    for line in plugin_requirements(config):
        raise ConfigError(line)


def plugin_requirements(config: RunConfig) -> list[str]:
    """What the config's plugins (policy and pool backends, env kind) and options need that is not
    installed, one line each. The sandbox backend's are cautions (`preflight.cautions`): a run whose tasks
    never open a sandbox needs none."""
    out = [
        *POLICY_BACKENDS.lookup(config.policy.backend).missing(f"policy.backend={config.policy.backend}"),
        *ENV_KINDS.lookup(config.env.kind).missing(f"env.kind={config.env.kind}"),
    ]
    pool = config.pool_config
    who = "cluster=ray" if config.cluster == "ray" else f"pool.backend={pool.backend}"
    out += POOL_BACKENDS.lookup(pool.backend).missing(who)
    if config.reward.judge is not None:
        out += JUDGES.lookup(config.reward.judge.kind).missing(
            f"reward.judge.kind={config.reward.judge.kind}"
        )
    wants = [(config.trainer.lora_rank > 0, "peft", "train", "trainer.lora_rank > 0")]
    for wanted, module, extra, why in wants:
        if wanted and not Requirement(module=module).met():
            advice = f"pip install 'trialground[{extra}]'"
            out.append(f"{why} needs the {module!r} package, which is not installed: {advice}")
    return list(dict.fromkeys(out))


def dump_config(config: RunConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
