"""Building a repository's task set, SWE-smith style, offline: inject a bug, keep it if the suite says so.

`build_records(spec, seed=, candidates=, runs=)`:
1. runs the pristine suite `runs` times in the repository's image (`image.py`); the baseline is the set of
   tests that passed every time (a test that does not is never a FAIL_TO_PASS or PASS_TO_PASS test);
2. draws `candidates` mutations of the library code (`mutate.py`); for each, runs the suite with the bug
   once and drops the candidate unless some baseline test fails; then runs it `runs - 1` more times and
   drops it if any baseline test's outcome changed between runs (flaky) or a run gave no report;
3. keeps it with FAIL_TO_PASS = baseline tests that failed every time, PASS_TO_PASS = baseline tests that
   passed every time, when both are non-empty, plus an issue-style problem statement made from the
   failing tests' names and their first failure text (the buggy code as it runs; never the fix).

Records are cached as JSON under `cache_dir()/tasks/` keyed by repository, version, bundled pytest, seed,
candidates and runs; a cached set is read, never rebuilt. A larger set extends the largest cached smaller
one of the same seed and runs: candidates are drawn as a prefix, so only the new candidates are judged.
Building takes roughly `runs x (candidates + 1)` suite runs (candidates that break nothing cost one).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trialground.errors import TaskError
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.tasks.swe.bundle import bundle_digest, bundle_files
from trialground.tasks.swe.image import RepoImage
from trialground.tasks.swe.mutate import Mutation, candidates
from trialground.tasks.swe.paths import is_test_path
from trialground.tasks.swe.pytest_run import PytestRun, run_pytest
from trialground.tasks.swe.repos import RepoSpec, cache_dir, is_mutable, repo_files

SUITE_LIMITS = Limits(wall_s=300.0, cpu_s=300.0, memory_mb=2048, pids=64, disk_mb=512, output_bytes=4_000_000)
_FORMAT = 1


@dataclass(frozen=True)
class BugRecord:
    """One kept bug: the mutated file's text, its tests and its statement."""

    path: str
    kind: str
    line: int
    description: str
    text: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    statement: str


def _cache_path(spec: RepoSpec, *, seed: int, n_candidates: int, runs: int) -> Path:
    key = f"{spec.name}-{spec.version}-{bundle_digest()}-s{seed}-c{n_candidates}-r{runs}-f{_FORMAT}"
    return cache_dir() / "tasks" / f"{key}.json"


def workspace_image_files(spec: RepoSpec) -> dict[str, str]:
    """The pristine repository plus the bundled runner: what every image of `spec` holds."""
    return {**repo_files(spec), **bundle_files()}


def problem_statement(spec: RepoSpec, failing: Sequence[str], details: dict[str, str]) -> str:
    shown = list(failing[:8])
    more = f"\n- ... and {len(failing) - len(shown)} more" if len(failing) > len(shown) else ""
    first = next((details[t] for t in failing if t in details), "")
    excerpt = first.strip()
    if len(excerpt) > 1500:
        excerpt = "...\n" + excerpt[-1500:]
    excerpt = excerpt.replace("```", "'''")
    paths = " ".join((*spec.pytest_args, *spec.tests))
    return (
        f"The `{spec.name}` library (version {spec.version}) in /workspace has a bug: some of its own "
        f"tests fail.\n\nFailing tests:\n" + "\n".join(f"- {t}" for t in shown) + more + "\n\n"
        f"The first failure:\n```\n{excerpt}\n```\n\n"
        "Fix the library code so that these tests pass without breaking any other test. The tests are "
        "right: changes to test files, conftest.py, configuration or the bundled runner in .tg/ are never "
        f"used and fail the task. Run the tests with: python3 -I -S .tg/pytest.py {paths} -q -x"
    )


async def _suite(image: RepoImage, spec: RepoSpec, changed: dict[str, str] | None) -> PytestRun:
    async with image.lease() as sandbox:
        for path, text in (changed or {}).items():
            await sandbox.write(path, text)
        return await run_pytest(
            sandbox, paths=spec.tests, tests=None, limits=SUITE_LIMITS, args=spec.pytest_args
        )


def _cached_prefix(spec: RepoSpec, *, seed: int, n_candidates: int, runs: int) -> tuple[int, list[BugRecord]]:
    """The largest cached set of `spec` with the same seed and runs and fewer candidates: (its candidate
    count, its records); (0, []) when there is none. Candidates are drawn as a prefix (`candidates` with a
    larger limit starts with those of a smaller one), so its verdicts stand for the first candidates."""
    best = 0
    pattern = _cache_path(spec, seed=seed, n_candidates=0, runs=runs).name.replace("-c0-", "-c*-")
    for path in (cache_dir() / "tasks").glob(pattern):
        count = path.name.rsplit("-c", 1)[-1].split("-", 1)[0]
        if count.isdigit() and best < int(count) < n_candidates:
            best = int(count)
    if not best:
        return 0, []
    path = _cache_path(spec, seed=seed, n_candidates=best, runs=runs)
    try:
        return best, [_record(r) for r in json.loads(path.read_text())["records"]]
    except (OSError, ValueError, KeyError, TypeError):
        return 0, []


async def _build(
    spec: RepoSpec, config: SandboxConfig, *, seed: int, n_candidates: int, runs: int, concurrency: int
) -> list[BugRecord]:
    files = workspace_image_files(spec)
    image = RepoImage(config, files, keep=concurrency)
    try:
        base = [await _suite(image, spec, None) for _ in range(runs)]
        for run in base:
            if run.error:
                raise TaskError(
                    f"swe:{spec.name}: the pristine suite gave no report: {run.error}", kind="suite"
                )
        baseline = sorted(t for t in base[0].outcomes if all(r.passed(t) for r in base))
        if not baseline:
            raise TaskError(f"swe:{spec.name}: no test passes on the pristine repository", kind="suite")
        library = {
            p: t
            for p, t in files.items()
            if is_mutable(spec, p) and p.endswith(".py") and not is_test_path(p)
        }
        drawn = candidates(library, seed=seed, limit=n_candidates)
        done, prior = _cached_prefix(spec, seed=seed, n_candidates=n_candidates, runs=runs)
        if done and [(m.path, m.text) for m in candidates(library, seed=seed, limit=done)] == [
            (m.path, m.text) for m in drawn[:done]
        ]:
            drawn = drawn[done:]  # judged by the smaller cached set: its kept records stand
        else:
            prior = []
        sem = asyncio.Semaphore(concurrency)

        async def judge(m: Mutation) -> BugRecord | None:
            async with sem:
                first = await _suite(image, spec, {m.path: m.text})
                if first.error or not any(not first.passed(t) for t in baseline):
                    return None
                rest = [await _suite(image, spec, {m.path: m.text}) for _ in range(runs - 1)]
            bugged = [first, *rest]
            if any(r.error for r in bugged):
                return None
            # Only baseline tests are ever graded; one of them changing outcome between runs is flaky.
            if any(len({r.outcomes.get(t) for r in bugged}) > 1 for t in baseline):
                return None  # flaky under the bug
            f2p = tuple(t for t in baseline if not first.passed(t))
            p2p = tuple(t for t in baseline if first.passed(t))
            if not f2p or not p2p:
                return None
            return BugRecord(m.path, m.kind, m.line, m.description, m.text, f2p, p2p,
                             problem_statement(spec, f2p, first.details))  # fmt: skip

        kept = await asyncio.gather(*(judge(m) for m in drawn))
    finally:
        await image.close()
    return [*prior, *(r for r in kept if r is not None)]


def build_records(
    spec: RepoSpec,
    *,
    seed: int = 0,
    n_candidates: int = 40,
    runs: int = 3,
    sandbox_config: SandboxConfig | None = None,
    concurrency: int = 2,
) -> list[BugRecord]:
    """The kept bugs of `spec` (cached; see the module docstring). Runs its own event loop in a thread, so
    it may be called from sync code and from inside a running loop alike."""
    path = _cache_path(spec, seed=seed, n_candidates=n_candidates, runs=runs)
    if path.exists():
        try:
            raw = json.loads(path.read_text())
            return [_record(r) for r in raw["records"]]
        except (ValueError, KeyError, TypeError) as e:
            raise TaskError(
                f"swe: unreadable cached task set {path}: {e}; delete it", kind="bad_cache"
            ) from e
    config = sandbox_config or SandboxConfig()
    coro = _build(spec, config, seed=seed, n_candidates=n_candidates, runs=runs, concurrency=concurrency)
    result: list[list[BugRecord]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as e:  # re-raised in the caller's thread
            errors.append(e)

    import threading

    thread = threading.Thread(target=work, name=f"swe-build-{spec.name}")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    records = result[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.part")
    body = {"repo": spec.name, "version": spec.version, "records": [asdict(r) for r in records]}
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)
    return records


def _record(raw: dict) -> BugRecord:
    tests = {k: tuple(raw[k]) for k in ("fail_to_pass", "pass_to_pass")}
    return BugRecord(**{**raw, **tests})


def record_id(record: BugRecord) -> str:
    return hashlib.sha256(f"{record.path}\0{record.text}".encode()).hexdigest()[:12]
