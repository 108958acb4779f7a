"""The pytest launcher a repository workspace carries as `.tg/pytest.py` (shipped as text, never imported by
the host): python3 -I -S .tg/pytest.py [pytest arguments]

Node ids named on the command line (PATH::NAME) must each run and pass: a skip, an xfail, a deselected
or missing id is a failed run (exit status 1), so the exit status alone says whether they all passed.
The code under test runs in a child process; this process only waits for it and decides the exit
status. The child sends each named test's outcome here through a pipe the moment pytest reports it:
a failure, once sent, fails the run whatever the child does afterwards (nothing in the child can take
it back), and the run passes only when every named test was reported passed, the child reached its
end and exited 0. In the child, what library code could patch to make tests pass without running them
(pytest's and pluggy's test-running functions, the report classes, the collected tests' code, the
import machinery, how the process exits) is compared with what it was before any of that code ran, at
every test report and at the end; any change fails the run ("harness tampered"). From the start of
pytest on, an audit hook refuses C calls through ctypes, other threads' frames, and rewriting the code
of a test's, a conftest's or the harness's function. The child's state lives in function scopes.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
from typing import Any, NoReturn


def _named_ids(argv: list[str]) -> list[str]:
    return [a for a in argv if "::" in a and not a.startswith("-")]


def _watch(pid: int, r: int, named: list[str]) -> NoReturn:
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
            with contextlib.suppress(BlockingIOError):
                data += os.read(r, cap)
            break
    records = {line.decode("utf-8", "replace") for line in data[:cap].split(b"\n")}
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1] if status is None else status)
    code = code if code >= 0 else 128 - code
    failed = sorted(r[5:] for r in records if r.startswith("fail "))
    passed = {r[5:] for r in records if r.startswith("pass ")}
    if len(data) > cap:
        records.add("tampered")
    why = (
        f"named test failed: {failed[0]}"
        if failed
        else "harness tampered"
        if "tampered" in records
        else "the test process did not reach its end"
        if named and "end" not in records
        else f"{len(set(named) - passed)} named test(s) not reported passed"
        if set(named) - passed
        else ""
    )
    if why and code == 0:
        sys.stderr.write(f"run failed ({why}), although the test process exited 0\n")
        sys.stderr.flush()
    os._exit(code or (1 if why else 0))


def _fork() -> int:
    named = _named_ids(sys.argv[1:])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        return w
    os.close(w)
    _watch(pid, r, named)


def _child(record_fd: int) -> None:
    import builtins

    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(_here, "site"), os.path.dirname(_here)]
    sys.dont_write_bytecode = True
    os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    import _pytest.main
    import _pytest.nodes
    import _pytest.python
    import _pytest.reports
    import _pytest.runner
    import pluggy._callers
    import pluggy._hooks
    import pluggy._manager
    import pytest

    # Namespaces whose every binding must stay the object it was (what runs a test, makes and delivers its
    # report, calls the hooks), and single bindings of those tests may patch for themselves (imports, exits)
    watched = (
        _pytest.runner,
        _pytest.python,
        _pytest.reports,
        _pytest.main,
        _pytest.nodes,
        pluggy._callers,
        pluggy._hooks,
        pluggy._manager,
        _pytest.runner.CallInfo,
        _pytest.python.Function,
        _pytest.nodes.Item,
        _pytest.nodes.Node,
        _pytest.reports.BaseReport,
        _pytest.reports.TestReport,
        _pytest.main.Session,
        pluggy._hooks.HookCaller,
        pluggy._hooks.HookImpl,
        pluggy._manager.PluginManager,
    )
    single = ((builtins, "__import__"), (builtins, "SystemExit"), (os, "_exit"))
    refused_events = frozenset(
        {
            "sys._current_frames",
            "ctypes.dlopen",
            "ctypes.dlsym",
            "ctypes.addressof",
            "ctypes.cdata",
            "ctypes.call_function",
        }
    )
    exit_, write, harness = os._exit, os.write, os.path.join(_here, "")

    def send(record: str) -> None:
        write(record_fd, record.encode("utf-8", "replace") + b"\n")

    def ours(code: Any) -> bool:
        # a test's, a conftest's or the harness's own code (the library may rewrite its own functions)
        path = getattr(code, "co_filename", "")
        base = os.path.basename(path)
        return (
            path.startswith(harness)
            or base.startswith("test_")
            or base.endswith("_test.py")
            or base == "conftest.py"
            or "/tests/" in path
            or "/test/" in path
            or "/testing/" in path
        )

    def audit(event: str, args: tuple[Any, ...]) -> None:
        rewrites = event == "object.__setattr__" and args[1:2] == ("__code__",)
        if event in refused_events or (rewrites and ours(getattr(args[0], "__code__", None))):
            raise RuntimeError(f"refused in a test run: {event}")

    def bindings() -> list[dict[str, Any]]:
        return [dict(vars(ns)) for ns in watched] + [{name: vars(ns).get(name)} for ns, name in single]

    def pytests_own(key: str, value: Any) -> bool:
        # what pytest and Python set on these themselves: the legacy-path properties (at start-up), a flag
        # of pytest's, the warnings module's registry of a module
        fget = getattr(value, "fget", None)
        legacy = key in ("fspath", "startdir") and getattr(fget, "__module__", "") == "_pytest.legacypath"
        flag = key == "_pytest_diamond_inheritance_warning_shown" and value is True
        return legacy or flag or key == "__warningregistry__"

    def changed(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> set[str]:
        out: set[str] = set()
        for ns, old, new in zip([*watched, *(ns for ns, _ in single)], before, after, strict=True):
            name = getattr(ns, "__name__", "?")
            out |= {
                f"{name}.{k}"
                for k in old.keys() | new.keys()
                if old.get(k) is not new.get(k) and not pytests_own(k, new.get(k))
            }
        return out

    def hooks(config: Any) -> dict[str, list[Any]]:
        # the objects themselves, held here: a replacement can never reuse a freed one's identity
        return {
            name: [x for i in caller.get_hookimpls() for x in (i.plugin, i.function)]
            for name, caller in vars(config.pluginmanager.hook).items()
            if hasattr(caller, "get_hookimpls")
        }

    def same(a: Any, b: Any) -> bool:
        return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))

    def shadowed(item: Any) -> list[str]:
        cls = type(item)
        return [
            k for k in vars(item) if callable(getattr(cls, k, None)) and not isinstance(getattr(cls, k), type)
        ]

    class NamedIdsMustPass:
        def __init__(self, named: list[str]) -> None:
            self.named, self.passed, self.bad = set(named), set[str](), list[str]()
            self.tampered: set[str] = set()
            self.bindings, self.codes = bindings(), list[tuple[Any, Any]]()
            self.meta_path: list[Any] | None = None
            self.config: Any = None
            self.hooks: dict[str, list[Any]] = {}

        def check(self, meta_path: bool = True) -> bool:
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

        def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
            self.codes = [(i, getattr(getattr(i, "obj", None), "__code__", None)) for i in items]
            self.meta_path, self.config, self.hooks = list(sys.meta_path), config, hooks(config)

        def pytest_runtest_logreport(self, report: Any) -> None:
            if report.nodeid in self.named:  # sent before anything else runs
                if report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
                    send(f"pass {report.nodeid}")
                    self.passed.add(report.nodeid)
                elif report.failed or report.skipped:
                    send(f"fail {report.nodeid}")
                    self.bad.append(report.nodeid)
            if not self.check():
                self.bad.append(report.nodeid)

        def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
            failed = self.named and (self.bad or self.passed != self.named)
            if (failed or not self.check()) and session.exitstatus == 0:
                session.exitstatus = 1

        def pytest_terminal_summary(self, terminalreporter: Any) -> None:
            missing = sorted(self.named - self.passed - set(self.bad))
            if self.named and (self.bad or missing):
                bad = len(set(self.bad))
                terminalreporter.write_line(
                    f"named tests not passed: {bad} failed or skipped, {len(missing)} did not run"
                )
            if not self.check():
                terminalreporter.write_line(f"harness tampered: {', '.join(sorted(self.tampered)[:8])}")

    sys.addaudithook(audit)
    plugin = NamedIdsMustPass(_named_ids(sys.argv[1:]))
    code = pytest.main(
        ["-p", "no:cacheprovider", "-o", "addopts=", "--color=no", *sys.argv[1:]], plugins=[plugin]
    )
    ok = plugin.check(meta_path=False)  # pytest has taken its own import hook away by now
    sys.stdout.flush()
    sys.stderr.flush()
    send("end")
    exit_(int(code) if ok else int(code) or 1)  # os._exit as it was before pytest started


if __name__ == "__main__":
    _child(_fork())
