"""The in-sandbox supervisor: PID 1 of the sandbox, runs one command per request.

Runs INSIDE the sandbox under its Python runtime: standard library only, and at start only built-in or small
modules (`posix`, not `os`: its import alone costs ~2 ms, a seventh of a cold sandbox). The host talks to it
over its stdin/stdout in frames (`encode_frame`); each request runs one command in a fresh session, streams
its output back cut at the requested size, and ends by killing and reaping every process in the sandbox, so
nothing (daemons, `setsid` children, SIGTERM-ignorers) outlives a command. As PID 1 it cannot be killed or
stopped from inside (`kill -9 -1` spares it); it continues a child that stops (`kill -STOP -1`), which would
hold the command to its wall limit; it is non-dumpable, so no command reaches its memory or descriptors.

The next command's process is forked ahead ("the next child"), once the previous command's processes are
all dead and no request waits: it pays for the fork and its page faults while the sandbox is idle, then
blocks until it gets its request. It runs nothing before that, and nothing else exists meanwhile.

Python commands (`python3 [-I -S -E -s -B -u -q] (-c CODE | -m MOD | FILE) ARGS`, `python3` being this very
interpreter) run in that forked interpreter (the fast path) unless the request says otherwise; anything else
is exec'd. By design, unlike a real start: `sys.flags` are the supervisor's (`-I -S`: no user site, ever),
the hash seed is shared by a sandbox's commands, and once a command ran Python with `site` (or the host sent
a `site` request) the supervisor runs `site` itself (-S commands keep the -S sys.path). Preloading
(`preload.py`): before the first command only, named modules imported into PID 1, which every later command
inherits; a command sees them only when its request says so (`PRELOAD_KEEP`).
"""

import _signal as signal  # not `signal`: its enum import would double the start-up time
import gc
import marshal
import posix
import resource
import select
import sys
import time

if "." in __name__:  # imported on the host as a package module; shipped, the parts are one source
    from trialground.sandbox.backends.bwrap.supervisor_python import (
        PRE_SITE_PATH,
        READY,
        SITE,
        make_streams,
        parse_python,
        run_python,
    )
    from trialground.sandbox.backends.bwrap.supervisor_wire import (
        encode_frame,
        read_frame,
        read_to_end,
        write_all,
    )

CHILD_KEYS = ("argv", "env", "cwd", "rlimits", "python_fast")  # what the command's process is told
WAKE = (-1, -1)  # SIGCHLD wakes the select loop through this pipe
RESET: dict = {}  # the reset module's "source" and its "reset" function, once the host sent them
OWN_STATE: dict = {}  # what PID 1 passes on to every command, as it was before the first one (`_own_state`)
PRELOADED: dict = {}  # "modules": names the preload added to sys.modules; "ran": a command has run
PRELOAD_KEEP = "TRIALGROUND_PRELOADED"  # a request whose environment sets this to "keep" sees them


def _set_environ(env: dict) -> None:
    """Make `env` this process's whole environment: the C one (for what it execs) and `os.environ`, which
    `os` builds from `posix.environ` when it is first imported."""
    if "os" in sys.modules:
        sys.modules["os"].environ.clear()
        sys.modules["os"].environ.update(env)
        return
    for key in list(posix.environ):
        posix.unsetenv(key)
    posix.environ.clear()
    for key, value in env.items():
        posix.putenv(key, value)
        posix.environ[key.encode("utf-8", "surrogateescape")] = value.encode("utf-8", "surrogateescape")


def _execvpe(argv: list, env: dict) -> None:
    """`os.execvpe`: search the request's PATH for argv[0] and exec it (never returns)."""
    program = argv[0]
    if "/" in program:
        posix.execve(program, argv, env)
    first_error = None
    for directory in env.get("PATH", "/usr/bin:/bin").split(":"):
        try:
            posix.execve(f"{directory or '.'}/{program}", argv, env)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            first_error = first_error or exc
    raise first_error or FileNotFoundError(program)


def _get_ready(request_fd: int, env: "dict | None") -> None:
    """Work every Python command needs, done while the sandbox is idle (each step faults in pages the command
    would fault in on its clock) until the request is there; what was done is noted in READY."""
    if env is not None and _idle(request_fd):
        _set_environ(env)  # the previous command's: usually the next one's too
        READY["env"] = env
    if _idle(request_fd):
        make_streams(unbuffered=False)
        READY["streams"] = True
    if _idle(request_fd):
        compile("pass", "<warm-up>", "exec")


def _child(request_fd: int, fds: "tuple[int, int, int]", to_close: "list[int]", env: "dict | None") -> None:
    """In the forked child: get ready, wait for the request, become the command. Never returns."""
    argv0 = "?"
    try:
        posix.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for target, fd in enumerate(fds):
            posix.dup2(fd, target)
        for fd in {*to_close, *(f for f in fds if f > 2)}:
            posix.close(fd)  # our own descriptors (all close-on-exec anyway; the fast path does not exec)
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # the command, never the supervisor, is what the OOM killer picks
        except OSError:
            pass
        _get_ready(request_fd, env)
        raw = read_to_end(request_fd)
        if not raw:
            posix._exit(0)  # the supervisor is going away
        posix.close(request_fd)
        req = marshal.loads(raw)
        argv0 = req["argv"][0]
        for res, value in req["rlimits"].items():
            value = int(value)
            resource.setrlimit(getattr(resource, res), (value, value if res != "RLIMIT_CPU" else value + 1))
        try:
            posix.chdir(req["cwd"])
        except OSError as exc:
            message = f"sandbox: cannot enter working directory {req['cwd']!r}: {exc.strerror}\n"
            posix.write(2, message.encode())
            posix._exit(126)
        if PRELOADED.get("modules") and req["env"].get(PRELOAD_KEEP) != "keep":
            for name in PRELOADED["modules"]:
                sys.modules.pop(name, None)
        fast = req.get("python_fast", True)
        parsed = parse_python(req["argv"], req["env"].get("PATH", "")) if fast else None
        if parsed is not None:
            if req["env"] != READY.get("env"):
                _set_environ(req["env"])
            posix._exit(run_python(parsed))
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; programs expect defaults
            signal.signal(sig, signal.SIG_DFL)
        _execvpe(req["argv"], req["env"])
    except FileNotFoundError:
        posix.write(2, f"sandbox: command not found: {argv0}\n".encode())
        posix._exit(127)
    except PermissionError as exc:
        posix.write(2, f"{argv0}: {exc}\n".encode())
        posix._exit(126)
    except BaseException as exc:  # anything else is reported as the command's failure
        posix.write(2, f"sandbox: cannot start {argv0!r}: {exc!r}\n".encode())
        posix._exit(126)


class NextChild:
    """A forked process waiting for its request: its pid and our ends of its request and stdio pipes."""

    def __init__(self, keep: "tuple[int, ...]", env: "dict | None") -> None:
        request_r, self.request_w = posix.pipe()
        in_r, self.in_w = posix.pipe()
        self.out_r, out_w = posix.pipe()
        self.err_r, err_w = posix.pipe()
        ours = [self.request_w, self.in_w, self.out_r, self.err_r]
        gc.freeze()  # the child's collector then leaves our objects (and their pages) alone
        self.pid = posix.fork()
        if self.pid == 0:
            _child(request_r, (in_r, out_w, err_w), to_close=[*ours, *keep, *WAKE], env=env)
        for fd in (request_r, in_r, out_w, err_w):
            posix.close(fd)

    def close(self) -> None:
        for fd in (self.request_w, self.in_w, self.out_r, self.err_r):
            if fd >= 0:
                posix.close(fd)


def _kill_everything() -> dict:
    """SIGKILL every process in the namespace but us, reap them all; returns {pid: (status, rusage)}."""
    reaped: dict = {}
    while True:
        try:  # noqa: SIM105 - contextlib would cost start-up time in here
            posix.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            pid, status, usage = posix.wait4(-1, 0)
        except ChildProcessError:
            return reaped
        reaped[pid] = (status, usage)


def _run(req: dict, child: NextChild, ctl_out: int) -> dict:
    start = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = child.pid
    try:  # noqa: SIM105 - contextlib would cost start-up time in here
        write_all(child.request_w, marshal.dumps({k: req[k] for k in CHILD_KEYS if k in req}))
    except BrokenPipeError:
        pass  # it died waiting (killed from outside): its exit status below says so
    posix.close(child.request_w)
    child.request_w = -1
    out_r, err_r, in_w = child.out_r, child.err_r, child.in_w
    stdin = memoryview(req.get("stdin_bytes", b""))
    if not stdin:
        posix.close(in_w)
        in_w = -1
    else:
        posix.set_blocking(in_w, False)
    deadline = start + float(req["wall_s"])
    cap = int(req["output_bytes"])
    sent = {out_r: 0, err_r: 0}
    kinds = {out_r: b"O", err_r: b"E"}

    def forward(fd: int, chunk: bytes) -> None:  # to the host, up to the cap; everything is counted
        if cap > sent[fd]:
            write_all(ctl_out, encode_frame(kinds[fd], chunk[: cap - sent[fd]]))
        sent[fd] += len(chunk)

    open_fds = [out_r, err_r]
    reason = ""
    main_status = None
    maxrss = 0
    while True:
        # Reap the command and the orphans PID 1 inherits (their zombies would hold the process limit)
        while main_status is None:
            done, status, usage = posix.wait4(-1, posix.WNOHANG | posix.WUNTRACED)
            if not done:
                break
            if posix.WIFSTOPPED(status):
                posix.kill(done, signal.SIGCONT)
                continue
            maxrss = max(maxrss, usage.ru_maxrss)
            main_status = status if done == pid else None
        if main_status is not None:
            break
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            reason = "timeout"
            break
        writers = [in_w] if in_w >= 0 else []
        readable, writable, _ = select.select([*open_fds, WAKE[0]], writers, [], timeout)
        if WAKE[0] in readable:
            posix.read(WAKE[0], 4096)  # a child exited: the loop head checks whether it was the command
        if writable:
            try:
                stdin = stdin[posix.write(in_w, stdin[: 1 << 16]) :]
            except BlockingIOError:
                pass
            except BrokenPipeError:
                stdin = stdin[:0]
            if not stdin:
                posix.close(in_w)
                in_w = -1
        for fd in readable:
            if fd == WAKE[0]:
                continue
            chunk = posix.read(fd, 1 << 16)
            if not chunk:
                open_fds.remove(fd)
                continue
            forward(fd, chunk)
            if sent[fd] > cap:
                reason = "output_limit"
        if reason:
            break
    # Output still buffered in the pipes after the command ended belongs to it; take what is there now.
    for fd in open_fds:
        posix.set_blocking(fd, False)
        try:
            while sent[fd] <= cap and (chunk := posix.read(fd, 1 << 16)):
                forward(fd, chunk)
        except BlockingIOError:
            pass
    reaped = _kill_everything()
    if main_status is None and pid in reaped:
        main_status = reaped[pid][0]
    for _status, usage_any in reaped.values():
        maxrss = max(maxrss, usage_any.ru_maxrss)
    child.in_w = in_w
    child.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = {"reason": reason, "cpu_s": cpu, "maxrss_kb": maxrss, "wall_s": time.monotonic() - start}
    report["stdout_bytes"], report["stderr_bytes"] = sent[out_r], sent[err_r]
    if main_status is not None:
        if posix.WIFSIGNALED(main_status):
            report["signal"] = posix.WTERMSIG(main_status)
        else:
            report["exit_code"] = posix.WEXITSTATUS(main_status)
    return report


def _own_state() -> dict:
    """What PID 1 passes on to every command and a command could change on it: limits, nice value, policy
    (seccomp lets a command change only its own) and CPU affinity (any process of its uid: checked here)."""
    limits = {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")}
    nice, policy = posix.getpriority(posix.PRIO_PROCESS, 0), posix.sched_getscheduler(0)
    return {**limits, "nice": nice, "scheduler": policy, "affinity": sorted(posix.sched_getaffinity(0))}


def _reset(spec: dict, next_child: int) -> dict:
    """The host's reset request at a restore: `reset.py` (its code loaded once) over the scratch directories;
    answers what is left besides us and the next child (empty: clean), and what changed on this process
    since it started (`_own_state`). A failure is an answer too: the host starts the sandbox afresh."""
    try:
        if RESET.get("source") != spec["source"]:
            namespace = {"__name__": "tg_reset"}
            exec(compile(spec["source"], "reset.py", "exec"), namespace)
            RESET.update(source=spec["source"], reset=namespace["reset"])
        left = RESET["reset"](spec["dirs"], {1, next_child})
        now = _own_state()
        left += [f"PID 1 {k}: {now.get(k)} (was {v})" for k, v in OWN_STATE.items() if now.get(k) != v]
        return {"left": left}
    except Exception as e:
        return {"left": [f"the reset failed: {type(e).__name__}: {e}"]}


def _preload(spec: dict) -> dict:
    """The host's preload request: the preload module's code (`preload.py`) run once, before any command
    ran; refused after one has, so nothing a command did reaches what later commands inherit."""
    if PRELOADED.get("ran"):
        return {"loaded": [], "errors": ["refused: a command has run in this sandbox"], "rss_kb": 0}
    try:
        namespace: dict = {"__name__": "tg_preload"}
        exec(compile(spec["source"], "preload.py", "exec"), namespace)
        answer, PRELOADED["modules"] = namespace["preload"](spec["modules"], spec["path"], PRE_SITE_PATH)
    except Exception as e:
        return {"loaded": [], "errors": [f"the preload failed: {type(e).__name__}: {e}"], "rss_kb": 0}
    return answer


def _set_non_dumpable() -> None:
    """PR_SET_DUMPABLE 0: a command (same uid) opens neither /proc/1/mem nor /proc/1/fd/*, so it can neither
    patch this process nor forge frames on the host channel. (`_ctypes`: `ctypes` costs milliseconds.)"""
    import _ctypes

    prctl = _ctypes.dlsym(_ctypes.dlopen(None), "prctl")  # type: ignore[arg-type]
    _ctypes.call_function(prctl, (4, 0, 0, 0, 0))
    if _ctypes.call_function(prctl, (3, 0, 0, 0, 0)) != 0:
        raise SystemExit("supervisor: cannot make itself non-dumpable")


def _idle(ctl_in: int) -> bool:
    return not select.select([ctl_in], [], [], 0)[0]


def _warm_up(ctl_in: int) -> None:
    """While no request waits, import runpy (and os), and `site` once a command ran Python without -S."""
    if "runpy" not in sys.modules and _idle(ctl_in):
        import runpy  # noqa: F401
    if SITE.get("wanted") and not SITE.get("loaded") and _idle(ctl_in):
        _load_site()


def _load_site() -> dict:
    """Run `site` here for every later Python command; also the host's `site` request (`ReadyPool`)."""
    SITE["wanted"] = True
    if not SITE.get("loaded"):
        import site

        site.main()
        SITE["loaded"] = True
    return {"loaded": ["site"]}


def main() -> None:
    if posix.getpid() != 1:  # `kill(-1)` below would otherwise reach every process we may signal
        raise SystemExit("supervisor: must be PID 1 of its own PID namespace")
    OWN_STATE.update(_own_state())
    ctl_in, ctl_out = posix.dup(0), posix.dup(1)
    null = posix.open("/dev/null", posix.O_RDWR)
    for fd in (0, 1):
        posix.dup2(null, fd)
    posix.close(null)
    # Work every Python command does, done here once: children inherit the pages (the compiler alone:
    # 1.5 ms here and 0.2 ms in each child, vs 2.1 ms in each child faulting them itself).
    make_streams(unbuffered=False)
    READY["streams"] = True
    compile("pass", "<warm-up>", "exec")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    global WAKE
    WAKE = posix.pipe()
    for fd in WAKE:
        posix.set_blocking(fd, False)
    signal.set_wakeup_fd(WAKE[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    write_all(ctl_out, encode_frame(b"H", marshal.dumps({"pid": posix.getpid()})))
    child = None
    env = None  # the last command's environment
    if not _idle(ctl_in):
        # A request came with the start: fork its process first, so its start-up overlaps the next step on
        # the other core (it gets its request only after that step)
        child = NextChild(keep=(ctl_in, ctl_out), env=env)
    _set_non_dumpable()  # before any command can run
    while True:
        _warm_up(ctl_in)
        if child is None:
            child = NextChild(keep=(ctl_in, ctl_out), env=env)
        try:
            kind, payload = read_frame(ctl_in)
        except EOFError:
            return
        if kind != "R":
            continue
        req = marshal.loads(payload)
        if "reset" in req:
            write_all(ctl_out, encode_frame(b"X", marshal.dumps(_reset(req["reset"], child.pid))))
            continue
        if "preload" in req or "site" in req:
            answer = _preload(req["preload"]) if "preload" in req else _load_site()
            if answer["loaded"]:  # the waiting process was forked without them: fork it again
                child.close()
                posix.waitpid(child.pid, 0)
                child = None
            write_all(ctl_out, encode_frame(b"X", marshal.dumps(answer)))
            continue
        PRELOADED["ran"] = True
        stdin_parts = []
        while (frame := read_frame(ctl_in))[0] == "I" and frame[1]:
            stdin_parts.append(frame[1])
        req["stdin_bytes"] = b"".join(stdin_parts)
        fast = req.get("python_fast", True)
        parsed = parse_python(req["argv"], req["env"].get("PATH", "")) if fast else None
        if parsed is not None and "S" not in parsed[0]:
            SITE["wanted"] = True
        report = _run(req, child, ctl_out)
        child, env = None, req["env"]
        write_all(ctl_out, encode_frame(b"X", marshal.dumps(report)))


if __name__ == "__main__":
    main()
