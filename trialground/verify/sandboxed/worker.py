"""The submission half of the `code_tests` runner (see `runner.py`): a process forked from the runner's
supervisor, in its own session, that imports the submission and answers calls; it never sees a test.
Standard library only; never imported by the host, which compiles it under the grading's secret
`<tg-TOKEN:...>` filename and ships it in the runner's header.

Protocol (frames of `wire.py` plain data; the checker speaks first only after the manifest):
- worker -> checker, once: `("manifest", callables, constants, import_error, flags)`: the names of the
  solution module's callables, its plain-data constants, and the import error text (or None);
- checker -> worker: `("call", seq, name, args, kwargs)`; the reply is `("ret", seq, value, flags)`,
  `("exc", seq, builtin_class_name, message, flags)` or `("nonplain", seq, type_name, flags)`;
- checker -> worker: `("after", seq)` after each test; the reply `("flags", seq, flags)` carries what
  `leftovers()` found (threads, hooks, signal handlers, patched builtins / time / datetime).

Everything this process sends is the submission's to choose: the checker treats it as untrusted data
(decoded strictly into fresh builtin objects) and the flags as evidence that can only lower a reward.
The audit hook below blocks and flags introspection, spawning, signals and special files; it is
evidence for the monitor, not the defence: the checks run in the checker, which never imports the
submission.
"""

import os
import signal
import sys
import time


def worker(opts, wire, call_r, reply_w):
    """Serve the submission to the checker over (`call_r`, `reply_w`) until told to stop or killed.
    `opts`: token, solution_module, strict_types, check_names."""
    token = opts["token"]
    stdlib = os.path.dirname(os.__file__) + "/"  # site-packages of this runtime live below it too
    trusted_prefixes = (stdlib, "/usr/lib/python3/", "/usr/local/lib/python3", "<frozen ", "<tg-" + token)
    check_names = tuple(opts["check_names"])
    flags = []
    guard = [False]
    getframe = sys._getframe
    encode, decode, WireError = wire["encode"], wire["decode"], wire["WireError"]
    NotPlainData = wire["NotPlainData"]
    send_frame, recv_frame = wire["send_frame"], wire["recv_frame"]
    write, read = os.write, os.read

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
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
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
            real = os.path.realpath(path)  # `//proc`, `../proc` and links into it are the same place
            if path.startswith("/proc") or real == "/proc" or real.startswith("/proc/"):
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

    # Silence the worker: the submission must not write into the supervisor's report or stdin. Every
    # other inherited descriptor is closed: only the two ends of the call channel stay.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    keep = sorted((call_r, reply_w))
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, 1 << 16)
    sys.dont_write_bytecode = True
    sys.addaudithook(hook)
    try:
        ws = os.getcwd()  # the exec's cwd is the workspace, whatever the backend maps it to
    except OSError:  # the directory was replaced under us (seen once right after a sandbox restore)
        ws = "/workspace"
        os.chdir(ws)
    sys.path.insert(0, ws)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))

    import atexit
    import builtins

    watched_modules = {"builtins": builtins, "time": time}
    snapshot = {m: dict(vars(mod)) for m, mod in watched_modules.items()}
    watched = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
    handlers = {s: signal.getsignal(s) for s in watched}

    def leftovers():
        """Anything the submission left running or patched: evidence of an attempt at the grading."""
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
                try:
                    label = signal.Signals(s).name
                except ValueError:
                    label = f"signal {s}"
                found.append(("runner_tampering", f"signal handler for {label} replaced"))
        for m, before in snapshot.items():
            now = vars(watched_modules[m])
            for k, v in before.items():
                if now.get(k) is not v and not k.startswith("__"):
                    kind = "test_tampering" if m == "builtins" else "timing_spoof"
                    found.append((kind, f"{m}.{k} was replaced"))
        dt = sys.modules.get("datetime")
        if dt is not None:
            import _datetime

            for k in ("datetime", "date", "time", "timedelta", "timezone"):
                if getattr(dt, k, None) is not getattr(_datetime, k):
                    found.append(("timing_spoof", f"datetime.{k} was replaced"))
        return found

    import types

    sol_name = opts["solution_module"]
    strict = opts["strict_types"]
    import_error = None
    table: dict = {}
    callables, constants = [], {}
    try:
        solution = __import__(sol_name)
    except BaseException as e:  # the submission's own failure: every test fails
        solution = None
        import_error = f"importing {sol_name}: {type(e).__name__}: {e}"
        if isinstance(e, SystemExit):
            flag("early_exit", f"SystemExit raised while importing {sol_name}")
    if solution is not None:
        if isinstance(solution, types.ModuleType):
            members = list(vars(solution).items())
        else:
            flag("test_tampering", f"importing {sol_name} produced a {type(solution).__name__}, not a module")
            members = [(k, getattr(solution, k, None)) for k in dir(solution) if not k.startswith("__")]
        budget = 4_000_000
        for k, v in members:
            if type(k) is not str or k.startswith("__"):
                continue
            if callable(v) and not isinstance(v, types.ModuleType):
                table[k] = v
                callables.append(k)
                continue
            try:
                size = len(encode(v, budget))
            except WireError:
                continue  # neither callable nor plain data: not visible to the checks
            budget -= size
            constants[k] = v
    reported = [0]

    def new_flags():
        out = flags[reported[0] :]
        reported[0] = len(flags)
        return out

    def reply(msg):
        send_frame(reply_w, encode(msg), write)

    def builtin_name(exc):
        try:
            for cls in type(exc).__mro__:
                if cls.__module__ == "builtins" and type(cls.__name__) is str:
                    return cls.__name__
        except BaseException:
            pass
        return "Exception"

    def missing(*args, **kwargs):
        raise AttributeError("the solution has no such function")

    reply(("manifest", callables, constants, import_error, new_flags()))
    while True:
        try:
            msg = decode(recv_frame(call_r, read))
        except (EOFError, WireError, OSError):
            os._exit(0)
        op, seq = msg[0], msg[1]
        if op == "after":
            for kind, evidence in leftovers():
                flag(kind, evidence)
            reply(("flags", seq, new_flags()))
            continue
        if op != "call":
            os._exit(0)
        fn = table.get(msg[2], missing)
        try:
            result = fn(*msg[3], **msg[4])
        except BaseException as e:
            if isinstance(e, SystemExit):
                flag("early_exit", f"SystemExit raised in {msg[2]}()")
            try:
                text = str(e)
                text = text if type(text) is str else "<unprintable>"
            except BaseException:
                text = "<unprintable>"
            reply(("exc", seq, builtin_name(e), text[:2000], new_flags()))
            continue
        found = new_flags()
        try:
            out = encode(("ret", seq, result, found))
        except NotPlainData:
            t = type(result)
            label = f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', '?')}"
            if isinstance(fn, type):
                label = f"instance of the solution's class {label} (classes cannot be checked in isolation)"
            elif strict:  # a function returning a non-data object: the always-equal trick, or a bug
                flag("always_equal", f"{msg[2]} returned {label}")
            out = encode(("nonplain", seq, label, found + new_flags()))
        except WireError as e:
            out = encode(("nonplain", seq, f"value that cannot be sent ({e})", found + new_flags()))
        send_frame(reply_w, out, write)
