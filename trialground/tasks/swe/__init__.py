"""SWE-style repository tasks: a real library with an injected bug, graded by its own test suite.

Source spec: `swe:<repo>` or `swe:<repo>:<candidates>` (how many candidate bugs to try; default 40), for
a repository of `repos.REPOS`; a trailing `:brief` gives the same tasks with a short statement for
small-context policies (`brief.py`). The first use downloads the pinned sdist and builds the task set
(`build.py`, minutes for the larger suites); later uses read both from the cache.

Each task (verifier kind `swe_tests`):
- `files`: the whole repository with the bug, plus the bundled pytest (`.tg/`); the agent may run the
  tests with `python3 -I -S .tg/pytest.py`;
- `hidden_checks`: the suite's test files (and conftest files) at their pristine content;
- `reference`: the gold patch, a unified diff that removes the bug;
- `verifier.params`: `repo`, `version`, `fail_to_pass`, `pass_to_pass` (pytest node ids);
- `split`: fixed per bug by a hash of it (about one in five is `eval`); a set of two or more tasks always
  has both splits: when the hash puts none in `eval` (or none in `train`), the bug with the smallest (or
  largest) hash moves there (`assign_splits`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

from trialground.errors import TaskError
from trialground.sandbox.base import Limits
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.swe.brief import Demonstration, brief_statement, demonstration
from trialground.tasks.swe.build import BugRecord, build_records, record_id, workspace_image_files
from trialground.tasks.swe.patch import make_patch
from trialground.tasks.swe.paths import is_test_path
from trialground.tasks.swe.repos import RepoSpec, repo_files, repo_spec

DEFAULT_CANDIDATES = 40
TASK_LIMITS = Limits(wall_s=120.0, cpu_s=120.0, memory_mb=1024, pids=64, disk_mb=512, output_bytes=2_000_000)


def _brief(arg: str) -> tuple[str, bool]:
    """`<repo>[:<candidates>]:brief` -> (`<repo>[:<candidates>]`, True); anything else unchanged."""
    return (arg[: -len(":brief")], True) if arg.endswith(":brief") else (arg, False)


def parse_spec(arg: str) -> tuple[RepoSpec, int]:
    """`<repo>[:<candidates>]` -> (spec, candidates)."""
    name, _, count = arg.partition(":")
    if not name:
        raise TaskError("swe: name a repository, e.g. swe:inflection", kind="bad_spec")
    spec = repo_spec(name)
    if not count:
        return spec, DEFAULT_CANDIDATES
    if not count.isdigit() or not 1 <= int(count) <= 10_000:
        raise TaskError(
            f"swe:{arg}: candidates must be an integer in 1..10000, got {count!r}", kind="bad_spec"
        )
    return spec, int(count)


def _rank(rid: str) -> int:
    return int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16)


def assign_splits(ids: Sequence[str]) -> dict[str, Literal["train", "eval"]]:
    """The split of each bug id: `eval` when its hash is 0 mod 5; in a set of two or more where that
    leaves a split empty, the id with the smallest hash moves to `eval` (or the largest to `train`), so
    neither split is ever empty. A bug keeps its split as the set grows unless it was the one moved."""
    splits: dict[str, Literal["train", "eval"]] = {
        rid: "eval" if _rank(rid) % 5 == 0 else "train" for rid in ids
    }
    if len(splits) >= 2:
        if "eval" not in splits.values():
            splits[min(splits, key=lambda r: (_rank(r), r))] = "eval"
        elif "train" not in splits.values():
            splits[max(splits, key=lambda r: (_rank(r), r))] = "train"
    return splits


def task_from_record(
    spec: RepoSpec, record: BugRecord, split: Literal["train", "eval"] | None = None, *, brief: bool = False
) -> Task:
    """The task of one kept bug; `split` defaults to its hash rule alone (`assign_splits` of one id);
    `brief`: the short statement (`brief.brief_statement`)."""
    pristine = repo_files(spec)
    files = dict(workspace_image_files(spec))
    files[record.path] = record.text
    hidden = {p: t for p, t in pristine.items() if is_test_path(p) and p.endswith(".py")}
    rid = record_id(record)
    split = split or assign_splits([rid])[rid]
    return Task(
        domain="swe",
        prompt=brief_statement(spec, record) if brief else record.statement,
        files=files,
        hidden_checks=hidden,
        reference=make_patch({record.path: record.text}, {record.path: pristine[record.path]}),
        verifier=VerifierSpec(
            kind="swe_tests",
            params={
                "repo": spec.name,
                "version": spec.version,
                "fail_to_pass": list(record.fail_to_pass),
                "pass_to_pass": list(record.pass_to_pass),
            },
        ),
        limits=TASK_LIMITS,
        split=split,
        metadata={
            "name": f"{spec.name}-{rid}",
            "repo": spec.name,
            "bug": record.description,
            "bug_kind": record.kind,
            "bug_path": record.path,
            "fail_to_pass": len(record.fail_to_pass),
            "pass_to_pass": len(record.pass_to_pass),
        },
    )


def _records(arg: str, seed: int) -> tuple[RepoSpec, list[BugRecord]]:
    spec, count = parse_spec(arg)
    records = build_records(spec, seed=seed, n_candidates=count)
    if not records:
        raise TaskError(
            f"swe:{arg}: no bug of {count} candidates was kept; try more candidates "
            "(swe:<repo>:<candidates>)",
            kind="generator",
        )
    return spec, records


def _task_records(arg: str, seed: int, split: str | None) -> tuple[RepoSpec, list[tuple[BugRecord, Task]]]:
    """Each kept bug of `swe:<arg>` with its task, in set order, filtered to `split` when given."""
    arg, brief = _brief(arg)
    spec, records = _records(arg, seed)
    splits = assign_splits([record_id(r) for r in records])
    pairs = [(r, task_from_record(spec, r, splits[record_id(r)], brief=brief)) for r in records]
    return spec, [(r, t) for r, t in pairs if split is None or t.split == split]


def swe_tasks(arg: str, *, seed: int = 0, n: int | None = None, split: str | None = None) -> list[Task]:
    """The task set of `swe:<arg>` (see the module docstring), filtered to `split` when given."""
    tasks = [t for _, t in _task_records(arg, seed, split)[1]]
    return tasks[:n] if n is not None else tasks


def demonstrations(
    arg: str, *, seed: int = 0, split: str = "train", line_fixes: bool = False
) -> list[Demonstration]:
    """A short solving episode for each task of `swe:<arg>` in `split` whose fix is one block of lines
    (`brief.demonstration`; with `line_fixes`, one line repaired by a `sed` command, `line_fix.py`); the
    tasks are those `swe_tasks(arg)` gives."""
    spec, pairs = _task_records(arg, seed, split)
    pristine = repo_files(spec)
    demos = (demonstration(spec, r, t, pristine[r.path], line_fixes=line_fixes) for r, t in pairs)
    return [d for d in demos if d is not None]
