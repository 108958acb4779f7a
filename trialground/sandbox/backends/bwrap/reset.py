"""Giving a sandbox back at its snapshot: runs INSIDE the sandbox, standard library only.

A sandbox handed to its next occupant (an episode of the environment pool, a grading) gets new namespaces
and a new workspace filesystem (`Sandbox.hand_over`): their counters (the next pid, IPC ids, inode numbers,
network statistics) cannot be set back from inside, and an occupant can set them to any value. A restore
within one occupant (a rollback), and the members of one grading batch, keep the namespaces: the workspace
comes back from its snapshot on the host, and everything else an earlier command could leave lives in the
sandbox's own namespaces and is removed here, from inside:

- processes: every command's processes are killed when it ends (the supervisor); what is left is listed;
- files in the private scratch directories (/tmp, /dev/shm): emptied (`wipe`), and what lives on those
  directories themselves (extended attributes, ACLs, mode, timestamps: state an occupant could read back)
  set back as the launchers make them (`restore_top`);
- SysV shared memory segments, message queues and semaphore sets of the sandbox's IPC namespace (they
  outlive every process and stay charged to the sandbox's memory): removed, found in /proc/sysvipc;
- POSIX message queues of that namespace: unlinked, found in its mqueue file system at /dev/mqueue, which
  both launchers mount for this.

`reset` does all of that and then takes the inventory again: what it returns is everything still there,
one line each, and an empty list is the only answer that lets the sandbox be reused. Whatever cannot be
listed (no /proc/sysvipc, no /dev/mqueue) is reported as left, so a host that cannot prove a sandbox clean
never reuses it (the host then starts the sandbox afresh: new namespaces). Mounts need no step: a sandbox
holds no capability and its seccomp filter refuses every mount call, so its mount table cannot change.

The supervisor (PID 1, `supervisor.py`) runs it on the host's reset request at every restore; the grading
runner (`verify/sandboxed/runner.py`) between the members of a batch. Both receive this module's code from
the host.
"""

import os

SYSV = ("shm", "msg", "sem")  # /proc/sysvipc/<name>: one line per object, its id in the second column
MQUEUE = "/dev/mqueue"
IPC_RMID = 0
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_OPEN = 64  # directories held open at once; deeper ones are moved up to the top first
# The mode both launchers give the scratch directories (owned by the sandbox's user, who may change it)
TOP_MODE = 0o755


def wipe(top):
    """Empty `top`: iterative (any depth), never following a link (every directory is opened relative to
    its parent's descriptor with O_NOFOLLOW), opening up directories an occupant made unreadable (same
    uid). Trees deeper than `_MAX_OPEN` are renamed up to `top` and emptied from there, so descriptors
    stay bounded. True when `top` ends empty."""
    try:
        top_fd = os.open(top, _OPEN_DIR)
    except OSError:
        return False
    stack = [(top_fd, "")]  # (descriptor, name in the parent)
    moved, steps, tag = 0, 0, os.urandom(6).hex()
    try:
        while stack:
            steps += 1
            if steps > 10_000_000:
                return False
            fd = stack[-1][0]
            child = None
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                        except OSError:
                            is_dir = False
                        if is_dir:
                            child = entry.name
                            break
                        try:  # noqa: SIM105 - contextlib would be one more import
                            os.unlink(entry.name, dir_fd=fd)
                        except FileNotFoundError:
                            pass
            except OSError:
                return False
            if child is None:
                fd, name = stack.pop()
                if stack:
                    os.close(fd)
                    try:
                        os.rmdir(name, dir_fd=stack[-1][0])
                    except OSError:
                        return False
                continue
            if len(stack) >= _MAX_OPEN:
                moved += 1
                try:
                    os.rename(child, f".tg-wipe-{tag}-{moved}", src_dir_fd=fd, dst_dir_fd=top_fd)
                except OSError:
                    return False
                continue
            try:
                child_fd = os.open(child, _OPEN_DIR, dir_fd=fd)
            except PermissionError:
                try:
                    os.chmod(child, 0o700, dir_fd=fd)
                    child_fd = os.open(child, _OPEN_DIR, dir_fd=fd)
                except OSError:
                    return False
            except OSError:
                return False
            stack.append((child_fd, child))
    finally:
        for fd, _ in stack:
            if fd != top_fd:
                os.close(fd)
        os.close(top_fd)
    try:
        return not os.listdir(top)
    except OSError:
        return False


def restore_top(top):
    """Set `top` itself back as the launchers make it: no extended attributes (`user.*`, POSIX ACLs), mode
    `TOP_MODE`, access and modification times now. Emptying a directory keeps the directory, and these
    live on it: an occupant could leave a value there for the next one to read. By path: `top` is a mount
    point (never a link), and a mode that refuses its owner reading must not stop this. True when achieved."""
    try:
        for name in _xattrs(top):
            try:  # noqa: SIM105 - contextlib would be one more import
                os.removexattr(top, name, follow_symlinks=False)
            except OSError:
                pass  # reported by `top_leftovers`
        os.chmod(top, TOP_MODE)
        os.utime(top, follow_symlinks=False)
    except OSError:
        return False
    return not top_leftovers(top)


def _xattrs(target):
    try:
        return os.listxattr(target, follow_symlinks=False)
    except OSError as e:
        if e.errno in (95, 61):  # EOPNOTSUPP, ENODATA: the file system keeps none
            return []
        raise


def top_leftovers(top):
    """What is left on `top` itself (see `restore_top`), one line each."""
    try:
        mode = os.stat(top, follow_symlinks=False).st_mode & 0o7777
        names = _xattrs(top)
    except OSError as e:
        return [f"{top}: cannot be inspected ({e.strerror})"]
    left = [f"{top}: extended attribute {name}" for name in names]
    if mode != TOP_MODE:
        left.append(f"{top}: mode {mode:o}, not {TOP_MODE:o}")
    return left


def empty(top):
    """`restore_top` (first: a mode may refuse its owner) and `wipe`: True when set back and empty."""
    restored = restore_top(top)
    return wipe(top) and restored


def sysv_objects():
    """{kind: [id, ...]} of the SysV IPC objects of this IPC namespace; None when it cannot be read."""
    found = {}
    for kind in SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as f:
                lines = f.read().splitlines()[1:]  # the first line names the columns
        except OSError:
            return None
        found[kind] = [int(line.split()[1]) for line in lines if line.strip()]
    return found


def posix_queues():
    """Names of this IPC namespace's POSIX message queues; None when its mqueue file system is not there."""
    try:
        if os.stat(MQUEUE).st_dev == os.stat("/dev").st_dev:
            return None  # a bare directory, not the mqueue mount: it would list nothing
        return sorted(os.listdir(MQUEUE))
    except OSError:
        return None


def remove_ipc():
    """Remove every SysV object and POSIX message queue of this IPC namespace (the caller has the
    occupant's uid, so it owns them all; one it cannot remove stays and is reported by `leftovers`)."""
    objects = sysv_objects() or {}
    if any(objects.values()):
        import _ctypes  # directly: `ctypes` costs milliseconds to import, in PID 1 too

        libc = _ctypes.dlopen(None)  # type: ignore[arg-type]
        for kind, ids in objects.items():
            call = _ctypes.dlsym(libc, f"{kind}ctl")
            for ident in ids:  # shmctl / msgctl (id, IPC_RMID, NULL); semctl (id, 0, IPC_RMID)
                args = (ident, 0, IPC_RMID) if kind == "sem" else (ident, IPC_RMID, 0)
                _ctypes.call_function(call, args)
    for name in posix_queues() or ():
        try:  # noqa: SIM105 - contextlib would be one more import
            os.unlink(f"{MQUEUE}/{name}")
        except OSError:
            pass


def processes(keep):
    """Live processes of the PID namespace other than the pids in `keep`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def leftovers(dirs, keep):
    """Everything a previous occupant could have left: one line per thing still there (empty: clean)."""
    left = [f"process {pid}" for pid in processes(keep)]
    for top in dirs:
        try:
            left += [f"{top}/{name}" for name in sorted(os.listdir(top))]
        except OSError as e:
            left.append(f"{top}: cannot list ({e.strerror})")
        left += top_leftovers(top)
    return left + ipc_leftovers()


def ipc_leftovers():
    """The IPC objects of this namespace, one line each; what cannot be listed counts as left."""
    left = []
    objects = sysv_objects()
    if objects is None:
        left.append("SysV IPC: /proc/sysvipc cannot be read")
    else:
        left += [f"SysV {kind} {ident}" for kind, ids in objects.items() for ident in ids]
    queues = posix_queues()
    if queues is None:
        left.append(f"POSIX message queues: no mqueue file system at {MQUEUE}")
    else:
        left += [f"POSIX message queue /{name}" for name in queues]
    return left


def reset(dirs, keep):
    """Empty `dirs`, remove every IPC object; returns `leftovers` (empty when the sandbox is clean)."""
    for top in dirs:
        empty(top)
    remove_ipc()
    return leftovers(dirs, keep)
