"""The tools of the multi-turn environment, run against a task's sandbox.

Tools: ``bash(command)``, ``python(code)``, ``read_file(path)``, ``write_file(path, content)``,
``edit_file(path, old, new)`` (exact-match replace; no match or several matches is an error observation),
``apply_patch(patch)`` (a unified diff, applied by ``git apply`` in the sandbox: `trialground.envs.patching`),
``run_tests()`` (the task's visible checks; on a repository task its failing tests and the rest of its
suite, run as grading runs them), ``search(pattern, path?)`` and ``read_lines(path, start?, count?)``
(bounded search and paged reading, run in the sandbox: `trialground.envs.navigate`), ``fixes()`` and
``apply_fix(n?)`` (ranked candidate repairs on a repository task: `trialground.envs.repair`) and
``submit(answer?)``.

Contract: `Toolbox.run` turns every *program* failure (bad arguments, missing file, non-zero exit, timeout)
into a `ToolOutcome` with ``ok=False``; only a broken sandbox propagates, as `SandboxError`.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from trialground.envs import navigate, patching, repair
from trialground.errors import SandboxError, TrialgroundError
from trialground.sandbox.base import ExecResult, ExecStatus, Limits, Sandbox
from trialground.tasks.model import Task
from trialground.verify.verdict import Action

# name -> (required parameters, optional parameters)
TOOL_PARAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "bash": (("command",), ()),
    "python": (("code",), ()),
    "read_file": (("path",), ()),
    "write_file": (("path", "content"), ()),
    "edit_file": (("path", "old", "new"), ()),
    "apply_patch": (("patch",), ()),
    "run_tests": ((), ()),
    "search": (("pattern",), ("path",)),
    "read_lines": (("path",), ("start", "count")),
    "fixes": ((), ()),
    "apply_fix": ((), ("n",)),
    "submit": ((), ("answer",)),
}

TOOL_DOCS = """Tools (one or more calls per message):
- bash(command): run a bash script in /workspace
- python(code): run Python code in /workspace
- read_file(path): show a file
- write_file(path, content): create or overwrite a file
- edit_file(path, old, new): replace the one exact occurrence of `old` with `new`
- run_tests(): run the visible tests
- submit(answer?): finish; the workspace (or `answer`) is graded"""

# Listed in the prompt only where `env.navigation_tools` / `env.patch_tool` is on (every tool is callable
# everywhere): a policy trained on the shorter list keeps seeing the prompt it was trained on.
NAVIGATION_DOCS = (
    "- search(pattern, path?): lines with `pattern` (file:line:text), under `path` or everywhere\n"
    "- read_lines(path, start?, count?): `count` lines (default 20) of a file from line `start`"
)
PATCH_DOCS = "- apply_patch(patch): apply a unified diff to the workspace"
REPAIR_DOCS = (
    "- fixes(): numbered candidate one-line fixes at the lines the failing tests point at\n"
    "- apply_fix(n?): apply candidate n (default: the next) of the last fixes(), undoing the one applied "
    "before"
)


def tool_docs(navigation: bool, patch: bool = False, repairs: bool = False) -> str:
    """The prompt's tool list, with `search` and `read_lines` when `navigation`, `apply_patch` when
    `patch`, `fixes` and `apply_fix` when `repairs`."""
    listed = ((NAVIGATION_DOCS, navigation), (PATCH_DOCS, patch), (REPAIR_DOCS, repairs))
    extra = [d for d, on in listed if on]
    if not extra:
        return TOOL_DOCS
    head, _, last = TOOL_DOCS.rpartition("\n")
    return "\n".join([head, *extra, last])


# Runs the visible `test_*` functions of pytest-style files with the standard library only (the sandbox's
# Python need not have pytest). Prints one line per test and a summary; exits 1 unless all passed.
VISIBLE_RUNNER = """
import importlib.util, inspect, os, sys, traceback
sys.dont_write_bytecode = True
sys.path.insert(0, os.getcwd())
passed = failed = 0
for path in sys.argv[1:]:
    try:
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except BaseException:
        failed += 1
        print(f"ERROR {path} (collecting)")
        traceback.print_exc(limit=-2, file=sys.stdout)
        continue
    for name, fn in list(vars(mod).items()):
        if not name.startswith("test") or not inspect.isfunction(fn) or fn.__module__ != mod.__name__:
            continue
        if inspect.signature(fn).parameters:
            failed += 1
            print(f"ERROR {path}::{name}: takes arguments (fixtures are not supported)")
            continue
        try:
            fn()
        except BaseException as e:
            failed += 1
            print(f"FAILED {path}::{name}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=-2, file=sys.stdout)
        else:
            passed += 1
            print(f"PASSED {path}::{name}")
print(f"{passed} passed, {failed} failed")
sys.exit(0 if passed and not failed else 1)
"""


# Bytecode caches are keyed by mtime and size, so an edit within the same second that keeps the size
# (a - b -> a + b) would run stale code; tools never write them.
_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}


# Paths sorted bytewise (LC_ALL=C) so the digest does not depend on a locale.
# read_file shows files up to this size whole; of a larger regular file it shows only the first and last
# half of this, cut inside the sandbox, so the host never holds more than this for one call (the host-side
# read stops at the file's size). write_file does not read a larger file to compare, and edit_file
# refuses one.
READ_FILE_MAX_BYTES = 256 << 10
_DIGEST = "export LC_ALL=C; find . -type f -print0 | sort -z | xargs -0 -r sha256sum | sha256sum"


class FileError(Exception):
    """A file operation the model asked for failed (bad path, missing, a directory, quota)."""


class FileTooLarge(FileError):
    """The file is over the size a tool reads onto the host."""


# SandboxError kinds that describe the path the model gave, not a broken sandbox.
_PATH_KINDS = frozenset({"bad_path", "not_a_file", "too_large", "read", "write"})


@dataclass(frozen=True)
class ToolOutcome:
    text: str
    ok: bool
    changed_workspace: bool | None = None
    target: str | None = None
    submit: bool = False
    answer: str | None = None


def argument_digest(name: str, arguments: dict[str, Any]) -> str:
    blob = json.dumps([name, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make_action(name: str, arguments: dict[str, Any], outcome: ToolOutcome | None) -> Action:
    """The grader's record of one call; `outcome=None` means the call was invalid and never ran."""
    return Action(
        tool=name,
        argument_digest=argument_digest(name, arguments),
        ok=outcome.ok if outcome else False,
        changed_workspace=outcome.changed_workspace if outcome else False,
        target=outcome.target if outcome else None,
    )


def validate_call(name: str, arguments: dict[str, Any]) -> str | None:
    """Why a call cannot run, or None when it can."""
    if name not in TOOL_PARAMS:
        return f"unknown tool {name!r}; available: {', '.join(TOOL_PARAMS)}"
    required, optional = TOOL_PARAMS[name]
    missing = [p for p in required if p not in arguments]
    if missing:
        return f"{name}: missing parameter(s) {', '.join(missing)}"
    extra = [p for p in arguments if p not in required and p not in optional]
    if extra:
        return f"{name}: unknown parameter(s) {', '.join(extra)}; takes {', '.join(required + optional)}"
    wrong = [p for p in arguments if not isinstance(arguments[p], str | int | float)]
    if wrong:
        return f"{name}: parameter(s) {', '.join(wrong)} must be text"
    return None


def render_exec(res: ExecResult) -> str:
    head = f"[exit {res.exit_code}]" if res.status == "ok" or res.exit_code is not None else ""
    if res.status not in ("ok", "nonzero_exit"):
        head = f"[{res.status}{f' exit {res.exit_code}' if res.exit_code is not None else ''}]"
    parts = [head]
    if res.stdout:
        parts.append(res.stdout.rstrip("\n"))
    if res.stderr:
        parts.append("[stderr]\n" + res.stderr.rstrip("\n"))
    return "\n".join(parts)


class _Deadline:
    """One call's wall limit shared by the programs it runs one after another: each gets what is left, so
    the call ends within its limit however many programs it starts (the environment treats a call that
    overruns its limit as a hung sandbox)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.end = time.monotonic() + limits.wall_s

    def next(self) -> Limits | None:
        """Limits for the next program, or None when under 0.1 s is left."""
        left = self.end - time.monotonic()
        if left < 0.1:
            return None
        return self.limits.model_copy(update={"wall_s": min(self.limits.wall_s, left)})


def _nav_limits(limits: Limits) -> Limits:
    return limits.model_copy(update={"output_bytes": min(limits.output_bytes, navigate.NAV_OUTPUT_BYTES)})


def _backend_failure(op: str, e: Exception) -> SandboxError:
    """An exception the sandbox backend raised for `op` (its own bug, a lost connection): a failure of the
    sandbox, told apart here from one in a tool's host-side code, which the environment reports as its
    own (`EnvError`, kind `tool_crashed`)."""
    return SandboxError(f"sandbox {op} failed: {type(e).__name__}: {e}", kind="crashed")


@contextmanager
def _file_access(op: str, path_errors: tuple[type[Exception], ...]) -> Iterator[None]:
    """What a sandbox file access (`op`) raises, as the toolbox reports it: a path the workspace refuses
    (`path_errors` or a SandboxError of a path kind) is a FileError the model sees as a tool error, a file
    over the read limit a FileTooLarge, the backend's own failure a SandboxError of kind `crashed`."""
    try:
        yield
    except SandboxError as e:
        if e.kind == "too_large":
            raise FileTooLarge(str(e)) from e
        if e.kind in _PATH_KINDS:
            raise FileError(str(e)) from e
        raise
    except path_errors as e:
        raise FileError(str(e) or type(e).__name__) from e
    except TrialgroundError:
        raise
    except Exception as e:
        raise _backend_failure(op, e) from e


class Toolbox:
    """Runs tool calls in one sandbox for one task."""

    def __init__(self, sandbox: Sandbox, task: Task, limits: Limits, python: str = "python3") -> None:
        self.sandbox = sandbox
        self.task = task
        self.limits = limits
        self.python = python

    async def _exec(
        self,
        cmd: list[str] | str,
        limits: Limits,
        stdin: str | bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        try:
            res = await self.sandbox.exec(cmd, stdin=stdin, env=_ENV if env is None else env, limits=limits)
        except TrialgroundError:
            raise
        except Exception as e:
            raise _backend_failure("exec", e) from e
        if res.status == ExecStatus.SANDBOX_ERROR:  # the sandbox broke, not the program: end the episode
            raise SandboxError(f"sandbox failed: {res.stderr.strip()[:300]}", kind="sandbox_died")
        return res

    async def workspace_digest(self, limits: Limits | None = None) -> str | None:
        """sha256 over every regular file's path and content in /workspace, as the sandbox sees it now
        (first 16 hex digits); None when the sandbox does not answer with one (a simulated backend)."""
        res = await self._exec(_DIGEST, limits or self.limits)
        digest = res.stdout.split(" ", 1)[0].strip()
        return digest[:16] if res.ok and len(digest) == 64 else None

    async def _read(self, path: str) -> bytes:
        with _file_access("read", (FileNotFoundError, IsADirectoryError, PermissionError, ValueError)):
            return await self.sandbox.read(path, READ_FILE_MAX_BYTES)

    async def _write_raw(self, path: str, data: str | bytes) -> None:
        with _file_access("write", (IsADirectoryError, PermissionError, ValueError, OSError)):
            await self.sandbox.write(path, data)

    async def run(
        self, name: str, args: dict[str, Any], wall_s: float, memo: repair.RepairMemo | None = None
    ) -> ToolOutcome:
        """Run a validated call with at most `wall_s` seconds for any program it starts. `memo`: the
        episode's record of listed repair candidates (`fixes`, `apply_fix`)."""
        a = {k: str(v) for k, v in args.items()}
        limits = self.limits.model_copy(update={"wall_s": max(0.1, min(self.limits.wall_s, wall_s))})
        if name == "bash":
            res = await self._exec(a["command"], limits)
            return ToolOutcome(render_exec(res), res.ok)
        if name == "python":
            res = await self._exec([self.python, "-B", "-"], limits, stdin=a["code"])
            return ToolOutcome(render_exec(res), res.ok)
        if name == "read_file":
            return await self._read_file(a["path"], limits)
        if name == "write_file":
            return await self._write(a["path"], a["content"], limits)
        if name == "edit_file":
            return await self._edit(a["path"], a["old"], a["new"], limits)
        if name == "apply_patch":
            return await self._apply_patch(a["patch"], limits)
        if name == "run_tests":
            return await self._run_tests(limits)
        if name == "search":
            return await self._search(a["pattern"], a.get("path") or ".", limits)
        if name == "read_lines":
            return await self._read_lines(a["path"], a.get("start"), a.get("count"), limits)
        if name in ("fixes", "apply_fix"):
            memo = memo if memo is not None else repair.RepairMemo()
            if name == "fixes":
                return await self._fixes(memo, limits)
            return await self._apply_fix(memo, a.get("n"))
        if name == "submit":
            return ToolOutcome("submitted", True, False, submit=True, answer=a.get("answer"))
        raise AssertionError(f"unvalidated tool {name}")  # validate_call rejects unknown names

    async def _read_file(self, path: str, limits: Limits) -> ToolOutcome:
        try:
            data = await self._read(path)
        except FileTooLarge:
            return await self._read_ends(path, limits)
        except FileError as e:
            return ToolOutcome(f"error: cannot read {path}: {e}", False, False, path)
        return ToolOutcome(data.decode("utf-8", errors="replace"), True, False, path)

    async def _read_ends(self, path: str, limits: Limits) -> ToolOutcome:
        """A file over READ_FILE_MAX_BYTES (the host-side read refused it by its size): its first and last
        half of that, cut by `head` and `tail` inside the sandbox, and how much lies between."""
        half = READ_FILE_MAX_BYTES // 2
        quoted = shlex.quote(path)
        cut = limits.model_copy(update={"output_bytes": max(limits.output_bytes, half + 64)})
        deadline = _Deadline(cut)
        done: list[ExecResult] = []
        for cmd in (f"wc -c < {quoted}", f"head -c {half} -- {quoted}", f"tail -c {half} -- {quoted}"):
            left = deadline.next()
            if left is None:
                return ToolOutcome(f"error: cannot read {path}: out of time", False, False, path)
            done.append(await self._exec(cmd, left))
        size, head, tail = done
        if not (size.ok and head.ok and tail.ok) or not size.stdout.strip().isdigit():
            return ToolOutcome(f"error: cannot read {path}: it changed while being read", False, False, path)
        hidden = max(0, int(size.stdout) - 2 * half)
        note = (
            f"\n[... {hidden} bytes not shown: read_file shows {READ_FILE_MAX_BYTES} bytes of a file at "
            "most; search and read_lines reach the rest ...]\n"
        )
        return ToolOutcome(head.stdout + note + tail.stdout, True, False, path)

    async def _read_text(self, path: str) -> str | None:
        try:
            return (await self._read(path)).decode("utf-8", errors="surrogateescape")
        except FileError:
            return None

    async def _write(self, path: str, content: str, limits: Limits) -> ToolOutcome:
        before = await self._read_text(path)
        try:
            await self._write_raw(path, content)
        except FileError as e:
            return ToolOutcome(f"error: cannot write {path}: {e}", False, False, path)
        return ToolOutcome(f"wrote {len(content)} chars to {path}", True, before != content, path)

    async def _edit(self, path: str, old: str, new: str, limits: Limits) -> ToolOutcome:
        try:
            text: str | None = (await self._read(path)).decode("utf-8", errors="surrogateescape")
        except FileTooLarge:
            return ToolOutcome(
                f"error: cannot edit {path}: edit_file edits files up to {READ_FILE_MAX_BYTES} bytes "
                "(write_file replaces a larger one)",
                False,
                False,
                path,
            )
        except FileError:
            text = None
        if text is None:
            return ToolOutcome(f"error: cannot edit {path}: no such file", False, False, path)
        if not old:
            return ToolOutcome("error: edit_file needs a non-empty `old`", False, False, path)
        count = text.count(old)
        if count == 0:
            return ToolOutcome(f"error: `old` text not found in {path}; nothing changed", False, False, path)
        if count > 1:
            return ToolOutcome(
                f"error: `old` text is ambiguous: {count} matches in {path}; include more context",
                False,
                False,
                path,
            )
        updated = text.replace(old, new, 1)
        try:
            await self._write_raw(path, updated.encode("utf-8", errors="surrogateescape"))
        except FileError as e:
            return ToolOutcome(f"error: cannot write {path}: {e}", False, False, path)
        return ToolOutcome(f"edited {path} (1 replacement)", True, updated != text, path)

    async def _apply_patch(self, patch: str, limits: Limits) -> ToolOutcome:
        """`patching`: refused on the host by size and header paths, else applied by `git apply` in the
        sandbox. `target` is the first file the patch touches, or the first of them that is one of the
        task's checks (the tamper detector reads it)."""
        refused = patching.refusal(patch)
        if refused is not None:
            return ToolOutcome(f"error: {refused}; nothing changed", False, False)
        argv = patching.patch_argv(self.python, patch)
        report = limits.model_copy(update={"output_bytes": patching.REPORT_BYTES})
        res = await self._exec(argv, report, stdin=patching.patch_bytes(patch))
        result = patching.parse_result(res.stdout) if res.ok else None
        if result is None:  # killed or timed out: whether git had started writing is unknown
            return ToolOutcome(f"error: apply_patch did not finish\n{render_exec(res)}", False, None)
        checks = {*self.task.visible_checks, *self.task.hidden_checks}
        target = next((f for f in result.files if f in checks), result.files[0] if result.files else None)
        if not result.ok:
            unchanged = "nothing changed" if result.changed is False else "the workspace may have changed"
            return ToolOutcome(
                f"error: the patch does not apply; {unchanged}\n{result.error}", False, result.changed, target
            )
        return ToolOutcome(patching.summary(result.files, result.changed), True, result.changed, target)

    async def _search(self, pattern: str, path: str, limits: Limits) -> ToolOutcome:
        if not pattern:
            return ToolOutcome("error: search needs a non-empty pattern", False, False, path)
        res = await self._exec(navigate.search_argv(self.python, pattern, path), _nav_limits(limits))
        if res.status != "ok" and res.exit_code not in (0, 1, 2):  # timed out or killed: say so
            return ToolOutcome(render_exec(res), False, False, path)
        return ToolOutcome(res.stdout.rstrip("\n"), res.exit_code == 0, False, path)

    async def _read_lines(
        self, path: str, start: str | None, count: str | None, limits: Limits
    ) -> ToolOutcome:
        bounds = navigate.page_bounds(start, count)
        if isinstance(bounds, str):
            return ToolOutcome(f"error: {bounds}", False, False, path)
        argv = navigate.read_argv(self.python, path, *bounds)
        res = await self._exec(argv, _nav_limits(limits))
        if res.status != "ok" and res.exit_code not in (0, 1, 2):
            return ToolOutcome(render_exec(res), False, False, path)
        return ToolOutcome(res.stdout.rstrip("\n"), res.exit_code == 0, False, path)

    async def _run_tests(self, limits: Limits) -> ToolOutcome:
        if self.task.verifier.kind == "swe_tests":
            return await self._run_repo_tests(limits)
        paths = sorted(self.task.visible_checks)
        if not paths:
            return ToolOutcome("this task has no visible tests", False)
        py = [p for p in paths if p.endswith(".py")]
        outputs: list[str] = []
        ok = True
        deadline = _Deadline(limits)
        if py:
            res = await self._exec([self.python, "-B", "-c", VISIBLE_RUNNER, *py], limits)
            ok = ok and res.ok
            outputs.append(render_exec(res))
        for p in paths:
            if p.endswith(".py"):
                continue
            left = deadline.next()
            if left is None:
                ok = False
                outputs.append(f"{p}: not run: run_tests used its {limits.wall_s:g} s")
                continue
            res = await self._exec(["bash", p] if p.endswith(".sh") else [f"./{p}"], left)
            ok = ok and res.ok
            outputs.append(f"{p}: " + render_exec(res))
        return ToolOutcome("\n".join(outputs), ok)

    async def _run_repo_tests(self, limits: Limits) -> ToolOutcome:
        """A repository task's failing tests and the rest of its suite, run exactly as grading runs them
        (`trialground.tasks.swe.harness`): the same commands and environment, in this sandbox."""
        from trialground.tasks.swe.harness import TEST_ENV, test_runs

        outputs: list[str] = []
        ok = True
        runs = test_runs(self.task)
        failed = 0
        deadline = _Deadline(limits)
        for run in runs:
            left = deadline.next()
            if left is None:  # out of time: the runs left are failed, not run
                ok = False
                failed += 1
                outputs.append(f"== {run.label}: FAILED\nnot run: run_tests used its {limits.wall_s:g} s")
                continue
            res = await self._exec(run.argv, left, env=TEST_ENV)
            ok = ok and res.ok
            failed += not res.ok
            text = render_exec(res)
            outputs.append(
                f"== {run.label}: {'passed' if res.ok else 'FAILED'}\n{text if not res.ok else text[:300]}"
            )
        # the verdict first: an observation cut to a small budget still shows it
        head = f"tests passed ({len(runs)} runs)" if ok else f"tests FAILED ({failed} of {len(runs)} runs)"
        return ToolOutcome("\n".join([head, *outputs]), ok)

    async def _fixes(self, memo: repair.RepairMemo, limits: Limits) -> ToolOutcome:
        """`trialground.envs.repair`: localize in the sandbox, list candidate edits on the host."""
        if self.task.verifier.kind != "swe_tests":
            return ToolOutcome("error: fixes() needs a repository task (its tests localize the bug)", False)
        deadline = _Deadline(limits)
        digest = await self.workspace_digest(limits)
        key = (self.task.id, digest) if digest and self.task.id else None
        result = repair.LOCALIZED.get(key) if key else None
        if result is None:
            left = deadline.next()
            if left is None:
                return ToolOutcome(f"error: fixes() used its {limits.wall_s:g} s before the tests ran", False)
            argv = [self.python, "-I", "-S", "-c", repair.LOCALIZE_PROGRAM]
            res = await self._exec(argv, _nav_limits(left), stdin=repair.localize_input(self.task))
            result = repair.parse_result(res.stdout)
            if result is None:
                why = render_exec(res)[-300:]
                return ToolOutcome(f"error: the tests could not be run to localize: {why}", False)
            if key:
                repair.LOCALIZED.put(key, result)
        fixes, skipped = await repair.list_fixes(result.ranked, self._read_text)
        memo.fixes, memo.applied = fixes, None
        text = repair.render_fixes(fixes, result.failed, result.passed)
        if skipped:
            text += f"\n(not parsed, over {repair.HOST_PARSE_MAX_BYTES} bytes: {', '.join(skipped)})"
        return ToolOutcome(text, bool(fixes), False)

    async def _apply_fix(self, memo: repair.RepairMemo, n: str | None) -> ToolOutcome:
        fix = repair.choose(memo, n)
        if isinstance(fix, str):
            return ToolOutcome(f"error: {fix}", False, False)
        new = repair.rewrite(memo, fix, await self._read_text(fix.path))
        if new is None:
            return ToolOutcome(
                f"error: {fix.path} changed since fixes() listed it; call fixes() again",
                False,
                False,
                fix.path,
            )
        try:
            await self._write_raw(fix.path, new.encode("utf-8", errors="surrogateescape"))
        except FileError as e:
            return ToolOutcome(f"error: cannot write {fix.path}: {e}", False, None, fix.path)
        memo.applied = fix
        k = memo.fixes.index(fix) + 1
        return ToolOutcome(f"applied fix {k} at {fix.path}:{fix.line}", True, True, fix.path)
