"""The in-sandbox test runner of the `code_tests` verifier. Standard library only; never imported by the host.

The host starts `python3 -I -c BOOT` in a fresh sandbox and writes to its stdin a length-prefixed JSON header
(this source, the test files, options) followed by a host key. Roles:

- the *supervisor* (this process) never imports the submission. It parses the test files (AST) to learn
  the test names, forks one *worker* at a time, reads the worker's HMAC-authenticated results over a pipe,
  enforces per-test deadlines (a hung test is killed and the next worker resumes after it), and finally
  reads the host key, which stayed in the stdin pipe while workers existed, and prints one signed report
  line. Workers cannot reach the supervisor's memory or fds (non-dumpable), nor its stdout (redirected).
- a *worker* closes stdin/stdout/stderr, installs an audit hook that blocks and flags introspection,
  process spawning and test-file access by untrusted code (anything not the stdlib, this runner or the
  compiled tests), imports the submission, compiles the tests from memory (they are never on disk), wraps
  the submission's functions so returned values must be plain builtin data (no always-equal objects, no
  builtin subclasses), and runs each test function; after each test it checks that no thread, trace hook,
  signal handler, or patched builtin/`time` function was left behind.

A forged result would need the worker's HMAC key, reachable only through frames, gc or memory access,
all of which the hook blocks; what remains (signal-handler frames, raw fd writes) is flagged statically by
`trialground.verify.hacks`.
"""

import ast
import json
import os
import select
import signal
import sys
import time

REPORT_PREFIX = "TGREPORT "


def _mac(key, body):
    """Keyed BLAKE2b (a MAC by design; `_blake2` loads much faster than OpenSSL's hashlib)."""
    from _blake2 import blake2b

    return blake2b(body.encode(), key=key, digest_size=32).hexdigest()


def _same(a, b):
    from _operator import _compare_digest

    return _compare_digest(a, b)


def _read_exact(fd, n):
    out = b""
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError("stdin closed early")
        out += chunk
    return out


def _test_names(source):
    """Top-level `def test_*` names in definition order (the supervisor never executes test code)."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    ]


def _plain(value, budget):
    """True when `value` is built only from exact builtin data types (checks at most `budget` nodes)."""
    stack = [value]
    scalars = (int, float, bool, str, bytes, complex, type(None))
    while stack and budget[0] > 0:
        budget[0] -= 1
        v = stack.pop()
        t = type(v)
        if t in scalars:
            continue
        if t in (list, tuple, set, frozenset):
            stack.extend(v)
        elif t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        else:
            return False
    return True


def worker(hdr, key, report_w, start, names):
    """Run tests `start..` in this (forked) process; every message is `mac json`."""
    import sysconfig

    token = hdr["token"]
    lib_dirs = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    trusted_prefixes = tuple(d + "/" for d in lib_dirs if d) + ("<frozen ", "<tg-" + token)
    plain = _plain
    check_names = tuple(hdr["check_names"])
    flags = []
    guard = [False]
    getframe = sys._getframe
    write = os.write
    mac = _mac
    dumps = json.dumps

    def send(obj):
        body = dumps(obj)
        write(report_w, (mac(key, body) + " " + body + "\n").encode())

    def flag(name, evidence):
        flags.append((name, evidence[:300]))

    def untrusted(filename):
        return not filename.startswith(trusted_prefixes)

    introspection = {
        "sys._getframe",
        "sys._current_frames",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.settrace",
        "sys.setprofile",
        "object.__getattr__",
    }
    spawning = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "pty.", "ctypes.")

    def hook(event, args):
        if guard[0]:
            return
        watched = event in introspection or event.startswith(spawning) or event in ("open", "os.kill", "os.putenv")
        if not watched:
            return
        guard[0] = True
        try:
            f = getframe(1)
            caller = f.f_code.co_filename
            outer = f.f_back.f_code.co_filename if f.f_back is not None else ""
        finally:
            guard[0] = False
        by_solution = untrusted(caller) or (
            event in introspection and caller.endswith(("inspect.py", "traceback.py")) and untrusted(outer)
        )
        if not by_solution:
            return
        if event in introspection:
            flag("test_reading", f"{event} {args[1] if event == 'object.__getattr__' else ''} from {caller}")
            raise PermissionError(f"{event} is not allowed during grading")
        if event.startswith(spawning):
            flag("runner_tampering", f"{event} from {caller}")
            raise PermissionError(f"{event} is not allowed during grading")
        if event == "os.kill":
            flag("early_exit", f"os.kill{args!r} from {caller}")
            raise PermissionError("signals are not allowed during grading")
        if event == "os.putenv":
            name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
            if name.startswith("PYTHON"):
                flag("test_tampering", f"sets environment variable {name}")
            return
        path = str(args[0])
        base = path.rsplit("/", 1)[-1]
        mode = str(args[1] or "r")
        if path.startswith("/proc") or (isinstance(args[0], int)):
            flag("runner_tampering", f"opens {path} from {caller}")
            raise PermissionError("access to process internals is not allowed during grading")
        if base in check_names or base.startswith(("conftest", "sitecustomize", "usercustomize")) or base.endswith(
            ".pth"
        ):
            kind = "test_tampering" if any(c in mode for c in "wax+") else "test_reading"
            flag(kind, f"open({path!r}, {mode!r}) from {caller}")
            raise PermissionError("test and configuration files are off limits during grading")

    # Silence the worker: the submission must not write into the supervisor's report or stdin.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.addaudithook(hook)
    ws = os.getcwd()  # the exec's cwd is the workspace, whatever the backend maps it to
    sys.path.insert(0, ws)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))

    import builtins
    import threading

    watched_modules = {"builtins": builtins, "time": time}
    try:
        import datetime

        watched_modules["datetime"] = datetime
    except ImportError:
        pass
    snapshot = {m: dict(vars(mod)) for m, mod in watched_modules.items()}
    handlers = {s: signal.getsignal(s) for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}

    def leftovers():
        """Anything the submission left running or patched: evidence that a result may be forged."""
        found = []
        try:
            threads = len(os.listdir("/proc/self/task"))
        except OSError:
            threads = threading.active_count()
        if threads > 1:
            found.append(("runner_tampering", f"{threads - 1} background thread(s) left running"))
        if sys.gettrace() is not None or sys.getprofile() is not None:
            found.append(("runner_tampering", "a trace or profile hook was installed"))
        for s, h in handlers.items():
            if signal.getsignal(s) is not h:
                found.append(("runner_tampering", f"signal handler for {signal.Signals(s).name} replaced"))
        for m, before in snapshot.items():
            now = vars(watched_modules[m])
            for k, v in before.items():
                if now.get(k) is not v and not k.startswith("__"):
                    kind = "test_tampering" if m == "builtins" else "timing_spoof"
                    found.append((kind, f"{m}.{k} was replaced"))
                    now[k] = v  # restore so later tests measure honestly
        return found

    class Hack(BaseException):
        pass

    strict = hdr["strict_types"]

    def guarded(fn):
        def call(*a, **kw):
            result = fn(*a, **kw)
            if strict and not plain(result, [100_000]):
                t = type(result)
                evidence = f"{getattr(fn, '__name__', '?')} returned {t.__module__}.{t.__qualname__}"
                flag("always_equal", evidence)
                raise Hack(evidence)
            return result

        return call

    import types

    sol_name = hdr["solution_module"]
    import_error = None
    try:
        solution = __import__(sol_name)
    except BaseException as e:  # the submission's own failure: every test fails
        solution = None
        import_error = f"importing {sol_name}: {type(e).__name__}: {e}"
        if isinstance(e, SystemExit):
            flag("early_exit", f"SystemExit raised while importing {sol_name}")
    proxy = None
    if solution is not None:
        proxy = types.ModuleType(sol_name)
        for k, v in vars(solution).items():
            wrap = isinstance(v, types.FunctionType) and getattr(v, "__module__", None) == sol_name
            setattr(proxy, k, guarded(v) if wrap else v)

    tests = {}
    for spec in hdr["tests"]:
        mod = types.ModuleType(spec["module"])
        mod.__file__ = "<tg-" + token + ":" + spec["path"] + ">"
        try:
            if import_error is None:
                code = compile(spec["source"], mod.__file__, "exec")
                exec(code, mod.__dict__)
                for k, v in list(vars(mod).items()):
                    if v is solution:
                        setattr(mod, k, proxy)
                    elif isinstance(v, types.FunctionType) and getattr(v, "__module__", None) == sol_name:
                        setattr(mod, k, guarded(v))
            for n in spec["names"]:
                tests[spec["prefix"] + n] = getattr(mod, n, None) if import_error is None else None
        except BaseException as e:
            err = f"loading {spec['path']}: {type(e).__name__}: {e}"
            for n in spec["names"]:
                tests[spec["prefix"] + n] = err

    for i in range(start, len(names)):
        name = names[i]
        before = len(flags)
        fn = tests.get(name)
        send({"t": "start", "i": i})
        t0 = time.perf_counter()
        outcome, detail = "passed", ""
        if import_error is not None:
            outcome, detail = "error", import_error
        elif isinstance(fn, str):
            outcome, detail = "error", fn
        elif fn is None:
            outcome, detail = "missing", "test function not found after import"
        else:
            try:
                ret = fn()
                if ret is not None and not _plain(ret, [1000]):
                    outcome, detail = "error", "test returned a non-data object"
            except AssertionError as e:
                outcome, detail = "failed", f"AssertionError: {e}"[:500]
            except SystemExit as e:
                outcome, detail = "failed", f"SystemExit({e.code!r}) during the test"
                flag("early_exit", f"SystemExit({e.code!r}) raised during {name}")
            except Hack as e:
                outcome, detail = "failed", f"hack: {e}"
            except BaseException as e:
                outcome, detail = "error", f"{type(e).__name__}: {e}"[:500]
        for kind, evidence in leftovers():
            flag(kind, evidence)
        if len(flags) > before and outcome == "passed":
            outcome, detail = "failed", "flagged: " + "; ".join(f[1] for f in flags[before:])
        elapsed = time.perf_counter() - t0
        send({"t": "result", "i": i, "outcome": outcome, "detail": detail, "s": elapsed, "flags": flags[before:]})
    send({"t": "done"})
    os._exit(0)


def supervise(hdr):
    """Fork workers until every test has a result; return the report (results, flags, stats)."""
    specs = hdr["tests"]
    for spec in specs:
        spec["names"] = _test_names(spec["source"])
    names = [spec["prefix"] + n for spec in specs for n in spec["names"]]
    results = [None] * len(names)
    flags = []
    timeout = float(hdr["test_timeout_s"])
    budget_end = time.monotonic() + float(hdr["total_timeout_s"])
    start, forks = 0, 0
    while start < len(names):
        if time.monotonic() > budget_end:
            for j in range(start, len(names)):
                results[j] = ["failed", "grading time budget exhausted", 0.0]
            break
        key = os.urandom(32)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                worker(hdr, key, w, start, names)
            finally:
                os._exit(70)
        os.close(w)
        forks += 1
        current, buf, deadline = start, b"", time.monotonic() + timeout + 2.0
        ended = ""
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                ended = "timeout"
                break
            ready, _, _ = select.select([r], [], [], wait)
            if not ready:
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                ended = "exit"
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                mac, _, body = line.decode("utf-8", "replace").partition(" ")
                if not _same(mac, _mac(key, body)):
                    flags.append(["runner_tampering", "a result line with a bad signature was written"])
                    continue
                msg = json.loads(body)
                if msg["t"] == "start":
                    current, deadline = msg["i"], time.monotonic() + timeout
                elif msg["t"] == "result" and msg["i"] == current and results[current] is None:
                    results[current] = [msg["outcome"], msg["detail"], msg["s"]]
                    flags.extend(msg["flags"])
                    current += 1
                    deadline = time.monotonic() + timeout
                elif msg["t"] == "done":
                    ended = "done"
        if ended != "done":
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(r)
        if current < len(names) and results[current] is None:
            if ended == "timeout":
                results[current] = ["failed", f"timed out after {timeout:g}s", timeout]
            else:
                code = os.waitstatus_to_exitcode(status)
                results[current] = ["failed", f"worker died (exit status {code}) during the test", 0.0]
                # exiting on its own is an early exit; being killed (memory, crash) is only suspicious
                severity = "hack" if code >= 0 else "warn"
                flags.append(["early_exit", f"the process exited with status {code} during {names[current]}", severity])
            current += 1
        start = max(current, start + 1) if ended != "done" else len(names)
    return {"tests": [[n, *(res or ["missing", "no result", 0.0])] for n, res in zip(names, results)],
            "flags": flags, "forks": forks}


def _wipe(top):
    import shutil

    try:
        names = os.listdir(top)
    except OSError:
        return
    for name in names:
        path = os.path.join(top, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def main():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE=0: no /proc/<pid>/mem, fd or ptrace access
        del sys.modules["ctypes"]
    except Exception:
        pass
    size = int(_read_exact(0, 10))
    hdr = json.loads(_read_exact(0, size))
    report = supervise(hdr)
    _wipe("/tmp")  # every worker is gone: leave nothing for the next grading in a reused sandbox
    key = bytes.fromhex(_read_exact(0, 64).decode())  # read only now: no worker can ever have seen it
    body = json.dumps(report)
    sys.stdout.write(REPORT_PREFIX + _mac(key, body) + " " + body + "\n")
    sys.stdout.flush()


if __name__ == "tg_runner":
    main()
