"""Attacks a hostile policy would try, each with its specific containment asserted from the host side."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import time
from pathlib import Path

import pytest
from seckit import LIMITS, ROOT_ONLY_REASON, host_processes_with, sandbox_host_pids, unenforced

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import seccomp
from trialground.sandbox.base import ExecStatus, Limits, Sandbox
from trialground.sandbox.factory import open_sandbox

pytestmark = pytest.mark.security
NR = seccomp.table()


def py(code: str) -> list[str]:
    return ["python3", "-I", "-S", "-c", code]


def syscall(name: str, *args: int) -> list[str]:
    """A program that makes the raw system call and prints `<return value> <errno>`."""
    call = f"libc.syscall({NR[name]}, {', '.join(map(str, args))})" if args else f"libc.syscall({NR[name]})"
    return py(f"import ctypes; libc = ctypes.CDLL(None, use_errno=True); print({call}, ctypes.get_errno())")


# -- resource exhaustion ---------------------------------------------------------------------------------
async def test_fork_bomb_hits_pids_limit(sandbox: Sandbox) -> None:
    r = await sandbox.exec(":(){ :|:& };: ; sleep 2", limits=LIMITS.model_copy(update={"wall_s": 4}))
    if unenforced(sandbox, "pids"):  # RLIMIT_NPROC instead of a pids cgroup: forks fail with EAGAIN
        assert "Resource temporarily unavailable" in r.stderr, r
        assert any("RLIMIT_NPROC" in line for line in r.limit_warnings)
    else:
        assert r.status in (ExecStatus.PIDS_LIMIT, ExecStatus.TIMEOUT)
        assert r.status is ExecStatus.PIDS_LIMIT or "fork" in r.stderr
    # nothing of it left: in the sandbox's own /proc only its PID 1 and the counting shell (counted inside,
    # which needs no privilege, not on the whole host, where other work comes and goes)
    inside = await sandbox.exec(["sh", "-c", "cd /proc && echo [0-9]*"])
    assert len(inside.stdout.split()) <= 2, inside
    assert (await sandbox.exec(["echo", "after"])).stdout == "after\n"


async def test_memory_bomb_is_killed(sandbox: Sandbox) -> None:
    r = await sandbox.exec(py("b = []\nwhile True: b.append(bytearray(16 << 20))"))
    if unenforced(sandbox, "memory"):  # RLIMIT_AS instead of a memory cgroup: allocation fails
        assert r.status is ExecStatus.NONZERO_EXIT and "MemoryError" in r.stderr, r
        assert any("RLIMIT_AS" in line for line in r.limit_warnings)
        return
    assert r.status is ExecStatus.MEMORY_LIMIT
    assert r.signal == 9 and r.wall_s < 5


async def test_disk_fill_stops_at_quota(sandbox: Sandbox) -> None:
    if unenforced(sandbox, "disk"):
        pytest.skip("the workspace quota is a tmpfs mount, which needs root (reported in limit_warnings)")
    r = await sandbox.exec("dd if=/dev/zero of=/workspace/big bs=1M count=200 2>&1; du -sm /workspace")
    assert "No space left" in r.stdout
    used_mb = int(r.stdout.strip().splitlines()[-1].split()[0])
    assert used_mb <= LIMITS.disk_mb


async def test_inode_fill_stops(sandbox: Sandbox) -> None:
    if unenforced(sandbox, "disk"):
        pytest.skip("the workspace's inode limit is a tmpfs mount, which needs root (in limit_warnings)")
    r = await sandbox.exec(
        py(
            "import os\nn = 0\ntry:\n    while n < 200000:\n"
            "        open(f'/workspace/f{n}', 'w').close(); n += 1\n"
            "except OSError as e:\n    print('stopped', n, e.errno)"
        )
    )
    assert r.stdout.startswith("stopped"), r
    assert int(r.stdout.split()[1]) < 200000 and int(r.stdout.split()[2]) == errno.ENOSPC


async def test_tmp_is_private_and_bounded(sandbox: Sandbox) -> None:
    r = await sandbox.exec("dd if=/dev/zero of=/tmp/big bs=1M count=100 2>&1; stat -c %s /tmp/big")
    assert "No space left" in r.stdout or r.status is ExecStatus.MEMORY_LIMIT
    assert r.status is ExecStatus.MEMORY_LIMIT or int(r.stdout.split()[-1]) <= LIMITS.disk_mb << 20
    assert not Path("/tmp/big").exists()


async def test_output_flood_without_newlines_is_cut_fast(sandbox: Sandbox) -> None:
    start = time.monotonic()
    r = await sandbox.exec(["head", "-c", "10G", "/dev/zero"])  # 10 GB, no newline
    assert r.status is ExecStatus.OUTPUT_LIMIT and r.stdout_truncated
    assert len(r.stdout) == LIMITS.output_bytes
    assert time.monotonic() - start < 5  # killed at the cap, not after 10 GB


async def test_invalid_utf8_flood_survives_as_replacement(sandbox: Sandbox) -> None:
    r = await sandbox.exec(py("import sys\nwhile True: sys.stdout.buffer.write(b'\\xff\\xfe\\xc3' * 4096)"))
    assert r.status is ExecStatus.OUTPUT_LIMIT
    assert set(r.stdout) == {"\ufffd"}


async def test_stderr_flood_is_cut(sandbox: Sandbox) -> None:
    r = await sandbox.exec("yes err 1>&2")
    assert r.status is ExecStatus.OUTPUT_LIMIT and r.stderr_truncated
    assert len(r.stderr.encode()) <= LIMITS.output_bytes


# -- processes that try to outlive the run ---------------------------------------------------------------
async def test_sigterm_ignoring_setsid_daemon_dies_with_the_run(sandbox: Sandbox) -> None:
    marker = "98765.4321"
    r = await sandbox.exec(f"setsid bash -c \"trap '' TERM HUP; exec sleep {marker}\" & disown; echo started")
    assert r.ok and r.stdout == "started\n"
    await asyncio.sleep(0.1)
    assert host_processes_with(f"sleep\x00{marker}") == []


async def test_double_forked_nohup_daemon_dies(sandbox: Sandbox) -> None:
    marker = "98765.1234"
    r = await sandbox.exec(
        py(
            f"import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execvp('sleep', ['sleep', '{marker}'])\n    os._exit(0)\nprint('parent done')"
        )
    )
    assert r.ok
    assert host_processes_with(f"sleep\x00{marker}") == []


async def test_timeout_kills_whole_tree(sandbox: Sandbox) -> None:
    marker = "98765.777"
    start = time.monotonic()
    r = await sandbox.exec(
        f"trap '' TERM; sleep {marker} & sleep {marker}", limits=LIMITS.model_copy(update={"wall_s": 0.5})
    )
    # Under the 5.5 s at which the host gives up on a supervisor that does not answer: the supervisor
    # itself killed the tree at the wall limit.
    assert r.status is ExecStatus.TIMEOUT and time.monotonic() - start < 5
    assert host_processes_with(f"sleep\x00{marker}") == []


async def test_kill_all_spares_host_and_supervisor(sandbox: Sandbox) -> None:
    sentinel = await asyncio.create_subprocess_exec("sleep", "30")
    try:
        r = await sandbox.exec("kill -9 -1; echo survived")
        assert r.exit_code in (0, None)
        assert sentinel.returncode is None  # the host process is alive
        assert (await sandbox.exec(["echo", "next"])).stdout == "next\n"  # and so is the sandbox
    finally:
        sentinel.kill()
        await sentinel.wait()


# -- reading what it must not ----------------------------------------------------------------------------
async def test_host_secrets_are_invisible(sandbox: Sandbox, host_secret: dict[str, Path]) -> None:
    for path in host_secret.values():
        r = await sandbox.exec(["cat", str(path)])
        assert r.exit_code != 0 and "SECRET" not in r.stdout
    r = await sandbox.exec("ls -a /root /tmp; cat /root/.bash_history /root/.ssh/* 2>&1")
    assert "tg-secret" not in r.stdout


async def test_etc_shadow_and_host_identity_files_absent(sandbox: Sandbox) -> None:
    r = await sandbox.exec("cat /etc/shadow /etc/gshadow /etc/sudoers 2>&1; ls /etc")
    assert "root:" not in r.stdout.split("passwd")[0] and "No such file" in r.stdout
    assert "shadow" not in r.stdout.split("\n", 3)[-1]


async def test_project_checkout_and_venv_invisible(sandbox: Sandbox) -> None:
    repo = Path(__file__).resolve().parents[2]
    r = await sandbox.exec(["ls", str(repo), str(repo / ".venv"), "/work", "/home"])
    assert r.exit_code != 0 and "pyproject.toml" not in r.stdout


async def test_proc_1_root_and_mem_stay_inside(sandbox: Sandbox, host_secret: dict[str, Path]) -> None:
    r = await sandbox.exec(
        f"cat /proc/1/root{host_secret['home']} 2>&1; ls /proc/1/root/; "
        "head -c1 /proc/1/mem 2>&1; ls /proc/1/fd 2>&1"
    )
    assert "SECRET" not in r.stdout
    assert "Permission denied" in r.stdout  # the supervisor's memory and descriptors are closed
    assert "work" not in r.stdout.split()


async def test_symlink_escape_refused_by_host_side_io(sandbox: Sandbox, host_secret: dict[str, Path]) -> None:
    await sandbox.exec(f"ln -s {host_secret['tmp']} leak; ln -s / root_link; ln -s /tmp tmp_link")
    with pytest.raises(SandboxError):
        await sandbox.read("leak")
    with pytest.raises(SandboxError):
        await sandbox.write("tmp_link/pwned", "x")
    with pytest.raises(SandboxError):
        await sandbox.read("../../etc/passwd")
    assert not Path("/tmp/pwned").exists()


async def test_cgroup_and_sys_invisible(sandbox: Sandbox) -> None:
    r = await sandbox.exec("ls /sys/fs/cgroup 2>&1; cat /proc/self/cgroup")
    assert "No such file" in r.stdout


# -- writing where it must not ---------------------------------------------------------------------------
async def test_writes_outside_workspace_fail(sandbox: Sandbox, tmp_path: Path) -> None:
    prefix = __import__("sys").base_prefix
    targets = [
        "/usr/pwned",
        "/etc/pwned",
        "/pwned",
        f"{prefix}/lib/pwned",
        "/dev/pwned",
        "/proc/sys/kernel/hostname",
    ]
    r = await sandbox.exec("; ".join(f"echo x > {t} && echo WROTE {t}" for t in targets))
    assert "WROTE" not in r.stdout
    for t in targets[:4]:
        assert not Path(t).exists()


async def test_sitecustomize_cannot_reach_the_runtime(sandbox: Sandbox) -> None:
    base = __import__("sys").base_prefix
    site = __import__("sysconfig").get_paths(vars={"base": base, "platbase": base})["purelib"]
    # makedirs first: a runtime without that directory must not make the attempt fail for another reason
    r = await sandbox.exec(
        py(f"import os\nos.makedirs('{site}', exist_ok=True)\nopen('{site}/sitecustomize.py', 'w')")
    )
    assert (r.exit_code == 1 and "Read-only file system" in r.stderr) or "Permission denied" in r.stderr, r


# -- network ---------------------------------------------------------------------------------------------
async def test_tcp_to_host_loopback_never_arrives(sandbox: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        r = await sandbox.exec(
            py(
                f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                "    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e)"
            )
        )
        assert "CONNECTED" not in r.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


async def test_dns_fails(sandbox: Sandbox) -> None:
    r = await sandbox.exec(
        py(
            "import socket\ntry:\n    print(socket.getaddrinfo('pypi.org', 443))\n"
            "except OSError as e:\n    print('failed', e)"
        )
    )
    assert r.stdout.startswith("failed")
    r = await sandbox.exec("cat /proc/net/dev")
    assert "eth" not in r.stdout and "ens" not in r.stdout


# -- refused system calls (seccomp) ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("ptrace", (0, 0, 0, 0)),  # PTRACE_TRACEME
        ("mount", (0, 0, 0, 0, 0)),
        ("unshare", (0x10000000,)),  # CLONE_NEWUSER
        ("keyctl", (0, 0)),
        ("bpf", (0, 0, 0)),
        ("io_uring_setup", (1, 0)),
        ("init_module", (0, 0, 0)),
        ("setns", (0, 0)),
        ("perf_event_open", (0, 0, -1, -1, 0)),
        ("reboot", (0, 0, 0, 0)),
    ],
)
async def test_dangerous_syscalls_refused(sandbox: Sandbox, name: str, args: tuple[int, ...]) -> None:
    r = await sandbox.exec(syscall(name, *args))
    assert r.ok, r
    ret, err = map(int, r.stdout.split())
    assert ret == -1 and err == errno.EPERM


async def test_unshare_command_and_new_user_namespace_refused(sandbox: Sandbox) -> None:
    r = await sandbox.exec("unshare -U -r id 2>&1; unshare -m true 2>&1; echo rc=$?")
    assert "uid=0" not in r.stdout and "rc=1" in r.stdout


async def test_tiocsti_refused(sandbox: Sandbox) -> None:
    r = await sandbox.exec(
        py(
            "import fcntl, termios, errno\ntry:\n"
            "    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('INJECTED')\n"
            "except OSError as e:\n    print(e.errno)"
        )
    )
    assert r.stdout.strip() == str(errno.EPERM)


async def test_cannot_forge_results_through_supervisor_fds(sandbox: Sandbox) -> None:
    r = await sandbox.exec(
        py(
            "import os\nfor fd in range(3, 12):\n    try:\n"
            "        f = os.open(f'/proc/1/fd/{fd}', os.O_WRONLY); os.write(f, b'X' * 64); print('FORGED')\n"
            "    except OSError: pass\nprint('done')"
        )
    )
    assert r.ok and r.stdout == "done\n"
    assert (await sandbox.exec(["echo", "clean"])).stdout == "clean\n"


# -- persistence across episodes -------------------------------------------------------------------------
async def test_no_persistence_after_restore(sandbox: Sandbox) -> None:
    await sandbox.write("task.py", "print('task')\n")
    clean = await sandbox.snapshot()
    marker = "98765.55"
    await sandbox.exec(
        f"echo 'echo OWNED' >> ~/.bashrc; echo 'print(\"OWNED\")' > sitecustomize.py; "
        f"echo hacked > task.py; mkdir -p .config /tmp/d; echo x > /tmp/d/stash; echo y > /dev/shm/stash; "
        f"(setsid sleep {marker} &)"
    )
    await sandbox.restore(clean)
    assert host_processes_with(f"sleep\x00{marker}") == []
    r = await sandbox.exec("ls -A; cat task.py; bash -ic true 2>/dev/null; python3 -c 'pass'")
    assert r.stdout == "task.py\nprint('task')\n", r
    assert "OWNED" not in r.stdout + r.stderr
    assert (await sandbox.exec("ls -A /tmp /dev/shm")).stdout.split() == ["/dev/shm:", "/tmp:"]


async def test_limits_are_not_self_raisable(sandbox: Sandbox) -> None:
    r = await sandbox.exec(
        "ulimit -t unlimited 2>&1 || echo refused; ulimit -f unlimited 2>&1 || echo refused"
    )
    assert r.stdout.count("refused") == 2


async def test_wall_limit_applies_with_cpu_spin(sandbox: Sandbox) -> None:
    r = await sandbox.exec(py("while True: pass"), limits=Limits(wall_s=30, cpu_s=1))
    # RLIMIT_CPU fires after 1 s of CPU, long before the 30 s wall clock even on a busy machine
    assert r.status is ExecStatus.TIMEOUT and r.wall_s < 20


# -- what the sandbox holds ------------------------------------------------------------------------------
async def test_no_capability_no_new_privileges_and_seccomp_everywhere(sandbox: Sandbox) -> None:
    r = await sandbox.exec("grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status /proc/1/status")
    lines = r.stdout.splitlines()
    assert len(lines) == 14, r  # 7 fields, for the command and for the supervisor
    for line in lines:
        field, value = line.split(":", 2)[1:]
        expected = {"NoNewPrivs": "1", "Seccomp": "2"}.get(field, "0000000000000000")
        assert value.strip() == expected, line


@pytest.mark.skipif(os.geteuid() != 0, reason=ROOT_ONLY_REASON)
async def test_sandbox_processes_hold_no_socket_or_host_file(sandbox: Sandbox) -> None:
    """Seen from the host: what the supervisor and the process waiting for the next command have open
    is their pipes and /dev/null; in particular no descriptor leads back to the launcher (the fork
    server's template socket, bubblewrap's info or seccomp descriptors)."""
    assert (await sandbox.exec(["true"])).ok
    await asyncio.sleep(0.1)  # the next command's process is forked after the answer
    inside = sandbox_host_pids(sandbox)
    assert len(inside) == 2, inside  # the supervisor and the next command's process
    for pid in inside:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            assert target.startswith("pipe:") or target == "/dev/null", (pid, fd, target)


async def test_commands_inherit_only_their_stdio(sandbox: Sandbox) -> None:
    """A descriptor left open in a command (a supervisor pipe, a launcher socket) would let it forge the
    host channel or reach the launcher: a command holds stdin, stdout and stderr only (3 is the listing)."""
    listing = "import os; print(sorted(os.listdir('/proc/self/fd')))"
    for cmd in (["python3", "-c", listing], ["python3", "-S", "-c", listing]):
        assert (await sandbox.exec(cmd)).stdout == "['0', '1', '2', '3']\n"
    assert (await sandbox.exec("ls /proc/self/fd")).stdout.split() == ["0", "1", "2", "3"]


async def test_sandboxes_cannot_see_each_other(sandbox: Sandbox) -> None:
    await sandbox.write("mine.txt", "private")
    root = sandbox.workspace.root  # type: ignore[attr-defined]
    async with await open_sandbox(sandbox.config) as other:  # type: ignore[attr-defined]
        assert (await other.exec(["ls", "-A", "/workspace"])).stdout == ""
        r = await other.exec(["cat", f"{root}/ws/mine.txt"])
        assert r.exit_code != 0 and "private" not in r.stdout
        r = await other.exec("ls /proc | grep -c '^[0-9]'")
        assert int(r.stdout) <= 4  # its own supervisor, shell, ls and grep at most
