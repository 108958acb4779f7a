"""Starting bubblewrap as the unprivileged sandbox uid, inside the sandbox's cgroup, without forking us.

A `preexec_fn` (or Popen's `user=`) forces a full fork() of this process, whose cost grows with its
memory: ~0.1 s for a 2 GB trainer, on the event loop. Instead a small shell is spawned by vfork; it moves
itself into the sandbox's cgroup and execs bubblewrap through `setpriv` (uid change), so every process of
the sandbox lives in the cgroup from its start. Without `setpriv` the old preexec path is the fallback.

bubblewrap starts as the leader of a process group of its own, and is killed with its whole group
(`kill_group`). Between its clone() and the moment it lets the sandbox's first process go on, bubblewrap's
child waits on an eventfd that only the outer process can signal, and it has not yet asked to die with
its parent: SIGKILL to the outer process alone in that window (a sandbox closed or cancelled the moment it
was started) leaves the child blocked for ever, reparented to init. The child is still in the outer
process's group then, so killing the group takes it too; past that wait, `--die-with-parent` has the
outer process's death take it down. On root hosts the sandbox's cgroup is killed as well; on hosts
without one the group is what holds.

The stdio pipes are our own, connected to the loop as streams after the process exists (the returned
`Process`'s stdin/stdout/stderr): with Python 3.11's own PIPEs, a loop shutting down while the process is
being created cancels `create_subprocess_exec` half-way, and it then waits forever for pipes that were
never connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Callable, Iterator, Sequence

from trialground.sandbox.backends.bwrap.cgroup import Cgroup

SETPRIV = shutil.which("setpriv")
# argv: the cgroup.procs files, "--", the command. Exit status 125 (and sh's message) when a write fails.
JOIN_CGROUP = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


async def _create(
    argv: Sequence[str], pass_fds: Sequence[int], preexec_fn: Callable[[], None] | None = None
) -> asyncio.subprocess.Process:
    """`argv` started with stdin/stdout/stderr pipes (see the module docstring)."""
    with stdio_pipes() as ((stdin, stdout, stderr), ours):
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=pass_fds,
            cwd="/",
            preexec_fn=preexec_fn,
            start_new_session=True,  # a process group of its own: see kill_group
        )
    try:
        proc.stdin, proc.stdout, proc.stderr, _ = await connect_pipes(*ours)
    except BaseException:  # cancelled while connecting: nothing may outlive this call
        kill_group(proc)
        raise
    return proc


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a bubblewrap started by `spawn_bwrap` and every process still in its group (the module
    docstring says why the outer process alone is not enough). Only while it is not yet reaped: until then
    its pid, and so its group id, cannot belong to anything else."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def stdio_pipes() -> Iterator[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Pipes for a child's stdin, stdout and stderr: (its ends, our ends: stdin's write end, stdout's and
    stderr's read ends). Its ends are closed when the block ends (the child has its copies by then), ours
    too when the block fails."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        yield (in_r, out_w, err_w), (in_w, out_r, err_r)
    except BaseException:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)


async def connect_pipes(
    in_w: int, out_r: int, err_r: int
) -> tuple[asyncio.StreamWriter, asyncio.StreamReader, asyncio.StreamReader, list[asyncio.BaseTransport]]:
    """Our ends of a process's stdio pipes as streams of the running loop, plus their transports. Takes
    ownership of the three descriptors: on failure (or cancellation) they are closed."""
    loop = asyncio.get_running_loop()
    pipes = [os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)]
    pipes.append(os.fdopen(in_w, "wb", buffering=0))
    transports: list[asyncio.BaseTransport] = []
    try:
        readers = []
        for pipe in pipes[:2]:
            reader = asyncio.StreamReader(limit=1 << 16, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            read_transport, _ = await loop.connect_read_pipe(lambda p=protocol: p, pipe)  # type: ignore[misc]
            transports.append(read_transport)
            readers.append(reader)
        transport, flow = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipes[2])
        transports.append(transport)
    except BaseException:
        for t in transports:
            t.close()
        for pipe in pipes:
            pipe.close()
        raise
    return asyncio.StreamWriter(transport, flow, None, loop), readers[0], readers[1], transports


async def spawn_bwrap(
    argv: Sequence[str], *, pass_fds: Sequence[int], cgroup: Cgroup | None, uid: int | None
) -> asyncio.subprocess.Process:
    """Start `argv` (a bubblewrap command line) with stdin/stdout/stderr pipes."""
    if uid is not None and SETPRIV is None:
        return await _create(argv, pass_fds, _preexec(cgroup.procs_files() if cgroup else [], uid))
    if cgroup is None:
        return await _create([*_as_user(uid), *argv], pass_fds)
    # A shell, still as us, moves itself into the group and execs setpriv + bubblewrap there: every process
    # of the sandbox starts inside it, and the cgroup namespace bubblewrap makes when it clones the sandbox
    # is rooted at the sandbox's own group (/proc/self/cgroup inside shows "/", nothing of the host's).
    # Moving a process into the group takes ~0.15 ms here (three controllers; 2-35 ms without
    # `favordynmods`, see cgroup.py).
    full = ["/bin/sh", "-c", JOIN_CGROUP, "sh", *cgroup.procs_files(), "--", *_as_user(uid), *argv]
    return await _create(full, pass_fds)


def _as_user(uid: int | None) -> list[str]:
    if uid is None or SETPRIV is None:
        return []
    return [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def _preexec(procs_files: list[str], uid: int) -> Callable[[], None]:
    """Join the cgroup, then drop to the sandbox uid (raw syscalls only: we are between fork and exec)."""

    def preexec() -> None:
        pid = str(os.getpid()).encode()
        for path in procs_files:
            fd = os.open(path, os.O_WRONLY)
            os.write(fd, pid)
            os.close(fd)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    return preexec
