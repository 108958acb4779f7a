"""The supervisor's fast path for Python commands (part of its shipped source, `boot.SUPERVISOR_PARTS`):
a plain `python3 ... (-c CODE | -m MOD | FILE)` of this very interpreter runs in the forked next child
instead of being exec'd, as the supervisor's docstring describes."""

import _signal as signal  # not `signal`: its enum import would double the start-up time
import posix
import sys

PYTHON_FLAGS = set("ISEsBuq")
PRE_SITE_PATH = list(sys.path)  # sys.path of a -S interpreter
SITE: dict = {}  # "wanted": a command ran Python with site; "loaded": we ran site.main()
READY: dict = {}  # in the next child, what it did ahead: "env" (the environment it set up), "streams"


def _same_file(a: str, b: str) -> bool:
    try:
        sa, sb = posix.stat(a), posix.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _is_this_interpreter(program: str, path_var: str) -> bool:
    candidates = [program] if "/" in program else [f"{d}/{program}" for d in path_var.split(":") if d]
    for path in candidates:
        if posix.access(path, posix.X_OK):
            return _same_file(path, sys.executable)
    return False


def parse_python(argv: list, path_var: str) -> "tuple[set[str], str, str, list[str]] | None":
    """(flags, mode, target, argv) when `argv` is a plain Python invocation the fast path can run."""
    names = ("python3", "python", f"python3.{sys.version_info[1]}")
    if not argv or argv[0].rpartition("/")[2] not in names or not _is_this_interpreter(argv[0], path_var):
        return None  # not Python, or another Python (e.g. the system's): run the real thing
    return split_python(argv)


def split_python(argv: list) -> "tuple[set[str], str, str, list[str]] | None":
    """`python [-I -S -E -s -B -u -q] (-c CODE | -m MOD | FILE) ARGS` as (flags, mode "c"/"m"/"f", target,
    the program's sys.argv); None for anything else (other options, no program, `-` for stdin)."""
    flags: set = set()
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


def make_streams(unbuffered: bool) -> None:
    """sys.stdin/stdout/stderr over fds 0-2, as the interpreter makes them."""
    import io

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


def run_python(parsed: "tuple[set[str], str, str, list[str]]") -> int:
    """Run a Python program in this (forked) interpreter; returns the exit status."""
    flags, mode, target, argv = parsed
    unbuffered = "u" in flags or (bool(posix.environ.get(b"PYTHONUNBUFFERED")) and not {"I", "E"} & flags)
    if unbuffered or not READY.get("streams"):
        make_streams(unbuffered)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = argv
    if "I" not in flags:
        if mode == "c":
            sys.path.insert(0, "")
        else:
            import os  # runpy imports it anyway

            sys.path.insert(0, os.getcwd() if mode == "m" else os.path.dirname(os.path.abspath(target)))
    pythonpath = posix.environ.get(b"PYTHONPATH")
    if not {"I", "E"} & flags and pythonpath:
        sys.path[1:1] = pythonpath.decode("utf-8", "surrogateescape").split(":")
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
