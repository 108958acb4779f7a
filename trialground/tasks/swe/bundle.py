"""The test runner a SWE workspace carries: pytest and its dependencies, as plain files under `.tg/site/`.

The sandbox shows the host's Python runtime without its site-packages, so pytest travels in the workspace
image: the pure-Python files of the `pytest` installed here (the `swe` extra) and of its dependencies
(pluggy, iniconfig, packaging, and the pygments modules pytest imports). `.tg/pytest.py` starts it the way
the grader does (`python3 -I -S .tg/pytest.py [pytest args]`), for the agent's own runs.

The bundle belongs to the harness: a submission never changes it (`trialground.tasks.swe.paths`); every
grading runs the image's copy.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

from trialground.errors import TaskError

SITE = ".tg/site"
LAUNCHER = ".tg/pytest.py"

_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging")
_MODULES = ("py",)
# Which pygments modules pytest pulls in (it imports pygments at start-up for its terminal writer)
_PROBE = (
    "import sys, pytest, _pytest._io.terminalwriter, _pytest.doctest, _pytest.pytester\n"
    "print(__import__('json').dumps(sorted(m.__file__ for n, m in list(sys.modules.items())\n"
    "    if n.split('.')[0] == 'pygments' and getattr(m, '__file__', None))))\n"
)

LAUNCHER_SOURCE = """\
# Runs the bundled pytest on this repository: python3 -I -S .tg/pytest.py [pytest arguments]
# Node ids named on the command line (PATH::NAME) must each run and pass: a skip, an xfail, a deselected
# or missing id is a failed run (exit status 1), so the exit status alone says whether they all passed.
# The code under test runs in a child process; this process only waits for it and decides the exit
# status. The child sends each named test's outcome here through a pipe the moment pytest reports it:
# a failure, once sent, fails the run whatever the child does afterwards (nothing in the child can take
# it back), and the run passes only when every named test was reported passed, the child reached its
# end and exited 0. In the child, what library code could patch to make tests pass without running them
# (pytest's and pluggy's test-running functions, the report classes, the collected tests' code, the
# import machinery, how the process exits) is compared with what it was before any of that code ran, at
# every test report and at the end; any change fails the run ("harness tampered"). From the start of
# pytest on, an audit hook refuses C calls through ctypes, other threads' frames, and rewriting the code
# of a test's, a conftest's or the harness's function. The child's state lives in function scopes.
import os
import select
import sys


def _named_ids(argv):
    return [a for a in argv if "::" in a and not a.startswith("-")]


def _watch(pid, r, named):
    # The parent: read the child's records until it has exited, then decide. It never imports the code
    # under test, so nothing it decides on can be patched by that code.
    try:
        pidfd, tick = os.pidfd_open(pid), None
    except OSError:
        pidfd, tick = None, 0.05
    data, cap, status = b"", 16 << 20, None
    while len(data) <= cap:
        ready = select.select([r] + ([pidfd] if pidfd is not None else []), [], [], tick)[0]
        if r in ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break  # the child and whatever it forked have closed the pipe
            data += chunk
        if pidfd is None:
            done, got = os.waitpid(pid, os.WNOHANG)
            status = got if done else None
        if pidfd in ready or status is not None:
            os.set_blocking(r, False)  # exited: what it sent is in the pipe
            try:
                data += os.read(r, cap)
            except BlockingIOError:
                pass
            break
    records = {line.decode("utf-8", "replace") for line in data[:cap].split(b"\\n")}
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1] if status is None else status)
    code = code if code >= 0 else 128 - code
    failed = sorted(r[5:] for r in records if r.startswith("fail "))
    passed = {r[5:] for r in records if r.startswith("pass ")}
    if len(data) > cap:
        records.add("tampered")
    why = (f"named test failed: {failed[0]}" if failed else "harness tampered" if "tampered" in records
           else "the test process did not reach its end" if named and "end" not in records
           else f"{len(set(named) - passed)} named test(s) not reported passed" if set(named) - passed
           else "")
    if why and code == 0:
        sys.stderr.write(f"run failed ({why}), although the test process exited 0\\n")
        sys.stderr.flush()
    os._exit(code or (1 if why else 0))


def _fork():
    named = _named_ids(sys.argv[1:])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        return w
    os.close(w)
    _watch(pid, r, named)


def _child(record_fd):
    import builtins

    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(_here, "site"), os.path.dirname(_here)]
    sys.dont_write_bytecode = True
    os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    import pytest
    import pluggy._callers
    import pluggy._hooks
    import pluggy._manager
    import _pytest.main
    import _pytest.nodes
    import _pytest.python
    import _pytest.reports
    import _pytest.runner

    # Namespaces whose every binding must stay the object it was (what runs a test, makes and delivers its
    # report, calls the hooks), and single bindings of those tests may patch for themselves (imports, exits)
    watched = (
        _pytest.runner, _pytest.python, _pytest.reports, _pytest.main, _pytest.nodes, pluggy._callers,
        pluggy._hooks, pluggy._manager, _pytest.runner.CallInfo, _pytest.python.Function, _pytest.nodes.Item,
        _pytest.nodes.Node, _pytest.reports.BaseReport, _pytest.reports.TestReport, _pytest.main.Session,
        pluggy._hooks.HookCaller, pluggy._hooks.HookImpl, pluggy._manager.PluginManager,
    )
    single = ((builtins, "__import__"), (builtins, "SystemExit"), (os, "_exit"))
    refused_events = frozenset({"sys._current_frames", "ctypes.dlopen", "ctypes.dlsym", "ctypes.addressof",
                                "ctypes.cdata", "ctypes.call_function"})
    exit_, write, harness = os._exit, os.write, os.path.join(_here, "")

    def send(record):
        write(record_fd, record.encode("utf-8", "replace") + b"\\n")

    def ours(code):
        # a test's, a conftest's or the harness's own code (the library may rewrite its own functions)
        path = getattr(code, "co_filename", "")
        base = os.path.basename(path)
        return (path.startswith(harness) or base.startswith("test_") or base.endswith("_test.py")
                or base == "conftest.py" or "/tests/" in path or "/test/" in path or "/testing/" in path)

    def audit(event, args):
        rewrites = event == "object.__setattr__" and args[1:2] == ("__code__",)
        if event in refused_events or (rewrites and ours(getattr(args[0], "__code__", None))):
            raise RuntimeError(f"refused in a test run: {event}")

    def bindings():
        return [dict(vars(ns)) for ns in watched] + [{name: vars(ns).get(name)} for ns, name in single]

    def pytests_own(key, value):
        # what pytest and Python set on these themselves: the legacy-path properties (at start-up), a flag
        # of pytest's, the warnings module's registry of a module
        fget = getattr(value, "fget", None)
        legacy = key in ("fspath", "startdir") and getattr(fget, "__module__", "") == "_pytest.legacypath"
        flag = key == "_pytest_diamond_inheritance_warning_shown" and value is True
        return legacy or flag or key == "__warningregistry__"

    def changed(before, after):
        out = set()
        for ns, old, new in zip([*watched, *(ns for ns, _ in single)], before, after):
            name = getattr(ns, "__name__", "?")
            out |= {f"{name}.{k}" for k in old.keys() | new.keys()
                    if old.get(k) is not new.get(k) and not pytests_own(k, new.get(k))}
        return out

    def hooks(config):
        # the objects themselves, held here: a replacement can never reuse a freed one's identity
        return {name: [x for i in caller.get_hookimpls() for x in (i.plugin, i.function)]
                for name, caller in vars(config.pluginmanager.hook).items()
                if hasattr(caller, "get_hookimpls")}

    def same(a, b):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))

    def shadowed(item):
        cls = type(item)
        return [k for k in vars(item)
                if callable(getattr(cls, k, None)) and not isinstance(getattr(cls, k), type)]

    class NamedIdsMustPass:
        def __init__(self, named):
            self.named, self.passed, self.bad, self.tampered = set(named), set(), [], set()
            self.bindings, self.codes, self.meta_path = bindings(), [], None
            self.config, self.hooks = None, {}

        def check(self, meta_path=True):
            found = changed(self.bindings, bindings())
            for item, code in self.codes:
                if getattr(getattr(item, "obj", None), "__code__", None) is not code:
                    found.add(f"code of {item.nodeid}")
                found |= {f"{item.nodeid}.{k}" for k in shadowed(item)}
            if self.config is not None:
                now, was = hooks(self.config), self.hooks
                found |= {f"hook {k}" for k in {*now, *was} if not same(now.get(k, ()), was.get(k, ()))}
            if meta_path and self.meta_path is not None and list(sys.meta_path) != self.meta_path:
                found.add("sys.meta_path")  # compared from collection's end until the session's
            if found:
                send("tampered")
            self.tampered |= found
            return not self.tampered

        def pytest_collection_modifyitems(self, session, config, items):
            self.codes = [(i, getattr(getattr(i, "obj", None), "__code__", None)) for i in items]
            self.meta_path, self.config, self.hooks = list(sys.meta_path), config, hooks(config)

        def pytest_runtest_logreport(self, report):
            if report.nodeid in self.named:  # sent before anything else runs
                if report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
                    send(f"pass {report.nodeid}")
                    self.passed.add(report.nodeid)
                elif report.failed or report.skipped:
                    send(f"fail {report.nodeid}")
                    self.bad.append(report.nodeid)
            if not self.check():
                self.bad.append(report.nodeid)

        def pytest_sessionfinish(self, session, exitstatus):
            failed = self.named and (self.bad or self.passed != self.named)
            if (failed or not self.check()) and session.exitstatus == 0:
                session.exitstatus = 1

        def pytest_terminal_summary(self, terminalreporter):
            missing = sorted(self.named - self.passed - set(self.bad))
            if self.named and (self.bad or missing):
                bad = len(set(self.bad))
                terminalreporter.write_line(
                    f"named tests not passed: {bad} failed or skipped, {len(missing)} did not run")
            if not self.check():
                terminalreporter.write_line(f"harness tampered: {', '.join(sorted(self.tampered)[:8])}")

    sys.addaudithook(audit)
    plugin = NamedIdsMustPass(_named_ids(sys.argv[1:]))
    code = pytest.main(["-p", "no:cacheprovider", "-o", "addopts=", "--color=no", *sys.argv[1:]],
                       plugins=[plugin])
    ok = plugin.check(meta_path=False)  # pytest has taken its own import hook away by now
    sys.stdout.flush()
    sys.stderr.flush()
    send("end")
    exit_(int(code) if ok else int(code) or 1)  # os._exit as it was before pytest started


_child(_fork())
"""


@functools.cache
def bundle_files() -> dict[str, str]:
    """{workspace path: text} of the bundled runner (cached for the process)."""
    try:
        import pytest  # noqa: F401
    except ImportError as e:
        raise TaskError(
            "swe tasks need pytest on the host to bundle into the workspace: pip install 'trialground[swe]'",
            kind="missing_dependency",
        ) from e
    out: dict[str, str] = {}
    for name in _PACKAGES:
        pkg = importlib.import_module(name)
        root = Path(pkg.__file__ or "").parent
        for path in sorted(root.rglob("*")):
            if path.is_file() and (path.suffix == ".py" or path.name == "py.typed"):
                out[f"{SITE}/{name}/{path.relative_to(root).as_posix()}"] = path.read_text("utf-8")
    for name in _MODULES:
        mod = importlib.import_module(name)
        if mod.__file__:
            out[f"{SITE}/{name}.py"] = Path(mod.__file__).read_text("utf-8")
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        raise TaskError(
            f"swe: could not list pytest's pygments modules: {probe.stderr[-300:]}", kind="bundle"
        )
    import pygments

    root = Path(pygments.__file__ or "").parent
    for file in json.loads(probe.stdout):
        rel = Path(file).relative_to(root).as_posix()
        out[f"{SITE}/pygments/{rel}"] = Path(file).read_text("utf-8")
    out[LAUNCHER] = LAUNCHER_SOURCE
    return out


@functools.cache
def bundle_digest() -> str:
    """A hash of the bundled packages (part of a task set's cache key: another pytest, another set). The
    launcher and the harness plugin are not part of it: they do not change which tests pass."""
    h = hashlib.sha256()
    for path, text in sorted(bundle_files().items()):
        if not path.startswith(SITE + "/"):
            continue
        h.update(path.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16]
