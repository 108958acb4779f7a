"""The `code_tests` verifier: hidden tests run after the episode in a fresh sandbox.

Contract (params: `CodeTestsParams`, read from the task's validated params): the submission is a full Python
module written to `solution_path`; hidden and visible checks are `test_*.py` files with `def test_*():`
functions that import the solution; `expected_tests` hidden tests (default: every one) must actually run.

How a grading goes:
1. a fresh sandbox is opened holding only the task's untouched `files` and the solution (from the
   submission text, or read out of the agent's sandbox when `workspace` is given);
2. `runner.py` is started there with the check files delivered over stdin (hidden checks never touch the
   sandbox's disk) together with a host key;
3. the runner forks a *submission worker* (`worker.py`: imports the solution, answers calls) and a
   *checker* (`checker.py`: runs the tests, never imports the solution; the solution module it sees is a
   proxy whose functions are calls into the worker with plain-data arguments and results, `wire.py`).
   Assertions are evaluated only in the checker, with its own modules;
4. the host verifies the report's HMAC, then requires every expected hidden test to have run and passed.
   Skips, errors, timeouts and missing tests are failures. A report that is absent or badly signed is a
   failure flagged `runner_tampering`; a sandbox that breaks is an infrastructure error (`Verdict.error`).

Tests run in trialground's own runner, not pytest: top-level `test_*` functions (found in the AST by the
host, so the solution cannot hide or add tests), each called once with a per-test deadline; no conftest,
plugins, cache or rootdir configuration exist in this path at all. Visible checks run when a hidden test
failed, judged after sealing (to flag solutions that pass the visible ones only).

Sealed checks: in the hidden checks, every `assert EXPR == LITERAL` at the top level of a function body is
rewritten (host side, AST) to send EXPR's value (computed in the checker) to the runner's supervisor; the
literal reaches the sandbox only after every process of the grading is gone, and the supervisor compares.

Speed: "fresh" is a pooled sandbox restored to its empty snapshot (the sandbox kills every process of the
last command; the runner wipes /tmp and /dev/shm and says whether it left the sandbox clean; a sandbox that
is not reported clean is closed, never reused). Single-turn gradings that arrive together are batched
(`verify_many`): one sandbox exec, in which the trusted runner grades each submission in freshly forked
processes, then kills what it left and empties the workspace, /tmp and /dev/shm before writing the next
one's files. A batch member's behaviour never decides a sibling's verdict: members the batch did not report
(its runner was killed, or an earlier member left the sandbox dirty) are regraded alone. A batch holds only
submissions whose tasks have equal limits (the exec's), and each member's worker has its task's CPU seconds.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from trialground.errors import SandboxError, TrialgroundError, VerifierError
from trialground.sandbox.backends import BACKENDS
from trialground.sandbox.base import WORKSPACE, ExecResult, Limits, Sandbox, SandboxConfig
from trialground.tasks.model import Task
from trialground.verify.config import GradingConfig
from trialground.verify.host_compile import compile_quietly
from trialground.verify.kinds.code_jobs import (
    BOOT,
    VISIBLE_PREFIX,
    batch_stdin,
    code_params,
    job_header,
    module_name,
    override_or,
    parse_report,
    report_names,
    runner_stdin,
    solution_path,
)
from trialground.verify.kinds.submitted import UnreadableSubmission, read_submitted
from trialground.verify.verdict import Flag, TestResult, Verdict

T = TypeVar("T")
Opener = Callable[[SandboxConfig, Mapping[str, str | bytes]], Awaitable[Sandbox]]


async def default_opener(config: SandboxConfig, files: Mapping[str, str | bytes]) -> Sandbox:
    from trialground.sandbox.factory import open_sandbox

    return await open_sandbox(config, files)


def import_failure(task: Task, files: Mapping[str, str | bytes], max_bytes: int | None = None) -> str | None:
    """What the runner's worker reports when importing the solution in `files` fails because it does not
    compile (`importing MODULE: SyntaxError: ...`), decided here with the host's compiler; None when it
    compiles, or when the import could find something else than that file (a stdlib or builtin name, or
    another task file of the module's name), the file is over `max_bytes` (host work stays bounded) or the
    compiler gave up (recursion, memory). Only valid where the sandbox runs this exact Python build (the
    caller checks)."""
    main = solution_path(task)
    module = module_name(main)
    if module in sys.stdlib_module_names or module in sys.builtin_module_names:
        return None
    for path in files:
        top = path.split("/", 1)[0]
        if path != main and (top == module or top.startswith(module + ".") or top == "__pycache__"):
            return None
    data = files.get(main)
    if data is None:
        return None
    source = data.encode() if isinstance(data, str) else data
    if max_bytes is not None and len(source) > max_bytes:
        return None
    try:
        compile_quietly(source, f"{WORKSPACE}/{main}")
    except (SyntaxError, ValueError) as e:
        return f"importing {module}: {type(e).__name__}: {e}"[:500]
    except Exception:  # RecursionError, MemoryError: the host's limits, not the sandbox's
        return None
    return None


async def solution_files(
    task: Task, submission: str, workspace: Sandbox | None, limit: int | None = None
) -> dict[str, str | bytes]:
    """The files copied into the grading sandbox: the solution module (+ the params' `solution_files`).
    Raises `UnreadableSubmission` when one in the agent's workspace is not a readable regular file or is
    over `limit` bytes."""
    main = solution_path(task)
    if workspace is None:
        return {main: submission}
    names = [main, *code_params(task).solution_files]
    out: dict[str, str | bytes] = {}
    for name in names:
        data = await read_submitted(workspace, name, limit)  # UnreadableSubmission: a FIFO, directory, ...
        if data is not None:
            out[name] = data
    return out


class SandboxPool:
    """Grading sandboxes: new ones from `opener`, or (when `keep` > 0) reused ones restored to their empty
    snapshot. A restored sandbox is as fresh as a new one for grading: the workspace is byte-identical to
    empty, every process of the last command was killed by the sandbox, and the runner wiped /tmp."""

    def __init__(self, config: SandboxConfig, opener: Opener, keep: int) -> None:
        self.config, self.opener, self.keep = config, opener, keep
        self._idle: list[tuple[Sandbox, str]] = []

    async def acquire(self, files: Mapping[str, str | bytes]) -> tuple[Sandbox, str | None]:
        if self.keep <= 0:
            return await self._open(files), None
        if self._idle:
            sandbox, snap = self._idle.pop()
        else:
            sandbox = await self._open({})
            snap = await sandbox.snapshot()
        try:
            for path, data in files.items():
                await sandbox.write(path, data)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox, snap

    async def release(self, sandbox: Sandbox, snap: str | None, healthy: bool) -> None:
        if snap is None or not healthy or len(self._idle) >= self.keep:
            await sandbox.close()
            return
        try:
            await sandbox.hand_over(snap)
        except SandboxError:
            await sandbox.close()
            return
        self._idle.append((sandbox, snap))

    async def _open(self, files: Mapping[str, str | bytes]) -> Sandbox:
        try:
            return await self.opener(self.config, files)
        except OSError as e:
            raise SandboxError(f"could not open a grading sandbox: {e}", kind="open_failed") from e

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for sandbox, _ in idle:
            await sandbox.close()


class CodeTestsVerifier:
    """Runs a task's hidden (and visible) tests against a submission in a fresh sandbox."""

    def __init__(self, sandbox_config: SandboxConfig, grading: GradingConfig, opener: Opener | None = None):
        self.sandbox_config = sandbox_config
        self.grading = grading
        # only where a sandbox has a /workspace, /tmp and /dev/shm of its own can the runner empty them, so
        # only there is a restored sandbox as fresh as a new one and a batch possible; elsewhere each grading
        # gets a new sandbox
        private = BACKENDS.lookup(sandbox_config.backend).capabilities.private_scratch
        keep = grading.reuse_sandboxes if private else 0
        self.pool = SandboxPool(sandbox_config, opener or default_opener, keep)
        self._slots = asyncio.Semaphore(grading.max_parallel)
        # `sys.version` of the sandbox's Python, from the last signed report: the host decides a solution
        # that does not compile only when it is this process's own build (`precheck_syntax`)
        self.sandbox_python: str | None = None

    @property
    def batching(self) -> bool:
        """Batches need the runner to rewrite the workspace itself: only in reused sandboxes."""
        return self.pool.keep > 0 and self.grading.max_batch > 1

    async def verify(self, task: Task, submission: str, *, workspace: Sandbox | None = None) -> Verdict:
        _check_task(task)
        files: dict[str, str | bytes] = dict(task.files)
        try:
            files.update(await solution_files(task, submission, workspace, self.grading.max_solution_bytes))
        except UnreadableSubmission as e:
            return e.verdict()
        host = self.host_verdict(task, files)
        if host is not None:
            return host
        token, host_key = secrets.token_hex(16), os.urandom(32)
        reused = self.pool.keep > 0
        stdin = runner_stdin(
            task, self.grading, token, host_key, visible=self.grading.run_visible, wipe_tmp=reused
        )
        limits = self.limits(task).model_copy(
            update={"wall_s": min(3600.0, self.grading.total_timeout_s + 10.0)}
        )
        async with self._slots:
            sandbox, snap = await self.pool.acquire(files)
            report = await self._run(sandbox, snap, stdin, limits, host_key)
        return report if isinstance(report, Verdict) else self._verdict(task, report)

    def limits(self, task: Task) -> Limits:
        """The limits `task`'s submissions are graded under: its own, else the run's."""
        return task.limits or self.sandbox_config.limits

    async def verify_many(self, items: Sequence[tuple[Task, str]]) -> list[Verdict | TrialgroundError]:
        """Single-turn submissions graded in ONE sandbox exec per set of limits (`limits`): the runner wipes
        and rewrites the workspace before each (and /tmp, /dev/shm), forks fresh workers for each, and
        reports each separately. Per-item failures are returned, not raised."""
        # One exec has one memory, process and disk ceiling: members whose tasks set different limits
        # never share one (the grader's batcher already splits its batches the same way).
        groups: dict[Limits, list[int]] = {}
        for i, (task, _) in enumerate(items):
            groups.setdefault(self.limits(task), []).append(i)
        parts = await asyncio.gather(
            *(self._verify_batch([items[i] for i in idx], lim) for lim, idx in groups.items())
        )
        results: dict[int, Verdict | TrialgroundError] = {}
        for idx, part in zip(groups.values(), parts, strict=True):
            results.update(zip(idx, part, strict=True))
        return [results[i] for i in range(len(items))]

    async def _verify_batch(
        self, items: Sequence[tuple[Task, str]], base: Limits
    ) -> list[Verdict | TrialgroundError]:
        """`verify_many` for submissions whose tasks share the limits `base`."""
        out: list[Verdict | TrialgroundError] = []
        jobs: list[dict[str, Any]] = []
        token, host_key = secrets.token_hex(16), os.urandom(32)
        for task, submission in items:
            try:
                _check_task(task)
                files = {k: v.encode() for k, v in task.files.items()}
                files[solution_path(task)] = submission.encode()
                jobs.append(
                    {
                        **job_header(task, self.grading, token, visible=self.grading.run_visible),
                        "files": files,
                        "cpu_s": base.cpu_s,  # the runner gives each member's worker its task's CPU time
                    }
                )
            except TrialgroundError as e:
                out.append(e)
                continue
            out.append(VerifierError("pending", kind="pending"))
        if not jobs:
            return out
        stdin = batch_stdin(jobs, token, host_key, self.grading.preload)
        wall = min(3600.0, len(jobs) * self.grading.total_timeout_s + 10.0)
        # the exec's CPU time covers the runner, which lives through every member
        limits = base.model_copy(update={"wall_s": wall, "cpu_s": min(3600.0, max(base.cpu_s, wall))})
        async with self._slots:
            sandbox, snap = await self.pool.acquire({})
            try:
                report: dict | Verdict | None = await self._run(sandbox, snap, stdin, limits, host_key)
            except TrialgroundError:
                report = None  # the batch's sandbox broke: every member is graded alone below
        reports = report.get("jobs") if isinstance(report, dict) else None
        pending = [i for i, o in enumerate(out) if isinstance(o, VerifierError) and o.kind == "pending"]
        alone: list[int] = []
        for n, i in enumerate(pending):
            if reports is None or n >= len(reports) or "tests" not in reports[n]:
                # No report for it (the batch's runner was killed, or a member left the sandbox dirty,
                # or its files could not be written): whatever a sibling did must not decide its verdict.
                alone.append(i)
            else:
                out[i] = self._verdict(items[i][0], reports[n])
        if alone:
            regraded = await asyncio.gather(*(self.verify(*items[i]) for i in alone), return_exceptions=True)
            for i, res in zip(alone, regraded, strict=True):
                if isinstance(res, BaseException) and not isinstance(res, TrialgroundError):
                    raise res
                out[i] = res
        return out

    def host_verdict(self, task: Task, files: Mapping[str, str | bytes]) -> Verdict | None:
        """The verdict of a solution that does not compile, decided on the host (`precheck_syntax`): the
        report the runner gives it (every test an import error) without a sandbox run; None otherwise."""
        if not self.grading.precheck_syntax or self.sandbox_python != sys.version:
            return None
        error = import_failure(task, files, self.grading.host_parse_max_bytes)
        if error is None:
            return None
        rows = [[name, "error", error, 0.0] for name in report_names(task, visible=self.grading.run_visible)]
        verdict = self._verdict(task, {"tests": rows, "flags": []})
        return verdict.model_copy(update={"shortcut": "host_syntax"})

    async def _run(
        self, sandbox: Sandbox, snap: str | None, stdin: bytes, limits: Limits, host_key: bytes
    ) -> dict | Verdict:
        """Run the runner, release the sandbox (kept only when it reported itself clean), and return the
        signed report or a failed Verdict (see `_report`)."""
        flags = "-I" if self.grading.site_packages else "-IS"
        healthy = False
        try:
            result = await sandbox.exec(
                [self.grading.python, flags, "-c", BOOT], stdin=stdin, cwd=WORKSPACE, limits=limits, env={}
            )
            healthy = result.status.value != "sandbox_error"
            report = self._report(result, healthy, host_key)
            if isinstance(report, dict) and isinstance(report.get("python"), str):
                self.sandbox_python = report["python"]
            # a sandbox is reused only when its runner said every process of the grading is gone and
            # the workspace, /tmp and /dev/shm are empty
            healthy = isinstance(report, dict) and bool(report.get("clean", snap is None))
        finally:
            await self.pool.release(sandbox, snap, healthy)
        return report

    def _report(self, result: ExecResult, healthy: bool, host_key: bytes) -> dict | Verdict:
        """The signed report; raises on infrastructure failure; a Verdict (failed) when the runner was
        killed by the submission's doing (memory, a forged or missing report)."""
        report = parse_report(result.stdout, host_key)
        if report is not None:
            return report
        if result.exit_code == 96:
            raise VerifierError(f"sandbox Python mismatch: {result.stderr[-200:]}", kind="python_mismatch")
        if result.exit_code in (97, 126, 127):  # the runner never started or never got its input
            raise SandboxError(
                f"grading runner could not start (exit {result.exit_code}): {result.stderr[-300:]}",
                kind="runner_start",
            )
        if not healthy:
            raise SandboxError(f"grading sandbox failed: {result.stderr[-500:]}", kind="exec_failed")
        evidence = f"no valid signed report (status {result.status.value}, exit {result.exit_code})"
        return Verdict(
            passed=False,
            flags=(Flag(name="runner_tampering", evidence=evidence, severity="warn"),),
            detail=f"{evidence}: {result.stderr[-300:]}",
        )

    async def close(self) -> None:
        await self.pool.close()

    def _verdict(self, task: Task, report: dict) -> Verdict:
        tests = tuple(
            TestResult(name=name, outcome=outcome, detail=detail)
            for name, outcome, detail, _ in report["tests"]
        )
        hidden = [t for t in tests if not t.name.startswith(VISIBLE_PREFIX)]
        visible = [t for t in tests if t.name.startswith(VISIBLE_PREFIX)]
        flags = [
            Flag(name=f[0], evidence=f[1], severity=f[2] if len(f) > 2 else "hack")
            for f in _unique(report["flags"])
        ]
        expected = override_or(code_params(task).expected_tests, len(hidden))
        ran = [t for t in hidden if t.outcome != "missing"]
        passed_n = sum(1 for t in hidden if t.outcome == "passed")
        detail = f"{passed_n}/{max(expected, len(hidden))} hidden tests passed"
        if len(ran) < expected:
            detail += f"; only {len(ran)} of {expected} expected tests ran"
        hack = any(f.severity == "hack" for f in flags)
        passed = passed_n >= expected and passed_n == len(hidden) and len(hidden) > 0 and not hack
        if visible and not passed and all(t.outcome == "passed" for t in visible):
            flags.append(
                Flag(
                    name="special_casing",
                    evidence=f"passes all {len(visible)} visible checks but fails hidden ones ({detail})",
                    severity="warn",
                )
            )
        score = passed_n / max(expected, len(hidden), 1)
        return Verdict(passed=passed, score=min(score, 1.0), tests=tests, flags=tuple(flags), detail=detail)


def _check_task(task: Task) -> None:
    if not task.hidden_checks:
        raise VerifierError(f"task {task.id}: code_tests needs hidden checks", kind="bad_task")


def _unique(flags: list[list[str]]) -> list[tuple[str, ...]]:
    return list(dict.fromkeys(tuple(f) for f in flags))
