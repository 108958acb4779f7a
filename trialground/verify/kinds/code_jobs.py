"""What a code grading hands the sandboxed runner, and how its report is read back: the runner's boot line
and code, each job's header and check specs (sealed hidden checks, visible ones), the signed stdin frames, and
the HMAC-checked report; plus the task-side names the grading reads (`code_params`, `solution_path`, test
names and imports of a check). `code_tests.py` runs the gradings.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import hmac
import marshal
import sys
from importlib import resources
from types import CodeType
from typing import Any, TypeVar

from trialground import pyast
from trialground.errors import VerifierError
from trialground.sandbox.backends.bwrap import RESET_SOURCE
from trialground.tasks.checks import test_function_names
from trialground.tasks.model import Task
from trialground.tasks.verifiers import CodeTestsParams
from trialground.verify.config import GradingConfig
from trialground.verify.kinds.sealing import PLACEHOLDER, sealed

T = TypeVar("T")

# The runner arrives on stdin as a marshalled code object (no source compile in the sandbox); marshal
# ties it to this Python version, so a different sandbox Python exits 96 (an infrastructure error).
BOOT = (
    "import os, sys, marshal\n"
    "def _r(n):\n"
    "    b = b''\n"
    "    while len(b) < n:\n"
    "        c = os.read(0, n - len(b))\n"
    "        if not c:\n"
    "            raise SystemExit(97)\n"
    "        b += c\n"
    "    return b\n"
    f"if sys.version_info[:2] != {tuple(sys.version_info[:2])!r}:\n"
    "    print('runner needs Python %d.%d' % " + f"{tuple(sys.version_info[:2])!r}" + ", file=sys.stderr)\n"
    "    raise SystemExit(96)\n"
    "exec(marshal.loads(_r(int(_r(10)))), {'__name__': 'tg_runner'})\n"
)
REPORT_PREFIX = "TGREPORT "
VISIBLE_PREFIX = "visible::"


def code_params(task: Task) -> CodeTestsParams:
    """The task's validated `CodeTestsParams` (made once, when the task was)."""
    return task.verifier.params_as(CodeTestsParams)


def solution_path(task: Task) -> str:
    return code_params(task).solution_path


def module_name(path: str) -> str:
    if not path.endswith(".py") or "/" in path:
        raise VerifierError(f"solution_path {path!r}: expected a top-level .py file", kind="bad_task")
    return path[:-3]


@functools.lru_cache(maxsize=4096)
def test_names(source: str) -> list[str]:
    """Top-level `def test_*` names in definition order, read from the AST (never by running the file)."""
    try:
        return test_function_names(source)
    except SyntaxError as e:
        raise VerifierError(f"check file does not parse: {e}", kind="bad_task") from e


@functools.lru_cache(maxsize=4096)
def check_imports(source: str) -> frozenset[str]:
    """Top-level modules a check file imports at its top level (the runner imports them once, before it
    forks the checker and the worker, so neither pays for them)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return frozenset(names)


@functools.cache
def runner_source(name: str = "runner.py") -> str:
    return resources.files("trialground.verify.sandboxed").joinpath(name).read_text()


@functools.lru_cache(maxsize=4096)
def _compiled(source: str, path: str) -> CodeType:
    try:
        return compile(source, f"{PLACEHOLDER}:{path}", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        raise VerifierError(f"{path} does not compile: {e}", kind="bad_task") from e


def _retitle(code: CodeType, filename: str) -> CodeType:
    """The same code object with `filename` everywhere (nested functions and classes included)."""
    consts = tuple(_retitle(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def compiled_for(source: str, path: str, token: str) -> CodeType:
    """`source` compiled as `<tg-TOKEN:path>`: the runner trusts frames from files named with its token."""
    return _retitle(_compiled(source, path), f"<tg-{token}:{path}>" if path else f"<tg-{token}>")


def _frame(data: bytes) -> bytes:
    return f"{len(data):010d}".encode() + data


def _check_specs(task: Task, visible: bool) -> list[dict[str, Any]]:
    """The check files in the runner's order (hidden, then visible when run), each with the prefix of its
    tests' names in a report."""
    hidden = sorted(task.hidden_checks.items())
    specs: list[dict[str, Any]] = [
        {"path": p, "module": f"tg_hidden_{i}", "prefix": f"{p}::" if len(hidden) > 1 else "", "source": src}
        for i, (p, src) in enumerate(hidden)
    ]
    if visible:
        specs += [
            {"path": p, "module": f"tg_visible_{i}", "prefix": f"{VISIBLE_PREFIX}{p}::", "source": src}
            for i, (p, src) in enumerate(sorted(task.visible_checks.items()))
        ]
    return specs


def report_names(task: Task, *, visible: bool) -> list[str]:
    """The test names a runner's report lists for `task`, in its order."""
    return [spec["prefix"] + n for spec in _check_specs(task, visible) for n in test_names(spec["source"])]


def job_header(task: Task, grading: GradingConfig, token: str, *, visible: bool) -> dict[str, Any]:
    """What the runner needs to grade one submission of `task` (tests compiled here, with the token)."""
    specs = _check_specs(task, visible)
    expected: list[list[Any]] = []
    for n, spec in enumerate(specs):
        source = str(spec.pop("source"))
        spec["names"] = test_names(source)
        if n < len(task.hidden_checks):  # visible checks are no secret: they run as written
            code, literals, checks = sealed(source, str(spec["path"]))
            spec["code"] = _retitle(code, f"<tg-{token}:{spec['path']}>")
        else:
            spec["code"], literals, checks = compiled_for(source, str(spec["path"]), token), (), {}
        spec["checks"] = checks
        expected.append(list(literals))
    return {
        "_expected": expected,  # removed before the header is sent: it follows the host key
        "tests": specs,
        "n_hidden": sum(len(spec["names"]) for spec in specs[: len(task.hidden_checks)]),
        "check_names": sorted({p.rsplit("/", 1)[-1] for p in [*task.hidden_checks, *task.visible_checks]}),
        "imports": sorted(
            {m for src in task.hidden_checks.values() for m in check_imports(src)}
            - {module_name(solution_path(task))}
        ),
        "solution_module": module_name(solution_path(task)),
        "strict_types": override_or(code_params(task).strict_types, grading.strict_types),
        "test_timeout_s": override_or(code_params(task).test_timeout_s, grading.test_timeout_s),
        "total_timeout_s": grading.total_timeout_s,
    }


def runner_stdin(
    task: Task, grading: GradingConfig, token: str, host_key: bytes, *, visible: bool, wipe_tmp: bool = False
) -> bytes:
    """The runner's stdin for one grading: boot block (the runner's code object), header, host key."""
    header = {"token": token, "wipe_tmp": wipe_tmp, **job_header(task, grading, token, visible=visible)}
    expected = [header.pop("_expected")]
    return _stdin(header, token, host_key, expected)


def batch_stdin(jobs: list[dict[str, Any]], token: str, host_key: bytes, preload: tuple[str, ...]) -> bytes:
    """The runner's stdin for a batch: each job carries its files (the runner writes them)."""
    expected = [job.pop("_expected") for job in jobs]
    header = {"token": token, "wipe_tmp": True, "jobs": jobs, "preload": list(preload)}
    return _stdin(header, token, host_key, expected)


def _stdin(header: dict[str, Any], token: str, host_key: bytes, expected: list[Any]) -> bytes:
    """boot | header | host key | sealed literals: the runner reads the last two after all workers ended."""
    boot = marshal.dumps(compiled_for(runner_source(), "", token))
    header["worker_code"] = compiled_for(runner_source("worker.py"), "worker", token)
    header["checker_code"] = compiled_for(runner_source("checker.py"), "checker", token)
    header["wire_code"] = compiled_for(runner_source("wire.py"), "wire", token)
    header["reset_code"] = compiled_for(RESET_SOURCE, "reset", token)
    tail = host_key.hex().encode() + _frame(marshal.dumps(expected))
    return _frame(boot) + _frame(marshal.dumps(header)) + tail


def parse_report(stdout: str, host_key: bytes) -> dict | None:
    """The signed report, or None when it is missing or its signature is wrong."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(REPORT_PREFIX):
            mac, _, body = line[len(REPORT_PREFIX) :].partition(" ")
            good = hashlib.blake2b(body.encode(), key=host_key, digest_size=32).hexdigest()
            if hmac.compare_digest(mac, good):
                try:
                    report = marshal.loads(bytes.fromhex(body))  # authenticated above: written by the runner
                except (ValueError, EOFError, TypeError):
                    return None
                return report if isinstance(report, dict) else None
            return None
    return None


def override_or(override: T | None, default: T) -> T:
    """A task's override (None: not set) or the run's default."""
    return default if override is None else override
