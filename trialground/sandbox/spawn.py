"""Starting bubblewrap as the unprivileged sandbox uid, inside the sandbox's cgroup, without forking us.

A `preexec_fn` (or Popen's `user=`) forces a full fork() of this process, whose cost grows with its
memory: ~0.1 s for a 2 GB trainer, on the event loop. Instead bubblewrap is exec'd through `setpriv` (uid
change) by vfork, with `--info-fd` (it reports its sandbox child's pid) and `--block-fd` (that child waits
before it execs anything): both pids are moved into the cgroup, then the child is released, so every
process of the sandbox lives in the cgroup. Without `setpriv` the old preexec path is the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import Callable, Sequence

from trialground.sandbox.cgroup import Cgroup

SETPRIV = shutil.which("setpriv")
PIPE = asyncio.subprocess.PIPE


async def spawn_bwrap(
    argv: Sequence[str], *, pass_fds: Sequence[int], cgroup: Cgroup | None, uid: int | None
) -> asyncio.subprocess.Process:
    """Start `argv` (a bubblewrap command line) with stdin/stdout/stderr pipes."""
    if uid is not None and SETPRIV is None:
        return await asyncio.create_subprocess_exec(
            *argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, pass_fds=pass_fds, cwd="/",
            preexec_fn=_preexec(cgroup.procs_files() if cgroup else [], uid),
        )  # fmt: skip
    if cgroup is None:
        return await asyncio.create_subprocess_exec(
            *_as_user(uid), *argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, pass_fds=pass_fds, cwd="/"
        )
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    try:
        full = [*_as_user(uid), argv[0], "--info-fd", str(info_w), "--block-fd", str(block_r), *argv[1:]]
        proc = await asyncio.create_subprocess_exec(
            *full, stdin=PIPE, stdout=PIPE, stderr=PIPE, pass_fds=(*pass_fds, info_w, block_r), cwd="/"
        )
        os.close(info_w)
        info_w = -1
        os.close(block_r)
        block_r = -1
        info = await _read_json(info_r, timeout=30)
        # bubblewrap may have failed before reporting: nothing to move then, its stderr says why.
        if info is not None:
            for pid in (proc.pid, int(info["child-pid"])):
                with contextlib.suppress(ProcessLookupError, OSError):
                    cgroup.add(pid)
        return proc
    finally:
        with contextlib.suppress(OSError):
            os.write(block_w, b"go")
        for fd in (info_r, info_w, block_r, block_w):
            if fd >= 0:
                os.close(fd)


def _as_user(uid: int | None) -> list[str]:
    if uid is None or SETPRIV is None:
        return []
    return [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


async def _read_json(fd: int, timeout: float) -> dict | None:
    """The JSON object bubblewrap writes on its info fd; None when it exits without writing one."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[dict | None] = loop.create_future()
    buf = bytearray()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return
        if done.done():
            return
        if not chunk:
            done.set_result(None)
            return
        buf.extend(chunk)
        with contextlib.suppress(ValueError):
            done.set_result(json.loads(buf))

    loop.add_reader(fd, readable)
    try:
        return await asyncio.wait_for(done, timeout)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(fd)


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
