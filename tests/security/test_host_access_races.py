"""Host-side access to a workspace while the sandbox races it: a sandboxed program keeps swapping a
directory for a symlink to a host directory holding a secret, and the host reads and writes through it
thousands of times (the Python API, the tool environment's file tools, snapshot/restore/fork, the
service's file routes). The secret never comes back and nothing appears in the host directory.

Each race runs at least `TRIES` times, and on (up to ten times as long) until it has seen both the
directory and the symlink, so it provably exercised the race; it is bounded by count, never by time."""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from hostkit import INSIDE, SECRET, SWAP_LIMITS, SWAPPER, assert_host_dir_untouched, make_host_dir, swapping
from seckit import CONFIG

from trialground.envs.tools.registry import run_named
from trialground.envs.tools.toolbox import Toolbox
from trialground.errors import SandboxError
from trialground.sandbox import beneath
from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox, bwrap_available
from trialground.sandbox.base import ExecResult, Limits, Sandbox
from trialground.sandbox.factory import open_sandbox
from trialground.sandbox.service.app import create_app
from trialground.sandbox.workspace import Workspace
from trialground.tasks.model import Task, VerifierSpec

pytestmark = [pytest.mark.security, pytest.mark.slow, pytest.mark.timeout(1200)]
TRIES = 3000
# Over HTTP a try costs ~50 ms: 300 each way, and on until the race was seen both ways (`_race`).
SERVICE_TRIES = 300


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of resolving beneath the workspace: the kernel's openat2 and the descriptor walk."""
    if request.param == "walk":
        monkeypatch.setattr(beneath, "OPENAT2", False)
    else:
        monkeypatch.setattr(beneath, "OPENAT2", None)  # probed: this kernel must have it
        fd = os.open("/", os.O_PATH)
        try:
            assert beneath._have_openat2(fd), "openat2 missing: the walk is the only resolver here"
        finally:
            os.close(fd)
    return request.param


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return make_host_dir(tmp_path)


def _swap(sandbox: Sandbox, host: Path):  # type: ignore[no-untyped-def]
    async def ready() -> bool:
        try:
            await sandbox.read("ready")
            return True
        except FileNotFoundError:
            return False

    async def stop() -> None:
        await sandbox.write("stop", "")

    run = lambda: sandbox.exec(["python3", "-I", "-c", SWAPPER, str(host)], limits=SWAP_LIMITS)  # noqa: E731
    return swapping(run, ready, stop)


async def _race(op: Callable[[], Awaitable[str]], host: Path, tries: int = TRIES) -> Counter[str]:
    """Runs `op` (returning "inside", "refused" or what it read) `tries` times, and on until the race
    was seen both ways."""
    seen: Counter[str] = Counter()
    for i in range(tries * 10):
        outcome = await op()
        assert SECRET not in outcome, f"try {i}: the host secret came back: {outcome!r}"
        seen[outcome if outcome in (INSIDE, "refused") else "other"] += 1
        if i % 50 == 0:
            assert_host_dir_untouched(host)
        if i + 1 >= tries and seen[INSIDE] and seen["refused"]:
            break
    assert_host_dir_untouched(host)
    if not (seen[INSIDE] and seen["refused"]):
        # every try came back one way (the swapper was starved on a loaded machine): the secret never came
        # back, but the race itself was not exercised, so the run proves nothing either way
        pytest.skip(f"the race was never seen both ways in {sum(seen.values())} tries: {dict(seen)}")
    return seen


async def test_sandbox_read_write_never_cross_a_swapped_symlink(
    sandbox: Sandbox, host: Path, resolver: str
) -> None:
    async def read() -> str:
        try:
            return (await sandbox.read("d/x")).decode()
        except (SandboxError, FileNotFoundError):
            return "refused"

    async def write(path: str) -> str:
        try:
            await sandbox.write(path, "pwned")
        except (SandboxError, FileNotFoundError):
            return "refused"
        return INSIDE

    async with _swap(sandbox, host):
        await _race(read, host)
        await _race(lambda: write("d/y"), host)
        await _race(lambda: write("d/sub/z"), host)  # parent directories made through the race too
        await _race(lambda: write("/workspace/d/../d/w"), host)
    assert_host_dir_untouched(host)


def _task() -> Task:
    return Task(
        domain="code",
        prompt="p",
        files={"solution.py": "x = 1\n"},
        hidden_checks={"test_h.py": "def test_x():\n    assert True\n"},
        verifier=VerifierSpec(kind="code_tests"),
    )


async def test_tool_file_tools_never_cross_a_swapped_symlink(
    sandbox: Sandbox, host: Path, resolver: str
) -> None:
    tools = Toolbox(sandbox, _task(), Limits())

    def tool(name: str, **args: str) -> Callable[[], Awaitable[str]]:
        async def op() -> str:
            out = await run_named(tools, name, args, wall_s=5)
            if not out.ok:
                assert out.text.startswith("error:"), out.text
                return "refused"
            return out.text if name == "read_file" else INSIDE

        return op

    async with _swap(sandbox, host):
        await _race(tool("read_file", path="d/x"), host)
        await _race(tool("write_file", path="d/y", content="pwned"), host)
        # read then write: a write through the symlink would turn the host's x into "inside"
        await _race(tool("edit_file", path="d/x", old=INSIDE, new=INSIDE), host)


@pytest.fixture(params=["forkserver", "bwrap"])
async def copy_sandbox(request: pytest.FixtureRequest) -> AsyncIterator[BwrapSandbox]:
    """A sandbox whose snapshots copy the workspace (the host walks the whole tree)."""
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    sb = await open_sandbox(CONFIG.model_copy(update={"launcher": request.param, "snapshot_mode": "copy"}))
    assert isinstance(sb, BwrapSandbox)
    try:
        yield sb
    finally:
        await sb.close()


def _tree_secrets(root: Path) -> list[str]:
    """Files under `root` (never following a symlink) whose bytes hold the secret."""
    found = []
    for dirpath, _, files in os.walk(root, followlinks=False):
        for name in files:
            p = Path(dirpath, name)
            if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes():
                found.append(str(p))
    return found


async def test_snapshot_restore_fork_copies_never_follow_a_swapped_symlink(
    copy_sandbox: BwrapSandbox, host: Path, resolver: str
) -> None:
    """The copies the host makes itself (snapshot, restore, fork seeding) while the swapper runs:
    called on the workspace directly, since the sandbox API waits for the command to end first.
    A copy the swapper changed mid-walk is refused, so whether one succeeds depends on the race: each
    kind is retried, for a bounded number of rounds, until one has succeeded while the swapper ran."""
    ws = copy_sandbox.workspace
    done: Counter[str] = Counter()
    async with _swap(copy_sandbox, host):
        for i in range(4000):
            if i >= 400 and done["snapshot"] > 100 and done["restore"] and done["fork"]:
                break
            try:
                sid = ws.snapshot()
                done["snapshot"] += 1
            except (OSError, SandboxError):
                continue  # the tree changed under the copy: refused, never followed
            copy = ws.root / "c" / sid
            assert not _tree_secrets(copy), f"snapshot {sid} holds the host secret"
            if i % 4 == 0 or not done["restore"]:
                try:
                    ws.restore(sid)
                    done["restore"] += 1
                except (OSError, SandboxError):
                    pass
            if i % 10 == 0 or not done["fork"]:
                child = Workspace(16, ws.uid, overlay=False)
                try:
                    child.seed_from(ws)
                    done["fork"] += 1
                    assert not _tree_secrets(child.ws)
                except (OSError, SandboxError):
                    pass
                finally:
                    child.close()
            assert_host_dir_untouched(host)
    assert done["snapshot"] > 100 and done["restore"] and done["fork"], done
    assert_host_dir_untouched(host)


# -- the service's file routes -------------------------------------------------------------------------
TOKEN = "t0ken-for-race-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def service_url() -> Iterator[str]:
    app = create_app(TOKEN, max_sessions=4, idle_s=300, max_concurrent_execs=4)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(2000):
        if uv.started:
            break
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        sock.close()


async def test_service_file_routes_never_cross_a_swapped_symlink(service_url: str, host: Path) -> None:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    async with httpx.AsyncClient(base_url=service_url, headers=AUTH, timeout=300) as client:
        r = await client.post("/sessions", json={"limits": SWAP_LIMITS.model_dump()})
        assert r.status_code == 200, r.text
        files = f"/sessions/{r.json()['session_id']}/files"

        async def run() -> ExecResult:
            body = {"cmd": ["python3", "-I", "-c", SWAPPER, str(host)], "limits": SWAP_LIMITS.model_dump()}
            res = await client.post(files.replace("/files", "/exec"), json=body)
            return ExecResult.model_validate(res.json())

        async def ready() -> bool:
            return (await client.get(files, params={"path": "ready"})).status_code == 200

        async def stop() -> None:
            await client.put(files, json={"path": "stop", "data_b64": ""})

        async def read() -> str:
            res = await client.get(files, params={"path": "d/x"})
            if res.status_code == 200:
                return base64.b64decode(res.json()["data_b64"]).decode()
            assert res.status_code in (400, 404), res.text
            return "refused"

        async def write() -> str:
            res = await client.put(files, json={"path": "d/y", "data_b64": "cHduZWQ="})
            assert res.status_code in (200, 400, 404), res.text
            return INSIDE if res.status_code == 200 else "refused"

        async with swapping(run, ready, stop):
            # An HTTP round trip costs far more than a local read: fewer tries, the same race.
            await _race(read, host, SERVICE_TRIES)
            await _race(write, host, SERVICE_TRIES)
    assert_host_dir_untouched(host)
