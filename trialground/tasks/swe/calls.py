"""Recorded calls: what a repository's tests ask of its library, recorded once, asked again of a submission.

A repository task's tests import the library they test, so a process that runs both holds the tests'
expected values beside the submission's code. Recording the tests' calls takes them apart
(`sandboxed/calls.py`):

1. `record_calls(spec, config)`: the pristine repository's suite runs once, in a sandbox of its image, with
   every call from a test into the library recorded as a step: its target and arguments, and its outcome
   (the value as plain data, the type of an object, the type of an exception). Trusted code only.
2. Each recorded test's steps are replayed twice against the pristine library in a *calls image*: a sandbox
   holding the library's files and the replay program, nothing of the tests. A step whose outcome is not
   the one recorded in both replays (hashing, addresses, state left by an earlier test) is replayed but
   not compared; a test with no compared step has no recorded calls. The result is the repository's
   `CallBook`, cached on disk beside the task sets.
3. Grading (`replay`): a submission's library is written into a calls image and each test's steps (never
   their outcomes) are sent in; what comes back is parsed with `trialground.plainjson`'s bounds and
   compared host-side (`mismatch`) with the recorded outcomes, which never enter a sandbox.

The process running the submission's library has no test file, no expected value and no channel to a
verdict: whatever it prints is data the host compares with what only the host knows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trialground import plainjson
from trialground.errors import SandboxError
from trialground.sandbox.base import WORKSPACE, ExecStatus, Limits, Sandbox, SandboxConfig
from trialground.tasks.swe.paths import is_test_path
from trialground.tasks.swe.repos import RepoSpec, cache_dir, is_library
from trialground.tasks.swe.sandboxed import program_source

PROGRAM = ".tg/calls.py"
_RECORD_OUT = ".tg/calls-record.json"
# Not isolated (`-I`) so that one hash seed holds for the recording and every replay: a value built from a
# set of strings comes out in the same order each time. No user site, no site-packages, no bytecode; the
# program takes its own directory off `sys.path`.
_ARGV = ["python3", "-S", "-s", "-B", PROGRAM]
CALLS_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
_PREFIX = "TGCALLS "
_RECORD_LIMITS = Limits(
    wall_s=600.0,
    cpu_s=600.0,
    memory_mb=2048,
    file_size_mb=300,
    disk_mb=1024,
    output_bytes=(256 << 20) + (1 << 20),
)
# What a replay may send back: the steps' outcomes, as plain data
# (a value nested `MAX_DEPTH` deep in Python is at most three times as deep in its tagged JSON form)
REPLAY_BOUNDS = plainjson.JSONBounds(max_chars=32 << 20, max_depth=128, max_number_chars=400)
_RECORD_BOUNDS = plainjson.JSONBounds(max_chars=256 << 20, max_depth=128, max_number_chars=400)


@dataclass(frozen=True)
class TestCalls:
    """One test's steps: what is sent to the sandbox (`steps`), what the host alone keeps (`expected`), and
    which steps are compared (`compared`: their outcome was the recorded one in every pristine replay)."""

    __test__ = False  # not a pytest class
    test: str
    steps: tuple[Mapping[str, Any], ...]
    expected: tuple[Mapping[str, Any], ...]
    compared: tuple[bool, ...]


@dataclass(frozen=True)
class CallBook:
    """A repository's recorded calls, by test node id (a test with no call that can be compared is absent)."""

    repo: str
    tests: Mapping[str, TestCalls]
    recorded: int  # tests that passed in the recording run

    def for_tests(self, tests: Sequence[str]) -> list[TestCalls]:
        return [self.tests[t] for t in tests if t in self.tests]


def calls_image_files(spec: RepoSpec, files: Mapping[str, str]) -> dict[str, str]:
    """What a calls sandbox holds: the library's files of `files` (never a test file) and the program."""
    kept = {p: t for p, t in files.items() if is_library(spec, p) and not is_test_path(p)}
    return {**kept, PROGRAM: program_source("calls.py")}


def library_path(spec: RepoSpec) -> list[str]:
    """`sys.path` entries of the library: the workspace and each `-o pythonpath=DIR` of the repository."""
    out = [WORKSPACE]
    args = list(spec.pytest_args)
    for a, b in itertools.pairwise(args):
        if a == "-o" and b.startswith("pythonpath="):
            out += [f"{WORKSPACE}/{d}" for d in b.removeprefix("pythonpath=").split()]
    return out


def calls_digest() -> str:
    """Part of a call book's cache key: another program, another book."""
    from trialground.tasks.swe.bundle import bundle_digest

    text = program_source("calls.py") + bundle_digest()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


async def replay(
    sandbox: Sandbox,
    recorded: Sequence[TestCalls],
    limits: Limits,
    path: Sequence[str],
    bounds: plainjson.JSONBounds = REPLAY_BOUNDS,
) -> dict[str, list[Any] | None]:
    """{test: the outcomes of its steps, or None} from making `recorded`'s calls in `sandbox` (a calls image
    with a library written in; `path`: the library's `sys.path`, `library_path`). Whatever the sandbox
    prints is only data; anything malformed is None."""
    header = {"path": list(path), "tests": {p.test: list(p.steps) for p in recorded}}
    res = await sandbox.exec(
        [*_ARGV, "replay"], stdin=json.dumps(header).encode(), env=CALLS_ENV,
        cwd=WORKSPACE, limits=limits,
    )  # fmt: skip
    if res.status is ExecStatus.SANDBOX_ERROR:
        raise SandboxError(f"swe calls: sandbox failed: {res.stderr[-300:]}", kind="sandbox")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(_PREFIX)]
    found: Any = None
    if lines:
        try:
            found = plainjson.loads(lines[-1][len(_PREFIX) :], bounds)
        except plainjson.UnparsableJSON:
            found = None
    out: dict[str, list[Any] | None] = {}
    for p in recorded:
        got = found.get(p.test) if isinstance(found, dict) else None
        out[p.test] = got if isinstance(got, list) else None
    return out


def mismatch(calls: TestCalls, observed: list[Any] | None) -> str | None:
    """None when every compared step of `calls` came to its recorded outcome; else what differed (no value
    is shown: the outcomes are the tests' expected values)."""
    if observed is None:
        return "no outcomes came back (the library's process failed, exited early or printed none)"
    if len(observed) != len(calls.steps):
        return f"{len(observed)} outcomes came back for {len(calls.steps)} calls"
    for i, (want, got, compared) in enumerate(zip(calls.expected, observed, calls.compared, strict=True)):
        if compared and got != want:
            return f"call {i + 1} of {len(calls.steps)} ({_target(calls.steps[i])}) came to another outcome"
    return None


def _target(step: Mapping[str, Any]) -> str:
    at = step.get("at", {})
    if "ref" in at:
        return f"<object>.{at.get('attr')}"
    return ".".join(str(x) for x in at.get("path") or at.get("new") or ())


def _plans(raw: Mapping[str, Any]) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """{test: (steps without outcomes, outcomes)} of a recording: the preludes of its file and of the
    conftest files above it, then its own steps."""
    preludes: Mapping[str, list[dict[str, Any]]] = raw.get("preludes", {})
    steps: Mapping[str, list[dict[str, Any]]] = raw.get("steps", {})
    out = {}
    for test in raw.get("passed", []):
        file = test.split("::", 1)[0]
        above = sorted(
            k for k in preludes
            if k == file or (k.endswith("conftest.py") and file.startswith(k.removesuffix("conftest.py")))
        )  # fmt: skip
        all_steps = [s for k in above for s in preludes[k]] + list(steps.get(test, []))
        if all_steps:
            sent = [{k: v for k, v in s.items() if k != "out"} for s in all_steps]
            out[test] = (sent, [s["out"] for s in all_steps])
    return out


async def record_calls(spec: RepoSpec, config: SandboxConfig) -> CallBook:
    """The call book of `spec` (see the module docstring), from the disk cache when it is there."""
    from trialground.tasks.swe.build import workspace_image_files
    from trialground.tasks.swe.image import RepoImage

    path = cache_dir() / "calls" / f"{spec.name}-{spec.version}-{calls_digest()}.json"
    if path.exists():
        return _book_from_json(spec.name, json.loads(path.read_text("utf-8")))
    files = workspace_image_files(spec)
    image = RepoImage(config, {**files, PROGRAM: program_source("calls.py")}, keep=1)
    try:
        async with image.lease() as sandbox:
            header = {
                "site": f"{WORKSPACE}/.tg/site", "path": library_path(spec), "root": WORKSPACE,
                "library": list(spec.library), "args": list(spec.pytest_args), "paths": list(spec.tests),
                "out": f"{WORKSPACE}/{_RECORD_OUT}",
            }  # fmt: skip
            res = await sandbox.exec(
                [*_ARGV, "record"], stdin=json.dumps(header).encode(), env=CALLS_ENV,
                cwd=WORKSPACE, limits=_RECORD_LIMITS,
            )  # fmt: skip
            if res.status is ExecStatus.SANDBOX_ERROR:
                raise SandboxError(
                    f"swe calls recording: sandbox failed: {res.stderr[-300:]}", kind="sandbox"
                )
            try:
                data = await sandbox.read(_RECORD_OUT, _RECORD_BOUNDS.max_chars)
            except (FileNotFoundError, SandboxError) as e:
                tail = (res.stdout[-300:] + res.stderr[-600:]).strip()
                raise SandboxError(f"swe calls recording wrote no record: {e}: {tail}", kind="sandbox") from e
    finally:
        await image.close()
    raw = plainjson.loads(data, _RECORD_BOUNDS)
    plans = _plans(raw)
    drafts = [
        TestCalls(t, tuple(sent), tuple(outs), tuple(True for _ in outs)) for t, (sent, outs) in plans.items()
    ]
    pristine = calls_image_files(spec, files)
    runs = []
    for _ in range(2):
        pimage = RepoImage(config, pristine, keep=1)
        try:
            async with pimage.lease() as sandbox:
                runs.append(await replay(sandbox, drafts, _RECORD_LIMITS, library_path(spec), _RECORD_BOUNDS))
        finally:
            await pimage.close()
    kept: dict[str, TestCalls] = {}
    for d in drafts:
        seen = [r.get(d.test) for r in runs]
        compared = tuple(
            all(isinstance(s, list) and len(s) == len(d.expected) and s[i] == want for s in seen)
            for i, want in enumerate(d.expected)
        )
        if any(compared):
            kept[d.test] = TestCalls(d.test, d.steps, d.expected, compared)
    book = CallBook(spec.name, kept, recorded=len(raw.get("passed", [])))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_book_to_json(book)), "utf-8")
    tmp.replace(path)
    return book


def _book_to_json(book: CallBook) -> dict[str, Any]:
    tests = {t: {"steps": list(p.steps), "expected": list(p.expected), "compared": list(p.compared)}
             for t, p in book.tests.items()}  # fmt: skip
    return {"recorded": book.recorded, "tests": tests}


def _book_from_json(repo: str, data: Mapping[str, Any]) -> CallBook:
    tests = {
        t: TestCalls(t, tuple(p["steps"]), tuple(p["expected"]), tuple(bool(c) for c in p["compared"]))
        for t, p in data["tests"].items()
    }
    return CallBook(repo, tests, recorded=int(data["recorded"]))
