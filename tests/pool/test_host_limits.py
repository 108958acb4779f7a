"""The pool makes room for its sandboxes' file descriptors (RLIMIT_NOFILE), and says clearly when the host
limit is too low."""

from __future__ import annotations

import errno
import resource
import subprocess
import sys

import pytest
from poolkit import NoGrader, make_task

from trialground.envs.config import EnvConfig
from trialground.pool import EnvPool, PoolConfig
from trialground.pool.backend import FDS_BASE, FDS_PER_SANDBOX, open_files_needed, reserve_open_files
from trialground.pool.sim import SimBackend


class Recording(SimBackend):
    def __init__(self) -> None:
        super().__init__()
        self.reserved: list[tuple[int, int]] = []

    def reserve(self, leased: int, idle: int) -> None:
        self.reserved.append((leased, idle))


async def test_the_pool_reserves_room_for_its_most_sandboxes() -> None:
    backend = Recording()
    pool = EnvPool(
        PoolConfig(max_active=3, max_idle=5), env_config=EnvConfig(kind="tool"), grader=NoGrader(),
        backend=backend,
    )  # fmt: skip
    await pool.release(await pool.acquire(make_task(0)))
    assert backend.reserved == [(3, 5)]  # leased, idle
    pool.set_max_active(10)
    pool.set_max_active(4)  # shrinking needs no room
    assert backend.reserved == [(3, 5), (10, 5)]
    await pool.close()


def test_the_soft_limit_is_raised_to_what_the_sandboxes_need() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = open_files_needed(100)
    assert need == FDS_BASE + 100 * FDS_PER_SANDBOX
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"hard RLIMIT_NOFILE {hard} is below {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (FDS_BASE, hard))
    try:
        assert reserve_open_files(100) == (need, need)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (need, hard)
        assert reserve_open_files(10)[0] == need  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_hard_limit_too_low_is_a_warning_and_a_clear_error() -> None:
    code = (
        "import errno, logging, resource\n"
        "from trialground.pool.backend import reserve_open_files\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300))\n"
        "print(reserve_open_files(100, required=2))\n"  # 2 fit in 300: no warning
        "print(reserve_open_files(100))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["(300,", f"{open_files_needed(100)})"] * 2
    assert out.stderr.count("may open 300 (RLIMIT_NOFILE hard limit)") == 1 and "ulimit -Hn" in out.stderr

    from trialground.sandbox.factory import host_limit_error

    err = host_limit_error(OSError(errno.EMFILE, "Too many open files"))
    assert err is not None and err.kind == "host_limit" and "RLIMIT_NOFILE soft" in str(err)
    enfile = host_limit_error(OSError(errno.ENFILE, "Too many open files in system"))
    assert enfile is not None and "fs.file-max" in str(enfile)
    assert host_limit_error(OSError(errno.ENOENT, "missing")) is None


def test_opening_sandboxes_past_the_descriptor_limit_is_a_clear_error() -> None:
    """Real sandboxes opened without a pool in a process whose soft RLIMIT_NOFILE is 64: the one that does
    not fit raises SandboxError kind host_limit naming the limit, and the ones open still run; the pool's
    `LocalBackend` then says the same (its sandboxes come from `open_sandbox`)."""
    code = (
        "import asyncio, resource\n"
        "from trialground.errors import SandboxError\n"
        "from trialground.pool.backend import LocalBackend\n"
        "from trialground.sandbox.base import SandboxConfig\n"
        "from trialground.sandbox.factory import open_sandbox\n"
        "from trialground.tasks.model import Task, VerifierSpec\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "async def main():\n"
        "    opened = []\n"
        "    try:\n"
        "        for _ in range(64):\n"
        "            opened.append(await open_sandbox())\n"
        "        print('no error')\n"
        "    except SandboxError as e:\n"
        "        ran = (await opened[0].exec(['echo', 'ok'])).stdout.strip()\n"
        "        print(len(opened), e.kind, 'RLIMIT_NOFILE soft 64' in str(e), ran)\n"
        "    spec = VerifierSpec(kind='code_tests')\n"
        "    task = Task(domain='code', prompt='p', files={'a.txt': 'a'}, verifier=spec)\n"
        "    try:\n"
        "        opened.append(await LocalBackend(SandboxConfig()).create(task))\n"
        "        print('pool: no error')\n"
        "    except SandboxError as e:\n"
        "        print(e.kind, 'ulimit -Hn' in str(e))\n"
        "    for sb in opened:\n"
        "        await sb.close()\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    opened, kind, names_limit, ran, pool_kind, pool_says_how = out.stdout.split()
    assert int(opened) >= 1 and kind == "host_limit" and names_limit == "True" and ran == "ok", out.stdout
    assert pool_kind == "host_limit" and pool_says_how == "True", out.stdout
