"""The `swe_tests` verifier: a repository task's FAIL_TO_PASS and PASS_TO_PASS tests, on a pristine copy.

The verdict is never decided inside the process the submission controls. How a grading goes:
1. the submission's changes are read relative to the task's starting workspace: with an agent sandbox,
   every file of the workspace is compared host-side (`Sandbox.read`: regular files only, never through
   a symlink) with the task's files; without one, the submission text is a unified diff (`patch.py`)
   applied to them (a patch that does not apply fails, it is not an error);
2. each changed path is classified (`trialground.tasks.swe.paths`): changes to library code are kept;
   changes to protected paths (tests, conftest, configuration, the bundled runner, sitecustomize, `.pth`)
   are never applied and each raises a `test_tampering` or `harness_tampering` flag (severity hack: such a
   submission earns nothing, whatever its other changes); anything else is ignored;
3. the kept library changes are read by the static policy (`trialground.tasks.swe.policy`), host-side, as
   evidence: what it finds is a `diff_policy` flag (severity warn); it decides nothing;
4. the tests' recorded calls into the library (`trialground.tasks.swe.calls`) are made again on the graded
   library, in a sandbox of the repository's *calls image* (the library's files and the replay program,
   no test file), each test's in a process of its own; the outcomes come back as plain data and are compared
   host-side with the pristine library's, which never enter a sandbox. Where one differs, that test has
   failed and the verdict fails without step 5;
5. the tests run as `harness.test_runs(task)`: each FAIL_TO_PASS test alone, the PASS_TO_PASS tests per
   test file, each in its own process, in a sandbox of the repository's image (`image.py`) restored to
   its snapshot just before (tests, conftest and the bundled harness at their pristine bytes, no process
   left from an earlier run), with the task's bug and the kept changes written on top. The command and
   environment are the ones the agent's `run_tests` tool uses. A run passes only when its exit status, as
   the sandbox's supervisor saw it, is 0 (the pristine launcher exits 0 only when every named test ran
   and passed) and pytest's summary agrees; nothing else the process prints is read;
6. a test passes when its run passed and its recorded calls (if it has any) came to the reference
   outcomes: a run can fail a test with recorded calls, never pass it on its own. The verdict passes only
   when every test passed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

from trialground.errors import SandboxError, VerifierError
from trialground.sandbox.base import WORKSPACE, ExecResult, ExecStatus, Limits, Sandbox, SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.swe.calls import REPLAY_BOUNDS, CallBook, library_path, mismatch, replay
from trialground.tasks.swe.harness import TEST_ENV, TestRun, test_runs
from trialground.tasks.verifiers import SweTestsParams
from trialground.verify.config import GradingConfig
from trialground.verify.verdict import Flag, TestResult, Verdict

_LISTING_LIMITS = Limits(wall_s=30.0, cpu_s=20.0, output_bytes=8_000_000)
_MAX_FILES = 20_000
WORKSPACE_BYTES = 64 << 20  # read from an agent's workspace to grade it, at least (`workspace_changes`)
MAX_PARALLEL = 4


class SweTestsVerifier:
    def __init__(self, sandbox_config: SandboxConfig, grading: GradingConfig) -> None:
        self.sandbox_config = sandbox_config
        self.grading = grading
        self._images: dict[str, object] = {}
        self._books: dict[str, object] = {}
        self._book_lock: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None  # test runs at once (each is a whole suite)

    def _image(self, repo: str):  # type: ignore[no-untyped-def]
        from trialground.tasks.swe.build import workspace_image_files
        from trialground.tasks.swe.image import RepoImage
        from trialground.tasks.swe.repos import repo_spec

        if repo not in self._images:
            self._images[repo] = RepoImage(self.sandbox_config, workspace_image_files(repo_spec(repo)))
        return self._images[repo]

    def _calls_image(self, repo: str):  # type: ignore[no-untyped-def]
        from trialground.tasks.swe.build import workspace_image_files
        from trialground.tasks.swe.calls import calls_image_files
        from trialground.tasks.swe.image import RepoImage
        from trialground.tasks.swe.repos import repo_spec

        key = f"calls:{repo}"
        if key not in self._images:
            spec = repo_spec(repo)
            self._images[key] = RepoImage(
                self.sandbox_config, calls_image_files(spec, workspace_image_files(spec))
            )
        return self._images[key]

    async def _book(self, repo: str):  # type: ignore[no-untyped-def]
        from trialground.tasks.swe.calls import record_calls
        from trialground.tasks.swe.repos import repo_spec

        if self._book_lock is None:
            self._book_lock = asyncio.Lock()
        async with self._book_lock:  # one recording per repository, however many gradings wait for it
            if repo not in self._books:
                self._books[repo] = await record_calls(repo_spec(repo), self.sandbox_config)
        return self._books[repo]

    async def verify(self, task: Task, submission: str, *, workspace: Sandbox | None = None) -> Verdict:
        from trialground.tasks.swe.patch import PatchError, apply_patch
        from trialground.tasks.swe.paths import classify, is_test_path
        from trialground.tasks.swe.repos import repo_files, repo_spec

        params = task.verifier.params_as(SweTestsParams)
        spec = repo_spec(params.repo)
        if workspace is not None:
            budget = max(WORKSPACE_BYTES, 2 * sum(len(t.encode()) for t in task.files.values()))
            try:
                changes = await workspace_changes(
                    task.files, workspace, file_limit=self.grading.max_solution_bytes, budget=budget
                )
            except WorkspaceTooLarge as e:
                flag = Flag(name="oversized_workspace", evidence=str(e), severity="warn")
                return Verdict(passed=False, flags=(flag,), detail=f"not graded: {e}"[:500])
        else:
            try:
                changes = apply_patch(task.files, submission)
            except PatchError as e:
                return Verdict(passed=False, detail=f"the patch does not apply: {e}"[:500])
        flags: list[Flag] = []
        kept: dict[str, str | None] = {}
        for path, text in sorted(changes.items()):
            cls = classify(spec, path)
            if cls == "protected":
                name = "test_tampering" if is_test_path(path) else "harness_tampering"
                what = "deleted" if text is None else "changed" if path in task.files else "added"
                flags.append(Flag(name=name, evidence=f"{what} {path} (not applied)"))
            elif cls == "library":
                kept[path] = text
        # The diff policy is evidence: what it finds is flagged; the tests and their recorded calls decide.
        refused = await asyncio.to_thread(_policy_violations, task, kept)
        for path, found in refused.items():
            evidence = f"{path}: {'; '.join(found[:5])}"[:400]
            flags.append(Flag(name="diff_policy", evidence=evidence, severity="warn"))
        runs = test_runs(task)
        book = await self._book(spec.name)
        pristine = repo_files(spec)
        # The library as graded: the task's start (its bug) with the kept changes on top, written over the
        # pristine image wherever it differs from it.
        final: dict[str, str | None] = {p: t for p, t in task.files.items() if classify(spec, p) == "library"}
        final.update(kept)
        writes = {p: t for p, t in final.items() if t is not None and pristine.get(p) != t}
        deletes = sorted(p for p, t in final.items() if t is None and p in pristine)
        limits = task.limits or self.sandbox_config.limits
        image = self._image(spec.name)
        if self._slots is None:
            self._slots = asyncio.Semaphore(MAX_PARALLEL)
        slots = self._slots

        async def write_library(sandbox: Sandbox) -> None:
            for path, text in writes.items():
                await sandbox.write(path, text)
            if deletes:
                rm = ["rm", "-f", "--", *deletes]
                res = await sandbox.exec(rm, cwd=WORKSPACE, limits=_LISTING_LIMITS)
                if not res.ok:
                    raise VerifierError(
                        f"could not delete {deletes[:3]}: {res.stderr[-200:]}", kind="sandbox"
                    )

        calls_image = self._calls_image(spec.name)
        calls_limits = limits.model_copy(update={"output_bytes": REPLAY_BOUNDS.max_chars + (1 << 20)})
        lib_path = library_path(spec)

        async def one(run: TestRun) -> ExecResult:
            async with slots, image.lease() as sandbox:  # restored: pristine tests and harness
                await write_library(sandbox)
                res = await sandbox.exec(run.argv, env=TEST_ENV, cwd=WORKSPACE, limits=limits)
                if res.status is ExecStatus.SANDBOX_ERROR:
                    raise SandboxError(f"swe test run: sandbox failed: {res.stderr[-300:]}", kind="sandbox")
                return res

        # The recorded calls first, all in one sandbox (each test's in a process of its own): where one came
        # to another outcome, the verdict has failed whatever the tests' runs would say, and they are not run.
        observed: dict[str, list[Any] | None] = {}
        recorded = book.for_tests([t for run in runs for t in run.tests])
        if recorded:
            async with slots, calls_image.lease() as sandbox:  # the library only: no test file in it
                await write_library(sandbox)
                observed = await replay(sandbox, recorded, calls_limits, lib_path)
        if any(mismatch(book.tests[t], got) for t, got in observed.items()):
            return _verdict(runs, {}, flags, None, book, observed)
        done = await asyncio.gather(*(one(run) for run in runs))
        return _verdict(runs, dict(zip(runs, done, strict=True)), flags, None, book, observed)

    async def close(self) -> None:
        images, self._images = self._images, {}
        for image in images.values():
            await image.close()  # type: ignore[attr-defined]


class WorkspaceTooLarge(Exception):
    """The workspace's files add up to more than the host reads to grade it: the submission's failure."""


async def workspace_changes(
    start: Mapping[str, str], workspace: Sandbox, *, file_limit: int = 8 << 20, budget: int = WORKSPACE_BYTES
) -> dict[str, str | None]:
    """{path: new text, or None when gone} for every file of the agent's workspace that differs from the
    task's start. The listing comes from the trusted `find` (names only); contents are read host-side,
    each file up to `file_limit` bytes or twice its size at the start (a larger one counts as gone) and
    `budget` bytes in all (more raises `WorkspaceTooLarge`): sparse files and hard links cost a sandbox no
    disk but the host its memory."""
    from trialground.tasks.swe.paths import valid_path

    res = await workspace.exec(["find", ".", "-type", "f"], cwd=WORKSPACE, limits=_LISTING_LIMITS)
    if res.status.value == "sandbox_error":
        raise SandboxError(f"listing the workspace failed: {res.stderr[-200:]}", kind="sandbox")
    listed = {line[2:] for line in res.stdout.splitlines() if line.startswith("./")}
    paths = sorted({p for p in listed if valid_path(p)} | set(start))[:_MAX_FILES]
    changes: dict[str, str | None] = {}
    total = 0
    for path in paths:
        # a file of the task itself may be larger than `file_limit`: it is read up to twice its own size
        own = len(start[path].encode()) if path in start and len(start[path]) > file_limit // 8 else 0
        cap = max(file_limit, 2 * own)
        try:
            raw = await workspace.read(path, min(cap, budget - total))
            total += len(raw)
            data: str | None = raw.decode("utf-8", "replace")
        except FileNotFoundError:
            data = None
        except SandboxError as e:
            if e.kind not in ("bad_path", "not_a_file", "too_large"):
                raise
            if e.kind == "too_large" and cap > budget - total:
                raise WorkspaceTooLarge(f"its files add up to over {budget} bytes") from e
            data = (
                None  # a symlink, a directory or a huge file where a file was: gone, as far as grading goes
            )
        if data != start.get(path):
            if data is None and path not in start:
                continue
            changes[path] = data
    return changes


def _policy_violations(task: Task, kept: Mapping[str, str | None]) -> dict[str, list[str]]:
    """{path: refused uses} of the kept library changes, against the task's start (host-side, bounded)."""
    from trialground.tasks.swe.policy import added_violations

    found = {path: added_violations(task.files.get(path), text) for path, text in sorted(kept.items())}
    return {p: v for p, v in found.items() if v}


_SUMMARY = re.compile(r"^(?:=+ )?(\d{1,9}) passed\b")  # 9 digits: int() cannot fail on it


def _summary_passed(stdout: str) -> int:
    for line in reversed(stdout.strip().splitlines()[-5:]):
        m = _SUMMARY.match(line.strip())
        if m:
            return int(m.group(1))
    return -1


def _verdict(
    runs: list[TestRun],
    results: Mapping[TestRun, ExecResult],
    flags: list[Flag],
    error: str | None,
    book: CallBook | None = None,
    observed: Mapping[str, list[Any] | None] | None = None,
) -> Verdict:
    """A test passes when its run passed and, where the repository's call book has it, its calls into the
    library came to the recorded outcomes (`calls.mismatch`): a run can only fail such a test, never pass
    it. A test whose calls came to another outcome has failed, run or not; without `results` (the runs were
    skipped for that reason) the other tests are `missing`."""
    tests: list[TestResult] = []
    failed: list[str] = []
    compared = off = 0
    for run in runs:
        res = results.get(run)
        # Exit status 0 is what decides; pytest's own summary naming every test as passed is required
        # too (it can only make a run fail, never pass).
        ok = (
            res is not None
            and res.status is ExecStatus.OK
            and res.exit_code == 0
            and _summary_passed(res.stdout) == len(run.tests)
        )
        if res is None:
            outcome, detail = (
                "missing",
                f"{run.group}: not run" + (" (recorded calls failed)" if observed else ""),
            )
        elif ok:
            outcome, detail = "passed", run.group
        else:
            outcome = "error" if res.status is not ExecStatus.NONZERO_EXIT else "failed"
            tail = (res.stdout[-600:] + res.stderr[-300:]).strip()
            detail = f"{run.group} [{res.status.value} exit {res.exit_code}]: {tail}"[-700:]
            failed.append(run.label)
        for t in run.tests:
            calls = book.tests.get(t) if book is not None and observed is not None else None
            why = mismatch(calls, observed.get(t)) if calls is not None and observed is not None else None
            compared += calls is not None
            if why is not None:
                off += outcome == "passed"  # the run says passed, the library's outcomes say otherwise
                tests.append(TestResult(name=t, outcome="failed", detail=f"{run.group}: calls: {why}"[:700]))
            else:
                tests.append(TestResult(name=t, outcome=outcome, detail=detail))  # type: ignore[arg-type]
    passed_n = sum(t.outcome == "passed" for t in tests)
    hack = any(f.severity == "hack" for f in flags)
    if off:
        flags = [*flags, Flag(name="call_mismatch", severity="warn",
                              evidence=f"{off} test(s) passed in their run while their library calls came to "
                                       "other outcomes than the reference library's")]  # fmt: skip
    ok = error is None and bool(tests) and passed_n == len(tests) and not hack
    f2p = [t for t in tests if t.detail.startswith("fail_to_pass")]
    f2p_n = sum(t.outcome == "passed" for t in f2p)
    detail = error or (
        f"FAIL_TO_PASS {f2p_n}/{len(f2p)}, PASS_TO_PASS {passed_n - f2p_n}/{len(tests) - len(f2p)} passed"
        f" (calls compared for {compared} of {len(tests)})"
        + (f"; failed runs: {', '.join(failed[:3])}" if failed else "")
    )
    return Verdict(
        passed=ok, score=passed_n / len(tests) if tests else 0.0, tests=tuple(tests), flags=tuple(flags),
        detail=detail[:500],
    )  # fmt: skip
