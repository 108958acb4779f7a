"""The in-sandbox test runner of the `code_tests` verifier. Standard library only; never imported by the host.

The host starts `python3 -IS -c BOOT` in the grading sandbox and writes to its stdin: this module as a
marshalled code object (compiled by the host under a per-grading secret filename `<tg-TOKEN>`), a marshalled
header (tests as code objects plus their names, read by the host from the AST; options; for a batch, one job
per submission with its files), and last a host key. Roles:

- the *supervisor* (this process) never imports a submission. It forks one *worker* at a time, reads the
  worker's authenticated results (keyed BLAKE2b, a fresh key per worker) over a pipe, enforces per-test
  deadlines (a hung test is killed and a new worker resumes after it) and a total budget, and finally reads
  the host key, which stayed in the stdin pipe while workers existed, and prints one signed report line.
  It is non-dumpable, so workers get no /proc or ptrace access to it; their stdio is /dev/null. In a batch
  it wipes /workspace, /tmp and /dev/shm and writes the next submission's files itself before each job.
- a *worker* (`sandbox_worker.py`, shipped as the header's `worker_code`) installs an audit hook that
  blocks and flags introspection by untrusted code (frames, gc, code objects, trace hooks: anything whose
  caller is not the stdlib or a `<tg-TOKEN>` file), and from anyone: process spawning, ctypes, signals to
  other processes, PYTHON* variables, re-opened fds, /proc, check and conftest/sitecustomize/.pth files.
  It imports the submission, hands the tests only a proxy module whose functions must return plain builtin
  data (no always-equal objects, no builtin subclasses), runs each `test_*` function, and after each test
  checks that no thread, trace/profile hook, signal handler, exit handler, or patched builtin / `time` /
  `datetime` attribute was left behind.

Sealed checks: the host rewrites `assert EXPR == LITERAL` in hidden checks so the worker sends EXPR's value;
the literals follow the host key on stdin and are read, like it, only after every worker is gone (`seal`).
A pass of such a test cannot be forged from inside the worker: it takes the right values. Other asserts run
in the worker, where forging would need its per-worker key, reachable only through frames or memory: the
hook blocks the usual routes; what stays possible (a signal handler's frame argument) is flagged
statically by `trialground.verify.hacks` and still fails every sealed check.
"""

import marshal
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


def _dumps(obj):
    return marshal.dumps(obj).hex()


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


def _load_worker(code):
    """The worker function from its code object (the header's `worker_code`, see `sandbox_worker.py`)."""
    namespace = {"__name__": "tg_worker"}
    exec(code, namespace)
    return namespace["worker"]


WORKER: list = []  # [worker function], set by main() before any fork


def supervise(hdr, first=0):
    """Fork workers until every test from `first` on has a result; return the report (results, flags,
    stats). Tests before `first` are left without a result."""
    specs = hdr["tests"]
    n_hidden = hdr["n_hidden"]
    names = [spec["prefix"] + n for spec in specs for n in spec["names"]]
    results: list = [None] * len(names)
    checks: dict = {}  # test index -> [(spec, check, value)], compared in `seal` once all workers are gone
    flags = []
    timeout = float(hdr["test_timeout_s"])
    budget_end = time.monotonic() + float(hdr["total_timeout_s"])
    start, forks = first, 0
    stamps = [time.perf_counter()]
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
                failed_before = any(
                    res is None or res[0] != "passed" for res in results[: min(start, n_hidden)]
                )
                WORKER[0](hdr, key, w, start, names, failed_before)
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
                msg = marshal.loads(bytes.fromhex(body))
                if msg["t"] == "start":
                    current, deadline = msg["i"], time.monotonic() + timeout
                elif msg["t"] == "check" and msg["i"] == current and results[current] is None:
                    checks.setdefault(current, []).append((msg["j"], msg["k"], msg["v"]))
                elif msg["t"] == "result" and msg["i"] == current and results[current] is None:
                    results[current] = [msg["outcome"], msg["detail"], msg["s"]]
                    flags.extend(msg["flags"])
                    current += 1
                    deadline = time.monotonic() + timeout
                elif msg["t"] == "done":
                    stamps.append(msg["times"])
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
                flags.append(
                    ["early_exit", f"the process exited with status {code} during {names[current]}", severity]
                )
            current += 1
        start = max(current, start + 1) if ended != "done" else len(names)
    return {
        "tests": [
            [n, *(res or ["missing", "no result", 0.0])] for n, res in zip(names, results, strict=True)
        ],
        "flags": flags,
        "forks": forks,
        "stamps": [*stamps, time.perf_counter()],
        "_checks": checks,
    }


def _wipe(top):
    """Empty `top` without following links; directories a submission made unreadable are opened up first
    (same uid). contextlib.suppress would cost one more import per grading."""
    import stat

    try:
        names = os.listdir(top)
    except OSError:
        return
    for name in names:
        path = os.path.join(top, name)
        try:
            is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            continue
        if is_dir:
            try:  # noqa: SIM105
                os.chmod(path, 0o700)
            except OSError:
                pass
            _wipe(path)
            try:  # noqa: SIM105
                os.rmdir(path)
            except OSError:
                pass
        else:
            try:  # noqa: SIM105
                os.unlink(path)
            except OSError:
                pass


def run_job(hdr, job):
    """One submission of a batch: a workspace wiped and rewritten by this (trusted) process, then the same
    supervision as a single grading. Workers are forks of this process, so memory never carries over;
    the files a previous submission left (workspace, /tmp, /dev/shm) are removed first."""
    job["_files"] = job.pop("files")
    _prepare(job["_files"])
    if not hdr.get("_preloaded") and hdr["n_jobs"] >= 4:  # pays off from a few jobs on
        hdr["_preloaded"] = True
        for name in hdr.get("preload", ()):  # shared by every worker fork: paid once per batch
            try:  # noqa: SIM105 - contextlib would be one more import
                __import__(name)
            except ImportError:
                pass
    spec = dict(hdr)
    spec.update(job)
    return supervise(spec)


def _prepare(files):
    """An empty workspace, /tmp and /dev/shm, then `files` (written without following links)."""
    for top in ("/workspace", "/tmp", "/dev/shm"):
        _wipe(top)
    if os.listdir("/workspace"):
        raise RuntimeError("the workspace could not be emptied")
    for path, data in files.items():
        full = os.path.join("/workspace", path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)


def visible_rerun(report, spec, files):
    """The worker skips visible checks when the hidden ones passed as far as it could tell; when sealing
    then failed a hidden test, the visible checks run now (in a fresh worker) so overfitting to them is
    still flagged. The literals are in this process by now, but visible results decide only a warning."""
    n_hidden, rows = spec["n_hidden"], report["tests"]
    failed = any(r[1] != "passed" for r in rows[:n_hidden])
    if not failed or not any(r[1] == "skipped" for r in rows[n_hidden:]):
        return
    if files is not None:
        _prepare(files)
    again = supervise(spec, first=n_hidden)
    rows[n_hidden:] = again["tests"][n_hidden:]
    report["flags"].extend(again["flags"])


def seal(report, spec, expected):
    """Fail every reported pass whose sealed checks are missing or differ from the host's literals.
    `expected[j][k]` is check k of test file j; values came from marshal, so they are plain data and
    `==` here cannot be subverted by the submission."""
    checks = report.pop("_checks", {})
    owner = [(j, n) for j, s in enumerate(spec["tests"]) for n in s["names"]]
    for i, row in enumerate(report["tests"]):
        if row[1] != "passed":
            continue
        j, name = owner[i]
        got = checks.get(i, [])
        required = spec["tests"][j]["checks"].get(name, [])
        seen = {(a, b) for a, b, _ in got}
        bad = next((f"check {b}: got {v!r:.80}" for a, b, v in got if v != expected[a][b]), None)
        if bad is None and not all((j, k) in seen for k in required):
            bad = "a sealed check did not run"
        if bad is not None:
            row[1], row[2] = "failed", "AssertionError (sealed): " + bad
    return report


def main():
    try:
        # Non-dumpable (PR_SET_DUMPABLE=0): workers get no /proc/<pid>/mem, fd or ptrace access to us. A
        # non-dumpable process's /proc entries belong to root, so only pay for ctypes when not yet set
        # (the sandbox's fast path forks an already non-dumpable supervisor).
        if os.stat("/proc/self/mem").st_uid == os.getuid():
            import ctypes

            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
            del sys.modules["ctypes"]
    except Exception:
        pass
    t0 = time.perf_counter()
    size = int(_read_exact(0, 10))
    hdr = marshal.loads(_read_exact(0, size))
    WORKER.append(_load_worker(hdr.pop("worker_code")))
    # Inside a bwrap sandbox only (its own PID namespace, /workspace bind, /tmp tmpfs), never on a host.
    in_sandbox = bool(hdr.get("wipe_tmp")) and os.getcwd() == "/workspace" and os.getppid() == 1
    jobs = hdr.pop("jobs", None)
    hdr["n_jobs"] = len(jobs) if jobs else 1
    if jobs is None:
        report = supervise(hdr)
        report["stamps"].insert(0, t0)
    elif not in_sandbox:
        report = {"error": "batched gradings run only inside a bwrap sandbox"}
    else:
        report = {"jobs": []}
        for job in jobs:
            try:
                report["jobs"].append(run_job(hdr, job))
            except Exception as e:  # this submission's setup failed (e.g. a predecessor's leftovers)
                report["jobs"].append({"error": f"{type(e).__name__}: {e}"})
    key = bytes.fromhex(_read_exact(0, 64).decode())  # read only now: no worker can ever have seen it
    expected = marshal.loads(_read_exact(0, int(_read_exact(0, 10))))  # the sealed literals, also only now
    if jobs is None:
        seal(report, hdr, expected[0])
        visible_rerun(report, hdr, None)
    elif "jobs" in report:
        for n, job_report in enumerate(report["jobs"]):
            if "tests" in job_report:
                seal(job_report, jobs[n], expected[n])
                spec = dict(hdr)
                spec.update(jobs[n])
                try:  # noqa: SIM105 - the hidden verdict stands; only a warning could be lost
                    visible_rerun(job_report, spec, jobs[n]["_files"])
                except Exception:
                    pass
    if in_sandbox:
        _wipe("/tmp")  # every worker is gone: leave nothing for the next grading
    body = _dumps(report)
    sys.stdout.write(REPORT_PREFIX + _mac(key, body) + " " + body + "\n")
    sys.stdout.flush()


if __name__ == "tg_runner":
    main()
