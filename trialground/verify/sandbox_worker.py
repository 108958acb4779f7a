"""The worker half of the `code_tests` runner (see `runner.py`): runs in a process forked from the runner's
supervisor, imports the submission and runs the tests. Standard library only; never imported by the host,
which compiles it under the grading's secret `<tg-TOKEN:...>` filename and ships it in the runner's header.
"""

import marshal
import os
import signal
import sys
import time


def _mac(key, body):
    """Keyed BLAKE2b, as in `runner.py` (this file is a separate code object inside the sandbox)."""
    from _blake2 import blake2b

    return blake2b(body.encode(), key=key, digest_size=32).hexdigest()


def _dumps(obj):
    return marshal.dumps(obj).hex()


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


def worker(hdr, key, report_w, start, names, hidden_failed):
    """Run tests `start..` in this (forked) process. Every message is `mac hex(marshal(obj))`: json would
    cost an import of `re` in every grading."""
    token = hdr["token"]
    stdlib = os.path.dirname(os.__file__) + "/"  # site-packages of this runtime live below it too
    trusted_prefixes = (stdlib, "/usr/lib/python3/", "/usr/local/lib/python3", "<frozen ", "<tg-" + token)
    plain = _plain
    check_names = tuple(hdr["check_names"])
    flags = []
    guard = [False]
    getframe = sys._getframe
    write = os.write
    mac = _mac
    dumps = _dumps

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
    spawning = (
        "subprocess.",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "pty.",
        "ctypes.",
    )

    def caller_files():
        guard[0] = True
        try:
            f = getframe(2)
            return f.f_code.co_filename, (f.f_back.f_code.co_filename if f.f_back is not None else "")
        finally:
            guard[0] = False

    def hook(event, args):
        """Introspection is blocked when the submission asks for it (the stdlib uses it legitimately);
        spawning, signals, PYTHON* variables and check/config/proc files are off limits to everyone, as
        the worker's own code never needs them once the hook is installed."""
        if guard[0]:
            return
        if event in introspection:
            caller, outer = caller_files()
            if untrusted(caller) or (caller.endswith(("inspect.py", "traceback.py")) and untrusted(outer)):
                detail = args[1] if event == "object.__getattr__" else ""
                flag("test_reading", f"{event} {detail} from {caller}")
                raise PermissionError(f"{event} is not allowed during grading")
        elif event.startswith(spawning):
            flag("runner_tampering", f"{event} from {caller_files()[0]}")
            raise PermissionError(f"{event} is not allowed during grading")
        elif event == "os.kill" or event == "signal.pthread_kill":
            flag("early_exit", f"{event}{args!r} from {caller_files()[0]}")
            raise PermissionError("signals are not allowed during grading")
        elif event == "os.putenv":
            name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
            if name.startswith("PYTHON"):
                flag("test_tampering", f"sets environment variable {name}")
        elif event == "open":
            path = args[0]
            if isinstance(path, int):
                caller, outer = caller_files()  # the import system wraps fds it opened itself
                if untrusted(caller) or (
                    caller.endswith(("os.py", "io.py", "socket.py")) and untrusted(outer)
                ):
                    flag("runner_tampering", f"opens file descriptor {path} from {caller}")
                    raise PermissionError("re-opening file descriptors is not allowed during grading")
                return
            path = os.fsdecode(path) if isinstance(path, bytes) else str(path)
            base = path.rsplit("/", 1)[-1]
            mode = str(args[1] or "r")
            if path.startswith("/proc"):
                flag("runner_tampering", f"opens {path} from {caller_files()[0]}")
                raise PermissionError("access to process internals is not allowed during grading")
            writing = any(c in mode for c in "wax+")
            if (
                base in check_names
                or base.startswith(("conftest", "sitecustomize", "usercustomize"))
                or (writing and base.endswith(".pth"))
            ):
                kind = "test_tampering" if writing else "test_reading"
                flag(kind, f"open({path!r}, {mode!r}) from {caller_files()[0]}")
                raise PermissionError("test and configuration files are off limits during grading")

    # Silence the worker: the submission must not write into the supervisor's report or stdin.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.dont_write_bytecode = True
    sys.addaudithook(hook)
    ws = os.getcwd()  # the exec's cwd is the workspace, whatever the backend maps it to
    sys.path.insert(0, ws)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))

    import atexit
    import builtins

    watched_modules = {"builtins": builtins, "time": time}
    snapshot = {m: dict(vars(mod)) for m, mod in watched_modules.items()}
    handlers = {
        s: signal.getsignal(s) for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    }

    def leftovers():
        """Anything the submission left running or patched: evidence that a result may be forged."""
        found = []
        try:
            threads = len(os.listdir("/proc/self/task"))
        except OSError:
            import threading

            threads = threading.active_count()
        if threads > 1:
            found.append(("runner_tampering", f"{threads - 1} background thread(s) left running"))
        if atexit._ncallbacks():
            found.append(("early_exit", f"{atexit._ncallbacks()} exit handler(s) registered"))
            atexit._clear()
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
        dt = sys.modules.get("datetime")
        if dt is not None:
            import _datetime

            for k in ("datetime", "date", "time", "timedelta", "timezone"):
                if getattr(dt, k, None) is not getattr(_datetime, k):
                    found.append(("timing_spoof", f"datetime.{k} was replaced"))
                    setattr(dt, k, getattr(_datetime, k))
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

    t_setup = time.perf_counter()
    sol_name = hdr["solution_module"]
    import_error = None
    try:
        solution = __import__(sol_name)
    except BaseException as e:  # the submission's own failure: every test fails
        solution = None
        import_error = f"importing {sol_name}: {type(e).__name__}: {e}"
        if isinstance(e, SystemExit):
            flag("early_exit", f"SystemExit raised while importing {sol_name}")
    t_imported = time.perf_counter()
    proxy = None
    if solution is not None:
        # The tests see only this proxy: every function reached through it has its results checked, even
        # when the submission swapped its own sys.modules entry for some other object while importing.
        proxy = types.ModuleType(sol_name)
        if isinstance(solution, types.ModuleType):
            members = list(vars(solution).items())
        else:
            flag("test_tampering", f"importing {sol_name} produced a {type(solution).__name__}, not a module")
            members = [(k, getattr(solution, k, None)) for k in dir(solution) if not k.startswith("__")]
        for k, v in members:
            wrap = callable(v) and not isinstance(v, type | types.ModuleType)
            setattr(proxy, k, guarded(v) if wrap else v)
        sys.modules[sol_name] = proxy

    loaded = {}

    cur = [start]
    dumps_value = marshal.dumps

    def sealed_check(j):
        def __tg_check__(value, k):
            """An `assert value == <literal>` whose literal the host kept out of this process: the value
            goes to the supervisor, which compares it after every worker is gone."""
            if not plain(value, [100_000]):
                t = type(value)
                flag("always_equal", f"checked value is a {t.__module__}.{t.__qualname__}")
                raise Hack(f"checked value is a {t.__qualname__}")
            try:
                size = len(dumps_value(value))
            except ValueError:
                raise AssertionError("the value cannot be checked") from None
            if size > 4_000_000:
                raise AssertionError("the value is too large to check")
            send({"t": "check", "i": cur[0], "j": j, "k": k, "v": value})

        return __tg_check__

    def load(spec, j):
        """name -> test function (or an error string) for one check file, compiled from memory."""
        mod = types.ModuleType(spec["module"])
        mod.__file__ = "<tg-" + token + ":" + spec["path"] + ">"
        mod.__dict__["__tg_check__"] = sealed_check(j)
        try:
            exec(spec["code"], mod.__dict__)  # compiled by the host with this token in its filename
            for k, v in list(vars(mod).items()):
                if v is solution:
                    setattr(mod, k, proxy)
                elif isinstance(v, types.FunctionType) and getattr(v, "__module__", None) == sol_name:
                    setattr(mod, k, guarded(v))
            return {spec["prefix"] + n: getattr(mod, n, None) for n in spec["names"]}
        except BaseException as e:
            err = f"loading {spec['path']}: {type(e).__name__}: {e}"
            return {spec["prefix"] + n: err for n in spec["names"]}

    reported = 0  # flags raised while importing the submission go out with the first result
    owner = [j for j, spec in enumerate(hdr["tests"]) for _ in spec["names"]]
    n_hidden = hdr["n_hidden"]
    for i in range(start, len(names)):
        name = names[i]
        before = len(flags)
        if i >= n_hidden and not hidden_failed:
            # visible checks only matter when hidden ones failed (to flag overfitting to the visible ones)
            send({"t": "start", "i": i})
            send(
                {
                    "t": "result",
                    "i": i,
                    "outcome": "skipped",
                    "detail": "hidden tests passed",
                    "s": 0.0,
                    "flags": flags[reported:],
                }
            )
            reported = len(flags)
            continue
        if import_error is None and owner[i] not in loaded:
            loaded[owner[i]] = load(hdr["tests"][owner[i]], owner[i])
        fn = loaded[owner[i]].get(name) if import_error is None else None
        cur[0] = i
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
        if i < n_hidden and outcome != "passed":
            hidden_failed = True
        send(
            {
                "t": "result",
                "i": i,
                "outcome": outcome,
                "detail": detail,
                "s": elapsed,
                "flags": flags[reported:],
            }
        )
        reported = len(flags)
    send({"t": "done", "times": [t_setup, t_imported, time.perf_counter()]})
    os._exit(0)
