"""Running a repository's whole pytest suite in a sandbox for task building, with per-test outcomes.

Task building (`build.py`) runs only trusted code here: the pristine repository and the bugs it injects
itself. Grading never uses this runner: a submission's verdict comes from the exit statuses of isolated
runs (`trialground.verify.kinds.swe_tests`, `harness.py`).

`run_pytest(sandbox, paths=..., tests=...)` starts `python3 -I -S -c BOOT` in the sandbox's /workspace
(isolated mode: no PYTHON* variables, no user site, no site-packages; `-S`: no `.pth` processing) and
writes the runner (`RUNNER`, below) to its stdin, then a header (which node ids to run, which paths to
collect) and a per-run key. The runner never exists on the sandbox's disk. It puts the bundled pytest
(`.tg/site`) and the workspace on `sys.path`, runs `pytest.main` with plugin autoloading off, the cache off
and the repository's `addopts` cleared, and with a plugin of its own that

- keeps only the listed node ids (when a list is given): nothing else runs;
- records each test's outcome (`passed`, `failed`, `error` for a failing setup/teardown, `skipped` for
  skips and xfails) and the failure text (of the first 20 failures);
- checks at the end that pytest's and pluggy's test-running functions, `sys.meta_path`,
  `builtins.__import__` and every collected test's code object are the ones it saw before any test ran
  (code under test that patches them is reported as `tampered`);

and writes one report line, MAC'd with the key, on a copy of stdout made before pytest started (output
capture never sees it). The host accepts only a correctly MAC'd line; a missing line (the process died or
exited early), a bad MAC or a timeout is a run without results.

Residual risk, stated plainly: the code under test runs in the runner's process, so code that goes looking
for the key in memory could still forge a report. The grader makes that unattractive by construction
elsewhere (only library files of a submission are applied, tests and harness come from the image) and
flags submissions whose code reaches into the test machinery (`trialground.verify.kinds.swe_tests`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from trialground.errors import SandboxError
from trialground.sandbox.base import WORKSPACE, ExecStatus, Limits, Sandbox

REPORT_PREFIX = "TGSWE "

BOOT = (
    "import sys\n"
    "_n = int(sys.stdin.buffer.read(10))\n"
    "_src = sys.stdin.buffer.read(_n)\n"
    "exec(compile(_src, '<tg-swe-runner>', 'exec'), {'__name__': 'tg_swe_runner'})\n"
)

RUNNER = r"""
import builtins, hashlib, hmac, json, os, sys

_data = sys.stdin.buffer.read()
os.close(0)
_head, _key = _data.split(b"\n")[:2]
del _data
_header = json.loads(_head)
_out = os.dup(1)
_null = os.open(os.devnull, os.O_WRONLY)
os.dup2(_null, 1)  # pytest's own output: only the report line reaches stdout
sys.path[:0] = [_header["site"], _header["root"]]
sys.dont_write_bytecode = True
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
import pytest, pluggy._callers, _pytest.python, _pytest.reports, _pytest.runner

_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_WATCHED = [
    (_pytest.runner, "call_and_report"), (_pytest.runner, "runtestprotocol"),
    (_pytest.runner, "call_runtest_hook"), (_pytest.runner, "pytest_runtest_makereport"),
    (_pytest.runner, "check_interactive_exception"), (_pytest.runner.CallInfo, "from_call"),
    (_pytest.python.Function, "runtest"), (_pytest.python, "pytest_pyfunc_call"),
    (_pytest.reports.TestReport, "from_item_and_call"), (_pytest.reports.BaseReport, "passed"),
    (_pytest.reports.BaseReport, "failed"), (pluggy._callers, "_multicall"), (builtins, "__import__"),
    (os, "_exit"),
]


def _snapshot():
    return [vars(obj).get(name) for obj, name in _WATCHED]


class _Plugin:
    def __init__(self, wanted):
        self.wanted = None if wanted is None else set(wanted)
        self.outcomes, self.details, self.collected, self.codes = {}, {}, [], []
        self.meta_path, self.at_finish = None, None
        self.watched = _snapshot()
        self.hooks = (type(self).pytest_runtest_logreport, type(self).pytest_collection_modifyitems)

    def pytest_collection_modifyitems(self, session, config, items):
        if self.wanted is not None:
            dropped = [i for i in items if i.nodeid not in self.wanted]
            items[:] = [i for i in items if i.nodeid in self.wanted]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
        self.collected = [i.nodeid for i in items]
        self.codes = [(i, getattr(getattr(i, "obj", None), "__code__", None)) for i in items]
        self.meta_path = list(sys.meta_path)

    def pytest_sessionfinish(self, session):
        self.at_finish = self.tampered()  # before unconfigure takes pytest's own import hook away

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            outcome = "passed" if report.passed else "skipped" if report.skipped else "failed"
        elif report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "skipped"
        else:
            return
        nid = report.nodeid
        if nid not in self.outcomes or _RANK[outcome] > _RANK[self.outcomes[nid]]:
            self.outcomes[nid] = outcome
        if outcome in ("failed", "error") and nid not in self.details and len(self.details) < 20:
            self.details[nid] = report.longreprtext[-3000:]

    def tampered(self, meta_path=True):
        found = [f"{getattr(o, '__name__', o)}.{n}" for (o, n), a, b in zip(_WATCHED, self.watched,
                 _snapshot()) if a is not b]
        if (type(self).pytest_runtest_logreport, type(self).pytest_collection_modifyitems) != self.hooks:
            found.append("runner plugin")
        if meta_path and self.meta_path is not None and list(sys.meta_path) != self.meta_path:
            found.append("sys.meta_path")
        for item, code in self.codes:
            if code is not None and getattr(getattr(item, "obj", None), "__code__", None) is not code:
                found.append(f"code of {item.nodeid}")
        return found


_plugin = _Plugin(_header["tests"])
_args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--color=no", "--tb=short", "-rN",
         "--rootdir", _header["root"], *_header.get("args", []), *_header["paths"]]
try:
    _code = int(pytest.main(_args, plugins=[_plugin]))
except BaseException as _e:
    _code = -1
_body = json.dumps({"exit": _code, "outcomes": _plugin.outcomes, "collected": _plugin.collected,
                    "details": _plugin.details,
                    "finished": _plugin.at_finish is not None,
                    "tampered": sorted(set(_plugin.at_finish or []) | set(_plugin.tampered(False)))}).encode()
_mac = hmac.new(_key, _body, hashlib.sha256).hexdigest().encode()
_line = b"TGSWE " + _body + b" " + _mac + b"\n"
while _line:
    _line = _line[os.write(_out, _line):]
"""


@dataclass(frozen=True)
class PytestRun:
    """One suite run's results. `error` is set when no trustworthy report came back (then `outcomes` is
    empty); `forged` when a report line with a bad MAC was seen."""

    outcomes: dict[str, str] = field(default_factory=dict)
    collected: tuple[str, ...] = ()
    details: dict[str, str] = field(default_factory=dict)
    tampered: tuple[str, ...] = ()
    error: str | None = None
    forged: bool = False
    status: str = ""
    wall_s: float = 0.0

    def passed(self, test: str) -> bool:
        return self.outcomes.get(test) == "passed"


async def run_pytest(
    sandbox: Sandbox,
    *,
    paths: Sequence[str],
    tests: Sequence[str] | None,
    limits: Limits,
    args: Sequence[str] = (),
) -> PytestRun:
    """Run the suite at `paths` (only the node ids `tests`, when given; `args` before the paths) in
    `sandbox` (see the module docstring). Raises SandboxError only when the sandbox itself failed."""
    key = secrets.token_hex(32).encode()
    header = {
        "tests": None if tests is None else list(tests),
        "paths": list(paths),
        "args": list(args),
        "root": WORKSPACE,
        "site": f"{WORKSPACE}/.tg/site",
    }
    src = RUNNER.encode()
    stdin = f"{len(src):010d}".encode() + src + json.dumps(header).encode() + b"\n" + key + b"\n"
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "HOME": "/tmp", "PYTHONHASHSEED": "0"}
    res = await sandbox.exec(["python3", "-I", "-S", "-c", BOOT], stdin=stdin, env=env, cwd=WORKSPACE,
                             limits=limits)  # fmt: skip
    if res.status is ExecStatus.SANDBOX_ERROR:
        raise SandboxError(f"swe test run: sandbox failed: {res.stderr[-300:]}", kind="sandbox")
    found: dict | None = None
    forged = False
    for line in res.stdout.splitlines():
        if not line.startswith(REPORT_PREFIX):
            continue
        body, _, mac = line[len(REPORT_PREFIX) :].rpartition(" ")
        good = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(good, mac) and found is None:
            try:
                found = json.loads(body)
            except ValueError:
                forged = True
        else:
            forged = True
    if found is not None and not found.get("finished"):
        found, forged = None, forged
    if found is None:
        tail = (res.stdout[-400:] + res.stderr[-600:]).strip()
        return PytestRun(error=f"no test report ({res.status.value}): {tail}"[:1200], forged=forged,
                         status=res.status.value, wall_s=res.wall_s)  # fmt: skip
    return PytestRun(
        outcomes={str(k): str(v) for k, v in dict(found.get("outcomes", {})).items()},
        collected=tuple(str(x) for x in found.get("collected", [])),
        details={str(k): str(v) for k, v in dict(found.get("details", {})).items()},
        tampered=tuple(str(x) for x in found.get("tampered", [])),
        forged=forged,
        status=res.status.value,
        wall_s=res.wall_s,
    )
