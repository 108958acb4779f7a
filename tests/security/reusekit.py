"""Programs for the reuse tests: one occupant plants an answer in every namespace-scoped resource it can
reach, the next one looks for it; an inventory lists what the sandbox holds. All run inside a sandbox."""

from __future__ import annotations

import json

from trialground.sandbox.base import Sandbox

KEY = 0x7467  # the SysV key both occupants agree on
QUEUE = b"/tg-answer"
_LIBC = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
try:
    rt = libc if hasattr(libc, "mq_open") else ctypes.CDLL("librt.so.1", use_errno=True)
except OSError:
    rt = libc
libc.shmat.restype = ctypes.c_void_p
class Msg(ctypes.Structure):
    _fields_ = [("type", ctypes.c_long), ("text", ctypes.c_char * 16)]
"""

# Everything here outlives the command's processes unless the sandbox removes it.
PLANT = (
    _LIBC
    + f"""
shm = libc.shmget({KEY}, 4096, 0o1600)
addr = libc.shmat(shm, None, 0)
ctypes.memmove(addr, b"ANSWER-shm", 10)
msq = libc.msgget({KEY}, 0o1600)
assert libc.msgsnd(msq, ctypes.byref(Msg(1, b"ANSWER-msg")), 16, 0) == 0
sem = libc.semget({KEY}, 1, 0o1600)
assert libc.semctl(sem, 0, 16, 42) == 0  # SETVAL 42
q = rt.mq_open({QUEUE!r}, os.O_CREAT | os.O_RDWR, 0o600, None)
assert q >= 0 and rt.mq_send(q, b"ANSWER-mq", 9, 0) == 0
os.makedirs("/tmp/locked/in")
open("/tmp/locked/in/answer", "w").write("ANSWER-tmp")
os.chmod("/tmp/locked/in", 0)
os.chmod("/tmp/locked", 0)
open("/dev/shm/answer", "w").write("ANSWER-devshm")
print("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None), ctypes.get_errno())
import subprocess
subprocess.Popen(["sleep", "300"], start_new_session=True)
print("planted")
"""
)

# What the next occupant can find of the answer: one word per channel that still holds it.
READ = (
    _LIBC
    + f"""
found = []
shm = libc.shmget({KEY}, 0, 0)
if shm >= 0:
    found.append("shm:" + ctypes.string_at(libc.shmat(shm, None, 0o10000), 10).decode())
msq = libc.msgget({KEY}, 0)
m = Msg()
if msq >= 0 and libc.msgrcv(msq, ctypes.byref(m), 16, 0, 0o4000) >= 0:
    found.append("msg:" + m.text.decode())
sem = libc.semget({KEY}, 0, 0)
if sem >= 0:
    found.append("sem:%d" % libc.semctl(sem, 0, 12))  # GETVAL
q = rt.mq_open({QUEUE!r}, os.O_RDONLY | os.O_NONBLOCK, 0, None)
if q >= 0:
    buf = ctypes.create_string_buffer(8192)
    n = rt.mq_receive(q, buf, 8192, None)
    found.append("mq:" + buf.raw[: max(n, 0)].decode())
for top in ("/tmp", "/dev/shm"):
    for root, dirs, files in os.walk(top):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), 0o700)
            except OSError:
                pass
        found += [top + ":" + open(os.path.join(root, f)).read() for f in files]
print(" ".join(found))
"""
)

INVENTORY = """
import json, os
def table(name):
    try:
        with open("/proc/sysvipc/" + name) as f:
            return sorted(line.split()[1] for line in f.read().splitlines()[1:] if line.strip())
    except OSError as e:
        return str(e)
def walk(top):
    out = []
    for root, dirs, files in os.walk(top, onerror=lambda e: out.append("unreadable " + e.filename)):
        out += [os.path.join(root, n) for n in dirs + files]
    return sorted(out)
mounts = []
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    point, fstype = fields[4], fields[fields.index("-") + 1]
    if not point.startswith("/workspace"):  # the host restores the workspace's own mounts
        mounts.append((point, fstype))
me = os.getpid()
procs = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me))
print(json.dumps({
    "shm": table("shm"), "msg": table("msg"), "sem": table("sem"),
    "mqueue": sorted(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else "no /dev/mqueue",
    "tmp": walk("/tmp"), "devshm": walk("/dev/shm"), "mounts": sorted(mounts), "processes": procs,
}))
"""


async def inventory(sandbox: Sandbox) -> dict:
    """What `sandbox` holds besides its workspace: IPC objects, POSIX queues, scratch files, mounts,
    processes (other than PID 1 and the inventory itself)."""
    result = await sandbox.exec(["python3", "-c", INVENTORY])
    assert result.ok, result
    return json.loads(result.stdout)


async def leftovers(sandbox: Sandbox) -> str:
    """What of a planted answer the next occupant of `sandbox` reads (empty: nothing)."""
    result = await sandbox.exec(["python3", "-c", READ])
    assert result.ok, result
    return result.stdout.strip()


async def plant(sandbox: Sandbox) -> None:
    result = await sandbox.exec(["python3", "-c", PLANT])
    assert result.ok and "planted" in result.stdout, result
    assert "mount -1" in result.stdout  # a sandbox can never mount: its mount table cannot change


def shm_hog(mib: int) -> str:
    """Python source: a SysV segment of `mib` MiB, every page touched, left behind (not removed)."""
    return (
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
        f"seg = libc.shmget(0, {mib} << 20, 0o1600)\nassert seg >= 0\n"
        f"ctypes.memset(libc.shmat(seg, None, 0), 1, {mib} << 20)\n"
    )


def spawned(source: str) -> str:
    """Python source that runs `source` in a new interpreter and waits for it: started through
    `_posixsubprocess`, so a grading worker's audit hook sees neither the start nor what it runs."""
    return (
        "import _posixsubprocess, os, sys\nr, w = os.pipe()\n"
        f"argv = [sys.executable.encode(), b'-c', {source.encode()!r}]\n"
        "pid = _posixsubprocess.fork_exec(argv, [argv[0]], True, (), None, None, -1, -1, -1, -1, -1, -1,"
        " r, w, True, False, -1, None, None, None, -1, None, False)\n"
        "os.waitpid(pid, 0)\n"
    )


class NoGrader:
    """The env pool's grader where a test grades nothing."""

    async def grade(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("no grading in these tests")
