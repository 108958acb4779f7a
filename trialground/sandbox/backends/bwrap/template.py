"""The fork server's template: a started interpreter that makes each new sandbox by forking itself.

Runs OUTSIDE any sandbox, under the sandbox's Python runtime at its real path (so modules it imported
are where the sandbox's view of the runtime shows them) with a cleared environment, so it imports the
standard library only. It runs as we do: as root on a root host, where each sandbox's first step is to
drop to the unprivileged sandbox uid (65534), before it makes any namespace. The host (`forkserver.py`)
starts it once per process and runtime, hands it the supervisor's module (`supervisor`) and its fixed
settings, then sends one message per sandbox on a unix socket: the sandbox's settings plus four
descriptors (the supervisor's stdin, stdout and stderr pipes and an info socket).

For each message the template forks an *intermediate*. That process (after that drop) unshares the user,
mount, PID, IPC, UTS and network namespaces (a networked sandbox too: the host attaches its uplink to
that namespace, `netns.py`, before its go), maps the sandbox uid 1000 to its own uid, and forks the
sandbox's PID 1; it sends the host a pidfd of PID 1 on the info socket and then only waits for PID 1 to
end. PID 1 builds the sandbox's root file system exactly as bubblewrap does for the
`bwrap` launcher (`bwrap_cmd.bwrap_argv`): a tmpfs root, read-only /usr (+ /lib*, /bin, /sbin), the prepared
/etc view and the runtime view, /proc (its sys, sysrq-trigger, irq and bus read-only), a small /dev of its
own (with the IPC namespace's mqueue file system at /dev/mqueue), private size-limited /tmp and /dev/shm,
the workspace at /workspace; everything but those three and the queues read-only; the host's root
detached. It sets the hostname, brings the loopback device up, waits for the
host's go (sent once PID 1 is in its cgroup and, for a networked sandbox, its uplink is attached), enters
a new cgroup namespace, drops every capability (bounding, ambient, permitted, effective, inheritable),
sets no_new_privs, loads the seccomp filter, closes every descriptor but its three pipes, and becomes the
supervisor (`supervisor.main`). No code of the sandbox's runs before all of that is done: the supervisor
forks commands only after it.

The template never runs anything of a sandbox's and holds nothing secret: every sandbox is a copy of its
memory (the supervisor's code, a cleared environment, the settings of earlier sandboxes: host paths of
workspaces that the sandbox cannot reach). One consequence of forking: sandboxes of one template share its
address-space layout and hash seed (an exec'd program gets its own, as with the `bwrap` launcher).
"""

import contextlib
import ctypes
import fcntl
import gc
import marshal
import os
import signal
import socket
import struct

import supervisor  # type: ignore[import-not-found]  # handed over by the host as a module

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_SLAVE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 19, 1 << 21
MNT_DETACH = 2
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY = -100, 0x1000, 0x8000, 4
OPEN_TREE_FLAGS = 1 | os.O_CLOEXEC | AT_RECURSIVE  # OPEN_TREE_CLONE: a detached copy of the whole tree
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_SECCOMP = 1, 4, 24, 22
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
SECCOMP_MODE_FILTER, LINUX_CAPABILITY_VERSION_3 = 2, 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
# statvfs flags -> the mount flags a bind remount inside a user namespace must keep (the kernel refuses to
# clear them: they are locked to what the host mounted)
KEPT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME),
)  # fmt: skip
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("core", "/proc/kcore"), ("ptmx", "pts/ptmx"))  # fmt: skip
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
LIBC.syscall.restype = ctypes.c_long
SETTINGS: dict = {}  # fixed for the template's life: see `serve`


class SetupError(Exception):
    """A step of making the sandbox failed; the message says which."""


class _SockFilter(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _mount(source: "str | None", target: str, fstype: "str | None", flags: int, data: str = "") -> None:
    args = (
        source and source.encode(),
        target.encode(),
        fstype and fstype.encode(),
        flags,
        data.encode() or None,
    )
    _check(LIBC.mount(*args), f"mount {fstype or 'bind'} {source or ''} on {target}")


def _kept_flags(path: str) -> int:
    found = os.statvfs(path).f_flag
    return sum(ms for st, ms in KEPT_FLAGS if found & st)


def _bind(source: str, target: str, devices: bool = False) -> None:
    """bubblewrap's writable bind: recursive, then remounted nosuid (and nodev unless `devices`)."""
    _mount(source, target, None, MS_BIND | MS_REC)
    _remount(target, MS_NOSUID | (0 if devices else MS_NODEV))


def _bind_workspace(path: bytearray, target: str) -> None:
    """Bind the workspace (`path`: its host path, NUL-terminated) at `target`, then wipe `path`: the
    supervisor and every command are forks of this process, and the host path is none of their business."""
    source = (ctypes.c_char * len(path)).from_buffer(path)
    try:
        _check(LIBC.mount(source, target.encode(), None, MS_BIND | MS_REC, None), "bind the workspace")
    finally:
        del source
        path[:] = bytes(len(path))
    _remount(target, MS_NOSUID | MS_NODEV)


def _bind_readonly(source: str, target: str) -> None:
    """A recursive bind made read-only, nosuid and nodev all the way down, every mount below `source`
    included, in one call (`mount_setattr` with AT_RECURSIVE) rather than by reading the mount table: that
    table lists the host's mounts (other sandboxes' workspaces among them), and whatever this process reads
    stays in the memory that every command of the sandbox inherits."""
    tree = LIBC.syscall(SETTINGS["sys_open_tree"], AT_FDCWD, source.encode(), OPEN_TREE_FLAGS)
    if tree < 0:
        _check(-1, f"open_tree {source}")
    try:
        attr = struct.pack("QQQQ", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
        set_flags = SETTINGS["sys_mount_setattr"]
        _check(
            LIBC.syscall(set_flags, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE, attr, ctypes.c_size_t(32)),
            f"read-only {target}",
        )
        moved = LIBC.syscall(
            SETTINGS["sys_move_mount"], tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY
        )
        _check(moved, f"move_mount {source} to {target}")
    finally:
        os.close(tree)


def _remount(target: str, flags: int) -> None:
    _mount(None, target, None, MS_BIND | MS_REMOUNT | flags | _kept_flags(target))


def _makedirs(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _build_root(spec: dict, workspace: bytearray) -> None:
    """Mount the sandbox's file system at SETTINGS["newroot"] and pivot into it (in PID 1)."""
    root = SETTINGS["newroot"]
    # Host mounts still reach us (workspace restores), ours never leave.
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for kind, name, value in SETTINGS["top"]:  # ("link", "/lib", "usr/lib") or ("dir", "/usr", "/usr")
        if kind == "link":
            os.symlink(value, root + name)
        else:
            _makedirs(root + name)
            _bind_readonly(value, root + name)
    for source, target in spec["views"]:  # /etc and the runtime, read-only
        _makedirs(root + target)
        _bind_readonly(source, root + target)
    for name in ("proc", "dev", "tmp", "workspace", "oldroot"):
        _makedirs(f"{root}/{name}")
    _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_COVERED:
        path = f"{root}/proc/{name}"
        if os.path.exists(path):
            _bind_readonly(path, path)
    _build_dev(f"{root}/dev", spec["tmp_bytes"])
    _mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,size={spec['tmp_bytes']}")
    _bind_workspace(workspace, f"{root}/workspace")
    _remount(f"{root}/dev", MS_NOSUID | MS_NODEV | MS_RDONLY)
    os.chdir(root)
    _check(LIBC.syscall(SETTINGS["sys_pivot_root"], b".", b"oldroot"), "pivot_root")
    os.chdir("/")
    _check(LIBC.umount2(b"/oldroot", MNT_DETACH), "detach the host's root")
    os.rmdir("/oldroot")
    _remount("/", MS_NOSUID | MS_NODEV | MS_RDONLY)


def _build_dev(dev: str, shm_bytes: int) -> None:
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            os.close(os.open(f"{dev}/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
            _bind(f"/dev/{name}", f"{dev}/{name}", devices=True)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{dev}/{name}")
    for name in ("shm", "pts", "mqueue"):
        os.mkdir(f"{dev}/{name}", 0o755)
    # The POSIX message queues of the sandbox's IPC namespace, listed there so a reset can remove them all.
    _mount("mqueue", f"{dev}/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,size={shm_bytes}")
    _mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _lock_down() -> None:
    """No capabilities (in any set), no new privileges, and the seccomp filter: what bubblewrap's
    `--cap-drop ALL` and `--seccomp` leave a sandbox with."""
    for cap in range(SETTINGS["cap_last"] + 1):
        _check(LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap} from the bounding set")
    _check(LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = struct.pack("II", LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two (effective, permitted, inheritable) triples, all zero
    _check(LIBC.syscall(SETTINGS["sys_capset"], header, data), "drop capabilities")
    _check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    program = SETTINGS["seccomp"]
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFilter(len(program) // 8, ctypes.addressof(buf))
    _check(
        LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "load the seccomp filter"
    )


def _pid1(spec: dict, workspace: bytearray, stdin: int, stdout: int, stderr: int) -> None:
    """PID 1 of the new sandbox: build it, lock it down, run the supervisor. Never returns."""
    os.setsid()
    _check(LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0), "die with the parent")
    _build_root(spec, workspace)
    _check(LIBC.sethostname(b"sandbox", 7), "set the hostname")
    _loopback_up()
    if os.read(stdin, 1) != b"g":  # the host's go: in the sandbox's cgroup, its uplink (if any) attached
        os._exit(0)
    if LIBC.unshare(CLONE_NEWCGROUP) != 0:
        pass  # best effort, as bubblewrap's --unshare-cgroup-try: /proc/self/cgroup then shows host paths
    _lock_down()
    for target, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, target)
    os.closerange(3, SETTINGS["max_fd"])
    supervisor.main()
    os._exit(0)


def _intermediate(spec: dict, workspace: bytearray, fds: "list[int]", template_pid: int) -> None:
    """A fork of the template: new namespaces, then PID 1 of the PID namespace. Never returns."""
    stdin, stdout, stderr, info = fds
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    uid = SETTINGS["sandbox_uid"]
    if uid is not None and os.getuid() != uid:  # a root template: the sandbox runs as `uid` on the host
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # every capability of ours is gone with root
        # A changed uid makes us non-dumpable, and /proc/self (uid_map) root's: it is ours again.
        _check(LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "become dumpable")
    _check(LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0), "die with the template")
    if os.getppid() != template_pid:
        os._exit(1)
    uid, gid = os.getuid(), os.getgid()
    # Always a network namespace of its own: a networked sandbox gets an uplink into it, never the host's.
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET
    _check(LIBC.unshare(flags), "unshare the namespaces")
    inner = SETTINGS["inner_uid"]
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{inner} {uid} 1"),
        ("gid_map", f"{inner} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    pid = os.fork()
    if pid == 0:
        os.close(info)
        _run_reporting(stderr, _pid1, spec, workspace, stdin, stdout, stderr)
    workspace[:] = bytes(len(workspace))
    pidfd = os.pidfd_open(pid)
    with socket.socket(fileno=info) as sock:
        socket.send_fds(sock, [marshal.dumps(pid)], [pidfd])
    # From here on we only wait for PID 1, holding every capability of the sandbox's user namespace: give
    # them up, and every descriptor, and become unreadable through /proc.
    os.closerange(0, SETTINGS["max_fd"])
    LIBC.syscall(SETTINGS["sys_capset"], struct.pack("II", LINUX_CAPABILITY_VERSION_3, 0), bytes(24))
    LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    os._exit(0)


def _run_reporting(stderr: int, step, *args) -> None:  # type: ignore[no-untyped-def]
    """Run `step` (which never returns); a failure is written to the sandbox's stderr pipe, the process
    exits 1 and the host reports it when the sandbox does not answer."""
    try:
        step(*args)
    except BaseException as exc:  # everything: this process must never return into the template's loop
        try:
            os.write(stderr, f"sandbox setup failed: {exc}\n".encode())
        finally:
            os._exit(1)
    os._exit(1)


def serve(sock: socket.socket) -> None:
    """The template's loop: one forked sandbox per message; returns when the host closes the socket.

    A message is the length of the marshalled settings (4 bytes), the settings, then the workspace's host
    path. It is read into one reused buffer and decoded only in the fork it is for, and the buffer is wiped
    right after the fork: the template's memory, which every later sandbox inherits, keeps nothing of an
    earlier sandbox's (its workspace's host path); the path itself is wiped once bound."""
    template_pid = os.getpid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # intermediates are reaped by the kernel
    buf = bytearray(1 << 16)
    fd_space = socket.CMSG_SPACE(4 * struct.calcsize("i"))
    while True:
        try:
            size, ancillary, _flags, _addr = sock.recvmsg_into([buf], fd_space)
        except InterruptedError:
            continue
        if not size:
            return
        fds: list[int] = []
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4])
        if len(fds) == 4:
            pid = os.fork()
            if pid == 0:
                sock.close()
                head = int.from_bytes(buf[:4], "big")
                spec = marshal.loads(bytes(buf[4 : 4 + head]))
                # Its own copy (NUL-terminated), wiped once bound (`_bind_workspace`); made without any
                # temporary copy, and never resized (a resize leaves the old bytes behind in freed memory).
                workspace = bytearray(size - 4 - head + 1)
                workspace[:-1] = memoryview(buf)[4 + head : size]
                buf[:size] = bytes(size)
                _run_reporting(fds[2], _intermediate, spec, workspace, fds, template_pid)
        buf[:size] = bytes(size)
        for fd in fds:
            os.close(fd)


def main(sock_fd: int) -> None:
    """Entry point: `sock_fd` is the host's socket; its first message carries SETTINGS."""
    # Ctrl-C at a terminal reaches the whole foreground process group: it is the host's to act on, and the
    # template ends when the host closes its socket (the supervisor sets its own dispositions).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=sock_fd)
    SETTINGS.update(marshal.loads(sock.recv(1 << 20)))
    SETTINGS["max_fd"] = os.sysconf("SC_OPEN_MAX")
    os.chdir("/")
    # What every sandbox's supervisor would import or fault in on its own, done once here (a sandbox being
    # built runs as the sandbox uid, which may not read the runtime at its real path until the runtime's
    # view is its root).
    import runpy  # noqa: F401

    compile("pass", "<warm-up>", "exec")
    gc.freeze()  # a collection in a sandbox being built then leaves the template's objects (pages) alone
    serve(sock)
