"""Feasibility probe for issue 3's fresh-sandbox target: what a fork-server sandbox would cost.

Not a sandbox and not used by trialground. It measures the floor of a design where one pre-started,
unprivileged template interpreter makes every new sandbox itself, instead of a bubblewrap plus an
interpreter start per sandbox: for each request the template forks; the child unshares user, mount, pid,
network, IPC and UTS namespaces, maps uid 1000 to the template's uid, forks PID 1 of the new pid namespace,
which mounts a tmpfs root with read-only binds of /usr and /etc, the workspace, a private /tmp, three
device nodes and /proc, pivots into it, sets no_new_privs and runs the command (`pass`) as a fork of
itself. Side by side with a bare `python3 -I -S -c pass`, interleaved.

What a real one must add (not measured here): the seccomp filter, dropping capabilities inside the user
namespace, cgroup placement, the workspace overlay, stdio and the supervisor protocol, loopback, teardown.

    sudo .venv/bin/python benchmarks/fork_server_probe.py [--iterations 60]   # as root: needs setpriv
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PY = f"{sys.base_prefix}/bin/python3"
NOBODY = 65534
# CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
NAMESPACES = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
SYS_PIVOT_ROOT, MNT_DETACH, PR_SET_NO_NEW_PRIVS = 155, 2, 38  # x86_64


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(
    libc: ctypes.CDLL, src: str | None, target: str, fs: str | None, flags: int, data: str = ""
) -> None:
    args = (src and src.encode(), target.encode(), fs and fs.encode(), flags, data.encode() or None)
    _check(libc.mount(*args), f"mount {target}")


def _new_sandbox(libc: ctypes.CDLL, root: str, workspace: str) -> None:
    """In a fork of the template: namespaces, PID 1, the root file system, the command. Never returns."""
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(NAMESPACES), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"1000 {uid} 1"), ("gid_map", f"1000 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    pid = os.fork()  # PID 1 of the new pid namespace; it must mount /proc while the host's is visible
    if pid:
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status))
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for d in ("usr", "proc", "tmp", "workspace", "dev", "etc", "oldroot"):
        os.mkdir(f"{root}/{d}")
    for link, target in (("lib", "usr/lib"), ("lib64", "usr/lib64"), ("bin", "usr/bin")):
        os.symlink(target, f"{root}/{link}")
    for src in ("/usr", "/etc"):
        _mount(libc, src, f"{root}{src}", None, MS_BIND | MS_REC)
        _mount(libc, None, f"{root}{src}", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount(libc, workspace, f"{root}/workspace", None, MS_BIND)
    _mount(libc, "tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m")
    for dev in ("null", "zero", "urandom"):
        open(f"{root}/dev/{dev}", "w").close()
        _mount(libc, f"/dev/{dev}", f"{root}/dev/{dev}", None, MS_BIND)
    _mount(libc, "proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV)
    os.chdir(root)
    _check(libc.syscall(SYS_PIVOT_ROOT, b".", b"oldroot"), "pivot_root")
    _check(libc.umount2(b"/oldroot", MNT_DETACH), "umount the old root")
    os.rmdir("/oldroot")
    os.chdir("/workspace")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    command = os.fork()  # the command: a fork of the started interpreter
    if command == 0:
        exec(compile("pass", "<command>", "exec"))
        os._exit(0)
    _, status = os.waitpid(command, 0)
    os._exit(os.waitstatus_to_exitcode(status))


def template(requests: int, replies: int, root: str) -> None:
    """The pre-started template: one new sandbox per workspace path read from `requests`."""
    libc = _libc()
    os.write(replies, b"R")
    while request := os.read(requests, 4096):
        pid = os.fork()
        if pid == 0:
            try:
                _new_sandbox(libc, root, request.decode())
            except BaseException as exc:
                os.write(2, f"probe sandbox: {exc}\n".encode())
                os._exit(99)
        _, status = os.waitpid(pid, 0)
        os.write(replies, str(os.waitstatus_to_exitcode(status)).encode().ljust(8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--template", nargs=3, help=argparse.SUPPRESS)  # internal: the template's role
    args = ap.parse_args()
    if args.template:
        template(int(args.template[0]), int(args.template[1]), args.template[2])
        return
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        sys.exit("run as root with setpriv installed (the template runs as nobody)")
    base = tempfile.mkdtemp(prefix="fork_server_probe_")
    os.chmod(base, 0o755)
    root, workspace = os.path.join(base, "root"), os.path.join(base, "ws")
    os.mkdir(root)
    os.mkdir(workspace)
    os.chown(workspace, NOBODY, NOBODY)
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    argv = [PY, "-I", "-S", os.path.abspath(__file__), "--template", str(req_r), str(rep_w), root]
    setpriv = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    proc = subprocess.Popen(["setpriv", *setpriv, *argv], pass_fds=(req_r, rep_w))
    os.close(req_r)
    os.close(rep_w)
    try:
        if os.read(rep_r, 1) != b"R":
            sys.exit("the template did not start")
        bare, probe = [], []
        for _ in range(args.iterations):
            t = time.perf_counter()
            subprocess.run([PY, "-I", "-S", "-c", "pass"], check=True)
            bare.append(time.perf_counter() - t)
            t = time.perf_counter()
            os.write(req_w, workspace.encode())
            status = os.read(rep_r, 8).strip()
            probe.append(time.perf_counter() - t)
            if status != b"0":
                sys.exit(f"a probe sandbox failed (status {status.decode()})")
    finally:
        os.close(req_w)
        proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)
    b, p = statistics.median(bare) * 1000, statistics.median(probe) * 1000
    print(f"bare python3 -I -S -c pass: {b:.1f} ms (median of {args.iterations})")
    print(f"fork-server probe, new sandbox + command: {p:.1f} ms = {p / b:.2f}x bare")


if __name__ == "__main__":
    main()
