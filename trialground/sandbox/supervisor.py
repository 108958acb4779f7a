"""The in-sandbox supervisor: PID 1 of the sandbox, runs one command per request.

Runs INSIDE the sandbox under the sandbox's Python runtime, so it imports the standard library only. The host
talks to it over its stdin/stdout with frames (`encode_frame`); each request runs one command in a fresh
session, streams its output back cut at the requested size, and ends by killing and reaping every process
in the sandbox, so nothing (daemons, `setsid` children, SIGTERM-ignorers) outlives a command. Being PID 1 of
the PID namespace it cannot be killed from inside (`kill -9 -1` spares it); it makes itself non-dumpable so
sandboxed code cannot read or write its memory or file descriptors through /proc.

Python commands (`python3 [-I -S -E -s -B -u -q] (-c CODE | -m MOD | FILE) ARGS`, where `python3` resolves
to this very interpreter) are run by forking this already-started interpreter (the fast path) unless the
request says otherwise; anything else is exec'd. Differences from a real start, by design: `sys.flags` are
the supervisor's (`-I -S`: no user site, ever), the hash seed is shared by the commands of one sandbox, and
once a command ran Python with `site`, the supervisor runs `site` itself while idle (a `-S` command still
gets the `-S` sys.path).
"""

from __future__ import annotations

import _signal as signal  # not `signal`: its enum import would double the start-up time
import marshal
import os
import resource
import select
import struct
import sys
import time

HEADER = struct.Struct(">IB")
# host -> supervisor: R request (JSON), I stdin bytes (may repeat, then an empty one).
# supervisor -> host: H hello (JSON), O stdout bytes, E stderr bytes, X exit report (JSON).
MAX_FRAME = 1 << 20
PYTHON_FLAGS = set("ISEsBuq")
WAKE: tuple[int, int] = (-1, -1)  # SIGCHLD wakes the select loop through this pipe
PRE_SITE_PATH = list(sys.path)  # sys.path of a -S interpreter
SITE: dict[str, bool] = {}  # "wanted": a command ran Python with site; "loaded": we ran site.main()


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(len(payload), kind[0]) + payload


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> tuple[bytes, bytes]:
    size, kind = HEADER.unpack(_read_exact(fd, HEADER.size))
    return bytes([kind]), _read_exact(fd, size)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _is_this_interpreter(program: str, path_var: str) -> bool:
    candidates = [program] if "/" in program else [os.path.join(d, program) for d in path_var.split(":") if d]
    for path in candidates:
        if os.access(path, os.X_OK):
            return os.path.realpath(path) == os.path.realpath(sys.executable)
    return False


def _parse_python(argv: list[str], path_var: str) -> tuple[set[str], str, str, list[str]] | None:
    """(flags, mode, target, argv) when `argv` is a plain Python invocation the fast path can run."""
    if not argv or os.path.basename(argv[0]) not in ("python3", "python", f"python3.{sys.version_info[1]}"):
        return None
    if not _is_this_interpreter(argv[0], path_var):
        return None  # another Python (e.g. the system's): run the real thing
    flags: set[str] = set()
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        arg = argv[i]
        if arg in ("-c", "-m"):
            if i + 1 >= len(argv):
                return None
            return flags, arg[1], argv[i + 1], [arg if arg == "-c" else argv[i + 1], *argv[i + 2 :]]
        if not set(arg[1:]) <= PYTHON_FLAGS:
            return None
        flags |= set(arg[1:])
        i += 1
    if i >= len(argv) or argv[i] == "-":
        return None
    return flags, "f", argv[i], argv[i:]


def _run_python(parsed: tuple[set[str], str, str, list[str]]) -> int:
    """Run a Python program in this (forked) interpreter; returns the exit status."""
    import io

    flags, mode, target, argv = parsed
    unbuffered = "u" in flags or (bool(os.environ.get("PYTHONUNBUFFERED")) and not {"I", "E"} & flags)
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        if fd == 0:
            stream: io.TextIOWrapper = io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8")
        else:
            buffered = io.BufferedWriter(raw)
            errors = "backslashreplace" if fd == 2 else "strict"
            stream = io.TextIOWrapper(
                buffered,
                encoding="utf-8",
                errors=errors,
                line_buffering=fd == 2 or unbuffered,
                write_through=unbuffered,
            )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sys.argv = argv
    safe_path = "I" in flags
    first = "" if mode == "c" else os.getcwd() if mode == "m" else os.path.dirname(os.path.abspath(target))
    if not safe_path:
        sys.path.insert(0, first)
    if not {"I", "E"} & flags and os.environ.get("PYTHONPATH"):
        sys.path[1:1] = os.environ["PYTHONPATH"].split(os.pathsep)
    if "B" in flags:
        sys.dont_write_bytecode = True
    code = 0
    try:
        if "S" in flags:
            sys.path[:] = PRE_SITE_PATH  # the supervisor may have run site for earlier commands
        elif not SITE.get("loaded"):
            import site

            site.main()
        if mode == "c":
            main = type(sys)("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            import runpy

            if mode == "m":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # the program's own error is reported like the interpreter does
        import traceback

        traceback.print_exc()
        code = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a broken stdout at exit is the program's business
        code = code or 120
    return code


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(req: dict, fds: tuple[int, int, int]) -> None:
    """In the forked child: become the command. Never returns."""
    try:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in {*req["_close"], *(f for f in fds if f > 2)}:
            os.close(fd)  # our own descriptors (all close-on-exec anyway; the fast path does not exec)
        for res, value in req["rlimits"].items():
            value = int(value)
            resource.setrlimit(getattr(resource, res), (value, value if res != "RLIMIT_CPU" else value + 1))
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # the command, never the supervisor, is what the OOM killer picks
        except OSError:
            pass
        try:
            os.chdir(req["cwd"])
        except OSError as exc:
            os.write(2, f"sandbox: cannot enter working directory {req['cwd']!r}: {exc.strerror}\n".encode())
            os._exit(126)
        os.environ.clear()
        os.environ.update(req["env"])
        parsed = (
            _parse_python(req["argv"], req["env"].get("PATH", "")) if req.get("python_fast", True) else None
        )
        if parsed is not None:
            os._exit(_run_python(parsed))
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; programs expect defaults
            signal.signal(sig, signal.SIG_DFL)
        os.execvpe(req["argv"][0], req["argv"], req["env"])
    except FileNotFoundError:
        os.write(2, f"sandbox: command not found: {req['argv'][0]}\n".encode())
        os._exit(127)
    except PermissionError as exc:
        os.write(2, f"{req['argv'][0]}: {exc}\n".encode())
        os._exit(126)
    except BaseException as exc:  # anything else is reported as the command's failure
        os.write(2, f"sandbox: cannot start {req['argv'][0]!r}: {exc!r}\n".encode())
        os._exit(126)


def _kill_everything() -> dict[int, tuple[int, object]]:
    """SIGKILL every process in the namespace but us, reap them all; returns {pid: (status, rusage)}."""
    reaped: dict[int, tuple[int, object]] = {}
    while True:
        try:  # noqa: SIM105 - contextlib would cost start-up time in here
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            pid, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return reaped
        reaped[pid] = (status, usage)


def _run(req: dict, ctl_out: int, fds_to_close: tuple[int, ...]) -> dict:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe()
    start = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    req["_close"] = [out_r, err_r, in_w, *fds_to_close, *WAKE]
    pid = os.fork()
    if pid == 0:
        _child(req, (in_r, out_w, err_w))
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    stdin = memoryview(req.get("stdin_bytes", b""))
    if not stdin:
        os.close(in_w)
        in_w = -1
    else:
        os.set_blocking(in_w, False)
    deadline = start + float(req["wall_s"])
    cap = int(req["output_bytes"])
    sent = {out_r: 0, err_r: 0}
    kinds = {out_r: b"O", err_r: b"E"}
    open_fds = [out_r, err_r]
    reason = ""
    main_status: int | None = None
    maxrss = 0
    while True:
        if main_status is None:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                main_status, maxrss = status, usage.ru_maxrss
                break
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            reason = "timeout"
            break
        writers = [in_w] if in_w >= 0 else []
        readable, writable, _ = select.select([*open_fds, WAKE[0]], writers, [], timeout)
        if WAKE[0] in readable:
            os.read(WAKE[0], 4096)  # a child exited: the loop head checks whether it was the command
        if writable:
            try:
                stdin = stdin[os.write(in_w, stdin[: 1 << 16]) :]
            except BlockingIOError:
                pass
            except BrokenPipeError:
                stdin = stdin[:0]
            if not stdin:
                os.close(in_w)
                in_w = -1
        for fd in readable:
            if fd == WAKE[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.remove(fd)
                continue
            room = cap - sent[fd]
            if room > 0:
                _write_all(ctl_out, encode_frame(kinds[fd], chunk[:room]))
            sent[fd] += len(chunk)
            if sent[fd] > cap:
                reason = "output_limit"
        if reason:
            break
    # Output still buffered in the pipes after the command ended belongs to it; take what is there now.
    for fd in open_fds:
        os.set_blocking(fd, False)
        try:
            while sent[fd] <= cap and (chunk := os.read(fd, 1 << 16)):
                room = cap - sent[fd]
                if room > 0:
                    _write_all(ctl_out, encode_frame(kinds[fd], chunk[:room]))
                sent[fd] += len(chunk)
        except BlockingIOError:
            pass
    reaped = _kill_everything()
    if main_status is None and pid in reaped:
        main_status = reaped[pid][0]
    for _status, usage_any in reaped.values():
        maxrss = max(maxrss, usage_any.ru_maxrss)  # type: ignore[attr-defined]
    for fd in (out_r, err_r, in_w):
        if fd >= 0:
            os.close(fd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report: dict = {"reason": reason, "cpu_s": cpu, "maxrss_kb": maxrss, "wall_s": time.monotonic() - start}
    report["stdout_bytes"], report["stderr_bytes"] = sent[out_r], sent[err_r]
    if main_status is not None:
        if os.WIFSIGNALED(main_status):
            report["signal"] = os.WTERMSIG(main_status)
        else:
            report["exit_code"] = os.WEXITSTATUS(main_status)
    return report


def _empty_directory(path: str) -> None:
    """Delete everything under `path` (private /tmp, /dev/shm) so nothing carries over a restore."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:  # noqa: SIM105
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            full = os.path.join(root, name)
            try:  # noqa: SIM105
                os.unlink(full) if os.path.islink(full) else os.rmdir(full)
            except OSError:
                pass


def _set_non_dumpable() -> None:
    """PR_SET_DUMPABLE 0: the command (same uid) can then open neither /proc/1/mem nor /proc/1/fd/*, so it
    can neither patch this process nor forge frames on the host channel. `_ctypes` directly: `ctypes`
    costs milliseconds to import."""
    import _ctypes

    prctl = _ctypes.dlsym(_ctypes.dlopen(None), "prctl")  # type: ignore[arg-type]
    _ctypes.call_function(prctl, (4, 0, 0, 0, 0))
    if _ctypes.call_function(prctl, (3, 0, 0, 0, 0)) != 0:
        raise SystemExit("supervisor: cannot make itself non-dumpable")


def _warm_up(ctl_in: int) -> None:
    """While no request is waiting, import what Python commands need, so they do not pay for it: runpy
    always, and `site` (sys.path, .pth files) once a command has shown it runs Python without -S."""
    if "runpy" not in sys.modules and not select.select([ctl_in], [], [], 0)[0]:
        import runpy  # noqa: F401
    if SITE.get("wanted") and not SITE.get("loaded") and not select.select([ctl_in], [], [], 0)[0]:
        import site

        site.main()
        SITE["loaded"] = True


def main() -> None:
    ctl_in, ctl_out = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    _set_non_dumpable()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    global WAKE
    WAKE = os.pipe()
    for fd in WAKE:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(WAKE[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _write_all(ctl_out, encode_frame(b"H", marshal.dumps({"pid": os.getpid()})))
    while True:
        _warm_up(ctl_in)
        try:
            kind, payload = _read_frame(ctl_in)
        except EOFError:
            return
        if kind != b"R":
            continue
        req = marshal.loads(payload)
        if "clean" in req:
            for path in req["clean"]:
                _empty_directory(path)
            _write_all(ctl_out, encode_frame(b"X", marshal.dumps({})))
            continue
        stdin_parts = []
        while True:
            kind, chunk = _read_frame(ctl_in)
            if kind != b"I" or not chunk:
                break
            stdin_parts.append(chunk)
        req["stdin_bytes"] = b"".join(stdin_parts)
        parsed = (
            _parse_python(req["argv"], req["env"].get("PATH", "")) if req.get("python_fast", True) else None
        )
        if parsed is not None and "S" not in parsed[0]:
            SITE["wanted"] = True
        report = _run(req, ctl_out, (ctl_in, ctl_out))
        _write_all(ctl_out, encode_frame(b"X", marshal.dumps(report)))


if __name__ == "__main__":
    main()
