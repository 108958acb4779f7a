"""exec / write / read on a real bubblewrap sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trialground.errors import SandboxError
from trialground.sandbox.base import ExecStatus, Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import SyncSandbox, open_sandbox


async def test_argv_script_exit_codes(sandbox: Sandbox) -> None:
    r = await sandbox.exec(["echo", "hello"])
    assert r.status is ExecStatus.OK and r.exit_code == 0 and r.stdout == "hello\n"
    r = await sandbox.exec("echo out; echo err >&2; exit 3")
    assert r.status is ExecStatus.NONZERO_EXIT and r.exit_code == 3
    assert (r.stdout, r.stderr) == ("out\n", "err\n")
    r = await sandbox.exec(["no-such-command"])
    assert r.exit_code == 127 and "not found" in r.stderr


async def test_stdin_env_cwd(sandbox: Sandbox) -> None:
    await sandbox.write("sub/dir/file.txt", "x")
    r = await sandbox.exec("cat; echo $FOO; pwd", stdin="in\n", env={"FOO": "bar"}, cwd="sub/dir")
    assert r.stdout == "in\nbar\n/workspace/sub/dir\n"
    r = await sandbox.exec(["true"], cwd="no/such/dir")
    assert r.exit_code == 126 and "working directory" in r.stderr
    big = b"z" * 300_000
    r = await sandbox.exec(["wc", "-c"], stdin=big)
    assert r.stdout.strip() == str(len(big))


async def test_identity_and_view(sandbox: Sandbox) -> None:
    r = await sandbox.exec("id -u; hostname; ls /; echo $HOME")
    lines = r.stdout.split()
    assert lines[0] == "1000" and lines[1] == "sandbox"
    assert "workspace" in lines and "work" not in lines and lines[-1] == "/workspace"


async def test_write_read_roundtrip_and_bad_paths(sandbox: Sandbox) -> None:
    await sandbox.write("/workspace/a/b.bin", b"\x00\xff")
    assert await sandbox.read("a/b.bin") == b"\x00\xff"
    await sandbox.exec("echo made > made.txt")
    assert await sandbox.read("/workspace/made.txt") == b"made\n"
    with pytest.raises(FileNotFoundError):
        await sandbox.read("missing.txt")
    for bad in ("/etc/passwd", "../x", "a/../../x"):
        with pytest.raises(SandboxError):
            await sandbox.write(bad, "x")
    r = await sandbox.exec("echo new > a/b.bin && cat a/b.bin")  # the sandbox can change host-written files
    assert r.stdout == "new\n"


async def test_output_cut_and_invalid_utf8(sandbox: Sandbox) -> None:
    lim = Limits(output_bytes=2048)
    r = await sandbox.exec(
        ["python3", "-I", "-S", "-c", "import sys; sys.stdout.buffer.write(b'ab\\xff' * 10)"]
    )
    assert r.ok and r.stdout == "ab\ufffd" * 10
    r = await sandbox.exec(["bash", "-c", "head -c 5000 /dev/zero | tr '\\0' x"], limits=lim)
    assert r.status is ExecStatus.OUTPUT_LIMIT and r.stdout == "x" * 2048 and r.stdout_truncated


async def test_timeout_and_cpu_reported(sandbox: Sandbox) -> None:
    r = await sandbox.exec(["sleep", "5"], limits=Limits(wall_s=0.3))
    assert r.status is ExecStatus.TIMEOUT and 0.3 <= r.wall_s < 4.5  # killed, not the 5 s sleep's end
    r = await sandbox.exec(["python3", "-I", "-S", "-c", "sum(range(3_000_000))"])
    assert r.ok and r.cpu_s > 0 and r.peak_memory_mb > 1


async def test_file_size_limit(sandbox: Sandbox) -> None:
    r = await sandbox.exec("exec head -c 3M /dev/zero > f", limits=Limits(file_size_mb=1))
    assert r.status is ExecStatus.KILLED and r.signal == 25  # SIGXFSZ
    assert int((await sandbox.exec("stat -c %s f")).stdout) <= 1 << 20


async def test_python_fast_path_behaves_like_python(sandbox: Sandbox) -> None:
    await sandbox.write("solution.py", "def f(x):\n    return x + 1\n")
    await sandbox.write("test_solution.py", "from solution import f\n\ndef test_f():\n    assert f(1) == 2\n")
    await sandbox.write("prog.py", "import sys\nprint(sys.argv, __name__)\nsys.exit(4)\n")
    r = await sandbox.exec(["python3", "-c", "import solution, sys; print(solution.f(1), sys.argv)", "a"])
    assert r.ok and r.stdout == "2 ['-c', 'a']\n"
    r = await sandbox.exec(["python3", "prog.py", "x"])
    assert r.exit_code == 4 and r.stdout == "['prog.py', 'x'] __main__\n"
    r = await sandbox.exec(["python3", "-I", "-S", "-c", "raise ValueError('boom')"])
    assert r.exit_code == 1 and "ValueError: boom" in r.stderr
    r = await sandbox.exec(["python3", "-I", "-S", "-c", "print(input()[::-1])"], stdin="abc\n")
    assert r.stdout == "cba\n"
    r = await sandbox.exec(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_solution.py"])
    assert r.ok and "1 passed" in r.stdout, r


async def test_python_fast_path_can_be_disabled() -> None:
    async with await open_sandbox(SandboxConfig(python_fast=False)) as sb:
        r = await sb.exec(["python3", "-I", "-S", "-c", "import sys; print(sys.flags.isolated)"])
        assert r.stdout == "1\n"


async def test_cold_mode_restarts_per_exec() -> None:
    async with await open_sandbox(SandboxConfig(warm=False), {"f": "1"}) as sb:
        assert (await sb.exec(["cat", "f"])).stdout == "1"
        assert (await sb.exec("echo 2 > f; cat f")).stdout == "2\n"


def test_sync_facade() -> None:
    with SyncSandbox(SandboxConfig(), {"x.txt": "sync"}) as sb:
        assert sb.exec(["cat", "x.txt"]).stdout == "sync"
        sb.write("y.txt", "y")
        assert sb.read("y.txt") == b"y"


async def test_closed_sandbox_raises(sandbox: Sandbox) -> None:
    await sandbox.close()
    with pytest.raises(SandboxError):
        await sandbox.exec(["true"])


async def test_missing_rootfs_is_a_sandbox_error() -> None:
    with pytest.raises(SandboxError):
        await open_sandbox(SandboxConfig(rootfs="/no/such/rootfs"))


@pytest.fixture
def rootfs() -> Iterator[Path]:
    """A minimal root filesystem directory: /usr (read-only bind of the host's), the usual links, /etc.
    World-traversable: on a root host the sandbox runs as an unprivileged uid that must reach it."""
    if os.geteuid() != 0:
        pytest.skip("building a rootfs with a bind mount needs root")
    root = Path(tempfile.mkdtemp(prefix="tg-rootfs-"))
    root.chmod(0o755)
    (root / "usr").mkdir()
    (root / "etc").mkdir()
    (root / "etc" / "marker").write_text("from-the-image\n")
    for name in ("bin", "lib", "lib64", "sbin"):
        (root / name).symlink_to(f"usr/{name}")
    subprocess.run(["mount", "--bind", "-o", "ro", "/usr", str(root / "usr")], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root / "usr")], check=True)
        shutil.rmtree(root)


async def test_rootfs_directory_replaces_the_host_view(rootfs: Path) -> None:
    async with await open_sandbox(SandboxConfig(rootfs=str(rootfs)), {"in.txt": "ws"}) as sb:
        r = await sb.exec("cat /etc/marker in.txt; echo; ls /; python3 -c 'import sys; print(sys.prefix)'")
        assert r.ok, r
        out = r.stdout.split()
        assert out[:2] == ["from-the-image", "ws"] and "root" not in out and out[-1] == "/usr"


async def test_fast_path_only_for_the_configured_interpreter(sandbox: Sandbox) -> None:
    code = "import sys; print(sys.version.split()[0], sys.flags.isolated)"
    own = await sandbox.exec(["python3", "-c", code])
    assert own.ok and own.stdout.split()[1] == "1"  # forked from the supervisor (started with -I)
    if Path("/usr/bin/python3").exists():
        system = await sandbox.exec(["/usr/bin/python3", "-c", code])
        assert system.ok and system.stdout.split()[1] == "0"  # a different interpreter really runs


async def test_cancelled_exec_leaves_a_working_sandbox(sandbox: Sandbox) -> None:
    task = asyncio.create_task(sandbox.exec("yes flood", limits=Limits(output_bytes=10**9, wall_s=30)))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=20)
    r = await sandbox.exec(["echo", "after"])
    assert r.ok and r.stdout == "after\n"


async def test_site_preloaded_after_first_use_keeps_semantics(sandbox: Sandbox) -> None:
    show = "import sys; print(any(p.endswith('site-packages') for p in sys.path), 'site' in sys.modules)"
    for _ in range(3):  # first run imports site itself; later ones find it preloaded by the supervisor
        assert (await sandbox.exec(["python3", "-c", show])).stdout == "True True\n"
        r = await sandbox.exec(["python3", "-I", "-S", "-c", show.replace(", 'site' in sys.modules", "")])
        assert r.stdout == "False\n"


@pytest.mark.parametrize("launcher", ["bwrap", "forkserver"])
async def test_warm_python_loads_site_in_the_supervisor_without_a_command(launcher: str) -> None:
    """`warm_python` (what `ReadyPool` does): the next Python command's process is forked from an interpreter
    that already ran `site`, so even a -S command finds the module, while its sys.path stays the -S one."""
    probe = ["python3", "-S", "-c", "import sys; print('site' in sys.modules, sys.path)"]
    show = "import sys; print(any(p.endswith('site-packages') for p in sys.path))"
    async with await open_sandbox(SandboxConfig(prewarm=0, launcher=launcher)) as cold:
        before = (await cold.exec(probe)).stdout
    async with await open_sandbox(SandboxConfig(prewarm=0, launcher=launcher)) as sb:
        await sb.warm_python()
        after = (await sb.exec(probe)).stdout
        assert (await sb.exec(["python3", "-c", show])).stdout == "True\n"
        ls = await sb.exec(["ls", "-A", "/workspace", "/tmp"])
        assert ls.ok and ls.stdout.split() == ["/tmp:", "/workspace:"], ls.stdout  # it wrote nothing
    assert before.startswith("False [") and after.startswith("True [")
    assert before.split(" ", 1)[1] == after.split(" ", 1)[1]  # the -S sys.path either way


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it."""
    parents = {}
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, IndexError):
            if entry.isdigit():
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {pid}, [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found.update(children)
        frontier = children
    return found


@pytest.mark.parametrize(("launcher", "setpriv"), [("bwrap", True), ("bwrap", False), ("forkserver", True)])
async def test_every_sandbox_process_is_in_its_cgroup(
    monkeypatch: pytest.MonkeyPatch, launcher: str, setpriv: bool
) -> None:
    from trialground.sandbox.backends.bwrap import spawn
    from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox

    if not setpriv:
        monkeypatch.setattr(spawn, "SETPRIV", None)  # the preexec fallback
    async with await open_sandbox(SandboxConfig(prewarm=0, launcher=launcher)) as sb:
        assert isinstance(sb, BwrapSandbox)
        if sb.cgroup is None:
            pytest.skip("no cgroup here (cgroup.hierarchy() says why: not root on v1, no delegated v2)")
        r = await sb.exec("sleep 0.2 & sleep 0.2 & cat /proc/self/status | grep -E '^Uid'; wait")
        assert r.stdout.split()[1] == "1000"
        await asyncio.sleep(0.1)  # the supervisor forks the next command's process after answering
        tree = descendants(sb._proc.pid) if sb._proc else set()
        # bubblewrap (its launcher only), the supervisor, the process waiting for the next command
        assert len(tree) == (3 if launcher == "bwrap" else 2)
        assert tree == set(sb.cgroup.pids())
        forks = "import os, time\nfor i in range(20):\n    if os.fork() == 0:\n"
        forks += "        time.sleep(0.5)\n        os._exit(0)"
        limited = await sb.exec(["python3", "-I", "-S", "-c", forks], limits=Limits(pids=8))
        assert limited.status is ExecStatus.PIDS_LIMIT


ORPHANS = """
import os, time
def others():  # processes besides PID 1 and this one: the orphans not yet reaped, zombies included
    return sum(p.isdigit() and int(p) not in (1, os.getpid()) for p in os.listdir('/proc'))
for rnd in range(3):
    for _ in range(20):
        if os.fork() == 0:  # a detached grandchild that exits at once: an orphan of PID 1
            if os.fork() == 0:
                os._exit(0)
            os._exit(0)
        os.wait()
    for _ in range(2000):  # PID 1 must reap them while this command still runs
        if others() == 0:
            break
        time.sleep(0.005)
    print(rnd, others(), flush=True)
"""


async def test_orphans_are_reaped_while_the_command_runs(sandbox: Sandbox) -> None:
    # 60 orphans against a 32-process limit: they fit only when each round's zombies are gone
    limits = Limits(wall_s=60, cpu_s=60, memory_mb=128, pids=32)
    r = await sandbox.exec(["python3", "-c", ORPHANS], limits=limits)
    assert r.status is ExecStatus.OK and r.exit_code == 0, (r.status, r.stderr)  # no fork was refused
    assert r.stdout.split("\n")[:3] == ["0 0", "1 0", "2 0"], r.stdout


@pytest.mark.parametrize("launcher", ["bwrap", "forkserver"])
async def test_a_stopped_command_is_continued_not_left_to_its_wall_limit(launcher: str) -> None:
    """`kill -STOP -1` from inside stops every process but PID 1 and the caller: a command whose processes
    stop (here the shell stops itself, and a Python child stops its parent) would otherwise hold its
    sandbox until the wall limit. PID 1 continues them; the command ends on its own, with its output."""
    stop_parent = "import os, signal; os.kill(os.getppid(), signal.SIGSTOP)"
    limits = Limits(wall_s=120, cpu_s=60, memory_mb=256, pids=32)
    async with await open_sandbox(SandboxConfig(launcher=launcher)) as sb:
        r = await sb.exec("kill -STOP $$; echo resumed", limits=limits)
        assert (r.status, r.stdout) == (ExecStatus.OK, "resumed\n"), (r.status, r.stderr)
        r = await sb.exec(f'python3 -c "{stop_parent}"; echo resumed again', limits=limits)
        assert (r.status, r.stdout) == (ExecStatus.OK, "resumed again\n"), (r.status, r.stderr)
