"""Checks that run before a run directory exists: everything about a config that can fail without training.

`problems(config, purpose)` lists what is wrong (empty: the run can start); `preflight` raises one
`ConfigError` holding every problem. They look only at files and installed packages (no model is loaded,
no task is made), so `trialground config validate` and a failing `train` answer within seconds:

- the model directory (`config.json`, weights, a tokenizer) of every backend that loads one, or the
  local tokenizer of the `openai` and `scripted` backends;
- every task source spec (`trialground.tasks.sources.check_spec`: known name, argument, path, the
  packages the source needs), and every record of a task file or directory (each problem with its file and
  line, `MAX_FILE_PROBLEMS` a file and a count of the rest);
- every metric sink's package, and what the config's plugins require (`plugin_requirements`: each policy,
  pool backend and env kind declares its modules, extras and why);
- for `train`: the run directory is free (or, with `resume`, holds a run), and the trainer's per-rank
  memory estimate fits the device (`memory_check`: trainer.device_memory_gib, or the CUDA device's).

`cautions(config)` lists what can run but is likely to cost episodes (or fail for tasks that open a sandbox
when the sandbox backend's program is missing) (`config validate` prints them, `train`
prints them before starting).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path
from typing import Literal

from trialground.errors import ConfigError, TaskError
from trialground.orchestrator.run_config import RunConfig, plugin_requirements
from trialground.policy.backends import BACKENDS as POLICY_BACKENDS
from trialground.policy.backends import TORCH
from trialground.sandbox.backends import BACKENDS as SANDBOX_BACKENDS

Purpose = Literal["train", "eval", "validate"]
MAX_FILE_PROBLEMS = 20  # listed per task file; a count says how many more

# (module, extra) each sink imports; tensorboard also takes torch's writer
SINK_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "jsonl": ((), ""),
    "tensorboard": (("tensorboardX", "torch"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "mlflow": (("mlflow",), "mlflow"),
}
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")
_TOKENIZER = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# where a model is a local directory, not a Hub repository (`models/` is where the Hub hint puts them)
_LOCAL_FOLDERS = ("models", "checkpoints", "runs", "outputs")


def _hub_name(model: str) -> bool:
    """Whether `model` reads as a Hub repository id (`org/name`) rather than a relative path: one slash, the
    Hub's characters, and its first part neither an existing directory nor a local models folder."""
    if not _HUB_NAME.fullmatch(model):
        return False
    org = model.split("/")[0]
    return org not in _LOCAL_FOLDERS and not Path(org).is_dir()


def model_problems(model: str, what: str, *, weights: bool) -> list[str]:
    """What is missing from the local Hugging Face directory `model` (a bundled name or a path)."""
    from trialground.policy.packaged import is_packaged, package_problem
    from trialground.policy.tiny import BUNDLED, tiny_model_dir

    if is_packaged(model):
        problem = package_problem(model)
        return [problem] if problem else []
    if model.endswith(".gguf"):
        return _gguf_problems(model, what)
    path = tiny_model_dir(model) if model in BUNDLED else Path(model).expanduser()
    if not path.is_dir():
        hub = (
            " (a Hugging Face Hub name is not downloaded: fetch it once, e.g. "
            f"`hf download {model} --local-dir models/{path.name}`, and give that directory)"
            if _hub_name(model)
            else ""
        )
        return [f"{what}={model!r}: no such directory{hub}"]
    out = []
    config_file = path / "config.json"
    if weights and not config_file.is_file():
        out.append(f"{what}={model!r}: {path} has no config.json (not a Hugging Face model directory)")
    elif weights:
        try:
            json.loads(config_file.read_text())
        except (OSError, ValueError) as exc:
            out.append(f"{what}={model!r}: {config_file} is not valid JSON ({exc})")
    if weights and not any(any(path.glob(pattern)) for pattern in _WEIGHTS):
        out.append(f"{what}={model!r}: {path} holds no weights (*.safetensors or pytorch_model*.bin)")
    if not any((path / name).is_file() for name in _TOKENIZER):
        out.append(
            f"{what}={model!r}: {path} holds no tokenizer (tokenizer.json, tokenizer.model or vocab.json)"
        )
    return out


def _gguf_problems(model: str, what: str) -> list[str]:
    """What stops the GGUF file `model` from being converted into a model directory here."""
    from trialground.policy.gguf import GGUF_EXTRA, missing_modules

    if not Path(model).expanduser().is_file():
        return [f"{what}={model!r}: no such file"]
    missing = missing_modules()
    if missing:
        return [
            f"{what}={model!r}: a GGUF file needs {', '.join(missing)}: "
            f"pip install 'trialground[{GGUF_EXTRA}]'"
        ]
    return []


def _policy_problems(config: RunConfig, purpose: Purpose) -> list[str]:
    policy = config.policy
    caps = POLICY_BACKENDS.lookup(policy.backend).capabilities
    if caps.model_by_name and purpose != "train":
        return []  # the engine takes a hub name too; training needs the local weights
    if caps.loads_model:
        return model_problems(policy.model, "policy.model", weights=True)
    return model_problems(policy.tokenizer, "policy.tokenizer", weights=False)


def _task_problems(config: RunConfig) -> list[str]:
    out = []
    for field, sources in (
        ("tasks.sources", config.tasks.sources),
        ("tasks.eval_sources", config.tasks.eval_sources),
    ):
        for i, source in enumerate(sources):
            try:
                from trialground.tasks.sources import check_spec

                found = check_spec(source.source)
            except TaskError as exc:
                out.append(f"{field}[{i}]: {exc}")
                continue
            if isinstance(found, Path):  # a task file or directory: every record, every problem
                from trialground.tasks.file_check import task_file_problems

                broken = task_file_problems(found)
                out += [f"{field}[{i}]: {p}" for p in broken[:MAX_FILE_PROBLEMS]]
                if len(broken) > MAX_FILE_PROBLEMS:
                    out.append(f"{field}[{i}]: {found}: and {len(broken) - MAX_FILE_PROBLEMS} more problems")
    return out


def load_problems(config: RunConfig) -> list[str]:
    """What loading the task sets as a run does finds (a generator's or dataset's error, a source with no
    training tasks, training tasks that all repeat evaluation ones): `config validate` loads them all."""
    from trialground.tasks.pool import load_task_sets

    try:
        load_task_sets(config.tasks)
    except TaskError as exc:
        return [f"tasks: {exc}"]
    return []


def _package_problems(config: RunConfig, purpose: Purpose) -> list[str]:
    out = []
    for sink in config.monitor.sinks:
        modules, extra = SINK_PACKAGES[sink]
        if modules and not any(_installed(m) for m in modules):
            out.append(
                f"monitor.sinks: the {sink} sink needs the {modules[0]!r} package, which is not installed: "
                f"pip install 'trialground[{extra}]' (or drop {sink!r} from monitor.sinks)"
            )
    for module in ("pyarrow", "scipy") if purpose in ("train", "eval") else ():
        if not _installed(module):
            out.append(
                f"the training loop and evaluation need the {module!r} package, which is not installed: "
                "pip install 'trialground[run]' (included in trialground[train])"
            )
    if purpose == "train":
        out += [r.problem("training") for r in TORCH if not r.met()]
    out += plugin_requirements(config)
    return list(dict.fromkeys(out))


def run_dir_problems(config: RunConfig, *, resume: bool) -> list[str]:
    """The run directory is free for a new run, or holds a checkpoint a resumed run can start from."""
    path = config.run_dir
    if resume:  # with no complete checkpoint the run starts again from step 0, in its directory
        if not (path / "config.yaml").is_file():
            return [f"--resume {path}: no run there (no config.yaml)"]
        return []
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        return [occupied(path)]
    parent = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not parent.is_dir():
        return [f"output_dir: {parent} is a file, not a directory"]
    return []


def occupied(path: Path) -> str:
    """What to do about a run directory that already holds something: continue the run, replace it, or
    pick another name (`--overwrite` replaces only a run directory, one with a `config.yaml`)."""
    if not (path / "config.yaml").is_file():
        return (
            f"{path} already exists and is not a run directory (no config.yaml): pick another name "
            "(--set name=...) or output_dir"
        )
    from trialground.train.checkpoint import checkpoint_meta, latest_checkpoint

    newest = latest_checkpoint(path)
    meta = checkpoint_meta(newest) if newest is not None else None
    state = f"checkpointed at step {meta['step']}" if meta else "no checkpoint yet: it continues from step 0"
    return (
        f"run directory {path} already holds a run ({state}): continue it with "
        f"`trialground train --resume {shlex.quote(str(path))}`, replace it with --overwrite (deletes it), "
        "or pick another name (--set name=...)"
    )


def problems(config: RunConfig, purpose: Purpose, *, resume: bool = False) -> list[str]:
    """Every problem found (see the module docstring); empty when the run can start."""
    out = _package_problems(config, purpose) + _policy_problems(config, purpose) + _task_problems(config)
    if purpose == "train":
        from trialground.orchestrator.memory_check import memory_problems

        out += run_dir_problems(config, resume=resume) + memory_problems(config)
    return out


def cautions(config: RunConfig) -> list[str]:
    """What can run but will likely lose work: a step that puts more episodes in flight than the environment
    pool holds makes the rest wait for one, and each that waits past `pool.acquire_timeout_s` fails; a
    trainer that fits its device by the memory estimate but not by the margin measurements leave."""
    out: list[str] = []
    backend = config.sandbox.backend
    out += SANDBOX_BACKENDS.lookup(backend).missing(f"sandbox.backend={backend} (for tasks run in a sandbox)")
    from trialground.orchestrator.memory_check import memory_cautions

    out += memory_cautions(config)
    uses_pool = config.uses_env_pool
    loop, pool = config.loop, config.pool
    capacity = pool.max_active_bound if pool.autoscale else pool.max_active
    groups = min(loop.batch_tasks, loop.rollout_concurrency)
    in_flight = groups * loop.samples_per_task
    if uses_pool and in_flight > capacity:
        key = "pool.max_active_bound" if pool.autoscale else "pool.max_active"
        out.append(
            f"{key}={capacity} is below the episodes a training step puts in flight "
            f"(min(loop.batch_tasks, loop.rollout_concurrency)={groups} x loop.samples_per_task="
            f"{loop.samples_per_task} = {in_flight}): {in_flight - capacity} wait for an environment and "
            f"fail (acquire_timeout) when none frees within "
            f"pool.acquire_timeout_s={pool.acquire_timeout_s:g}; "
            f"raise {key} to {in_flight} or pool.acquire_timeout_s above an episode's length"
        )
    return out


def preflight(config: RunConfig, purpose: Purpose, *, resume: bool = False) -> None:
    """Raise `ConfigError` listing every problem `problems` finds."""
    found = problems(config, purpose, resume=resume)
    if found:
        head = "the run cannot start:" if purpose == "train" else "the configuration cannot run:"
        raise ConfigError("\n  ".join([head, *found]))
