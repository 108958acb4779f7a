"""Special files the sandbox leaves where the host expects a regular one: a FIFO, a unix socket, a device
node, a huge (sparse) file, a directory, a symlink. Every host-side reader (Sandbox.read, the tool
environment's file tools, the grader, the service's file route) answers promptly with a clear error
(for a graded solution: a failed submission), never a hang; a deep tree survives snapshot/restore/fork."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from reward_helpers import error_of, grade_and_score, verdict_of
from seckit import CONFIG

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.envs.tools.registry import run_named
from trialground.envs.tools.toolbox import READ_FILE_MAX_BYTES, Toolbox
from trialground.errors import SandboxError
from trialground.sandbox import beneath
from trialground.sandbox.backends.bwrap.sandbox import BwrapSandbox, bwrap_available
from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.sandbox.service.app import KIND_HEADER, create_app
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import Grader, make_grader

pytestmark = [pytest.mark.security, pytest.mark.timeout(600)]

# A hang is forever; anything that answers at all answers in microseconds. This bound only has to
# separate the two on a machine that is as busy as it gets.
PROMPT_S = 60.0
BIG = Limits(file_size_mb=1024, wall_s=300, cpu_s=60)  # planting them must not time out under load

BIND = "python3 -I -c \"import socket; socket.socket(socket.AF_UNIX).bind('{}')\""

# name -> (shell making it in the workspace, SandboxError kind a host read gets)
SPECIAL = {
    "fifo": ("mkfifo fifo", "not_a_file"),
    "sock": (BIND.format("sock"), "not_a_file"),
    "huge": (f"truncate -s {beneath.READ_LIMIT + (1 << 20)} huge", "too_large"),
    "adir": ("mkdir adir", "not_a_file"),
    "link": ("ln -s /etc/hostname link", "bad_path"),
    "dlink": ("mkdir real && echo inside > real/f && ln -s real dlink", "bad_path"),  # read as dlink/f
}


async def make_special(sandbox: Sandbox) -> list[str]:
    """Plant every special file; as root also a character device (/dev/zero's numbers) from the host."""
    script = " && ".join(cmd for cmd, _ in SPECIAL.values())
    r = await sandbox.exec(script, limits=BIG)
    assert r.ok, r
    names = [n if n != "dlink" else "dlink/f" for n in SPECIAL]
    if os.geteuid() == 0 and isinstance(sandbox, BwrapSandbox):
        os.mknod(sandbox.workspace.ws / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
        names.append("zero")
    return names


def expected_kind(name: str) -> set[str]:
    if name == "zero":  # refused as a device, or (a nodev mount) by the open itself
        return {"not_a_file", "read"}
    return {SPECIAL[name.split("/")[0]][1]}


async def prompt(coro):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    try:
        return await coro
    finally:
        assert time.monotonic() - start < PROMPT_S


async def test_sandbox_read_and_write_refuse_special_files(sandbox: Sandbox) -> None:
    for name in await make_special(sandbox):
        with pytest.raises(SandboxError) as info:
            await prompt(sandbox.read(name))
        assert info.value.kind in expected_kind(name), (name, info.value)
        assert name.split("/")[0] in str(info.value)
        if name != "huge":  # a huge regular file is still a regular file to overwrite
            with pytest.raises(SandboxError) as info:
                await prompt(sandbox.write(name, "x"))
            assert info.value.kind in {"not_a_file", "bad_path", "write"}, (name, info.value)
    r = await sandbox.exec("test -p fifo && test -S sock && test -d adir && test -L link && cat real/f")
    assert r.ok and r.stdout == "inside\n", r  # nothing was replaced
    await sandbox.write("fine.txt", "ok")
    assert await sandbox.read("fine.txt") == b"ok"


async def test_tool_file_tools_answer_special_files_with_errors(sandbox: Sandbox) -> None:
    task = Task(
        domain="code", prompt="p", hidden_checks={"t.py": "x"}, verifier=VerifierSpec(kind="code_tests")
    )
    tools = Toolbox(sandbox, task, Limits())
    for name in await make_special(sandbox):
        calls = [("read_file", {"path": name}), ("edit_file", {"path": name, "old": "a", "new": "b"})]
        if name != "huge":
            calls.append(("write_file", {"path": name, "content": "x"}))
        for tool, args in calls:
            out = await prompt(run_named(tools, tool, args, wall_s=5))
            if name == "huge" and tool == "read_file":  # a regular file, too big to read: its two ends
                assert out.ok and "bytes not shown" in out.text, out.text[-300:]
                assert len(out.text) <= READ_FILE_MAX_BYTES + 200
                continue
            assert not out.ok and out.text.startswith("error:"), (tool, name, out.text)


def _code_task() -> Task:
    return Task(
        domain="code",
        prompt="Write add(a, b).",
        files={"solution.py": "def add(a, b):\n    return a + b\n"},
        visible_checks={
            "test_visible.py": "from solution import add\n\n\ndef test_v():\n    assert add(1, 2) == 3\n"
        },
        hidden_checks={
            "test_hidden.py": "from solution import add\n\n\ndef test_h():\n    assert add(2, 2) == 4\n"
        },
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
    )


@pytest.fixture
async def grader() -> AsyncIterator[Grader]:
    g = make_grader(SandboxConfig(), RewardConfig())
    yield g
    await g.close()


SOLUTION_AS = {
    "fifo": "rm solution.py && mkfifo solution.py",
    "socket": "rm solution.py && " + BIND.format("solution.py"),
    "directory": "rm solution.py && mkdir solution.py",
    "symlink": "rm solution.py && ln -s /etc/hostname solution.py",
    "huge": f"truncate -s {beneath.READ_LIMIT + 1} solution.py",
    # under what the sandbox reads, over what grading copies (`grading.max_solution_bytes`)
    "large": f"truncate -s {GradingConfig().max_solution_bytes + 1} solution.py",
}


@pytest.mark.parametrize("kind", sorted(SOLUTION_AS))
async def test_grader_fails_an_unreadable_solution_promptly(grader: Grader, kind: str) -> None:
    task = _code_task()
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    async with await open_sandbox(SandboxConfig(), {**task.files, **task.visible_checks}) as agent:
        # The canonical solution passes from this very workspace first: the test can tell the two apart.
        verdict, _ = await grade_and_score(grader, task, "", workspace=agent)
        assert verdict.passed and verdict.error is None, verdict
        r = await agent.exec(SOLUTION_AS[kind], limits=BIG)
        assert r.ok, r
        verdict, reward = await prompt(grade_and_score(grader, task, "", workspace=agent))
    assert not verdict.passed and verdict.error is None, verdict  # a failed submission, not infrastructure
    assert "unreadable_solution" in {f.name for f in verdict.flags}, verdict
    assert "solution.py" in verdict.detail and reward.total == 0 and not reward.dropped


async def test_tool_env_submit_with_fifo_solution_and_check_is_a_flagged_failure(grader: Grader) -> None:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    env = ToolEnv(grader, EnvConfig(kind="tool", max_turns=10), SandboxConfig())
    try:
        await env.reset(_code_task())
        cmd = "rm solution.py test_visible.py && mkfifo solution.py test_visible.py"
        obs = await env.step(format_tool_call("bash", {"command": cmd}))
        assert obs.text.startswith("[exit 0]"), obs.text
        obs = await env.step(format_tool_call("read_file", {"path": "solution.py"}))
        assert obs.text.startswith("error:") and "FIFO" in obs.text, obs.text
        obs = await prompt(env.step(format_tool_call("submit", {})))
        assert obs.done and verdict_of(obs) is not None and error_of(obs) is None, obs
        assert not verdict_of(obs).passed and verdict_of(obs).error is None
        names = {f.name for f in verdict_of(obs).flags}
        assert {"unreadable_solution", "test_tampering"} <= names, verdict_of(obs).flags
    finally:
        await env.close()


# -- the service ------------------------------------------------------------------------------------
TOKEN = "t0ken-for-special-files-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def service() -> Iterator[tuple[str, Path]]:
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
    token_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"tg-token-{os.getpid()}-{id(app)}"
    token_file.write_text(TOKEN)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", token_file
    finally:
        token_file.unlink(missing_ok=True)
        uv.should_exit = True
        thread.join(timeout=30)
        sock.close()


async def test_service_file_route_refuses_special_files_and_health_stays_up(
    service: tuple[str, Path],
) -> None:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    url, token_file = service
    # A short client timeout: a route that blocked the server's loop shows up as a timeout, not a hang.
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=PROMPT_S) as client:
        r = await client.post("/sessions", json={"limits": BIG.model_dump()})
        sid = r.json()["session_id"]
        script = " && ".join(cmd for cmd, _ in SPECIAL.values())
        r = await client.post(f"/sessions/{sid}/exec", json={"cmd": script, "limits": BIG.model_dump()})
        assert r.json()["status"] == "ok", r.text
        for name in ("fifo", "sock", "huge", "adir", "link", "dlink/f"):
            read = client.get(f"/sessions/{sid}/files", params={"path": name})
            health = client.get("/health")
            got, alive = await asyncio.gather(read, health)
            assert alive.status_code == 200 and alive.json()["ok"]
            assert got.status_code == 400, (name, got.text)
            assert got.headers[KIND_HEADER] == SPECIAL[name.split("/")[0]][1], (name, got.headers)
            assert name.split("/")[0] in got.json()["detail"]
        put = await client.put(
            f"/sessions/{sid}/files", json={"path": "fifo", "data_b64": base64.b64encode(b"x").decode()}
        )
        assert put.status_code == 400 and put.headers[KIND_HEADER] == "not_a_file", put.text
    # The remote backend keeps the kind, so the tool environment treats it as the path's fault.
    config = SandboxConfig(backend="remote", remote_url=url, token_file=str(token_file), limits=BIG)
    async with await open_sandbox(config) as remote:
        await remote.exec("mkfifo f2")
        with pytest.raises(SandboxError) as info:
            await prompt(remote.read("f2"))
        assert info.value.kind == "not_a_file"


# -- deep trees ---------------------------------------------------------------------------------------
DEPTH = 1400
DEEP = f"""
import os
os.mkdir("deep"); os.chdir("deep")
for i in range({DEPTH}):
    os.mkdir("d"); os.chdir("d")
with open("leaf", "w") as f:
    f.write("bottom")
os.mkfifo("pipe")
os.symlink("/etc", "etc_link")
"""
COUNT = """
import os
n = 0
os.chdir("deep")
while os.path.isdir("d"):
    os.chdir("d"); n += 1
print(n, open("leaf").read(), os.path.islink("etc_link"))
"""


@pytest.fixture(params=["forkserver/copy", "forkserver/overlay", "bwrap/copy"])
async def any_sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    launcher, mode = request.param.split("/")
    sb = await open_sandbox(CONFIG.model_copy(update={"launcher": launcher, "snapshot_mode": mode}))
    try:
        yield sb
    finally:
        await sb.close()


async def test_deep_tree_survives_snapshot_restore_fork(any_sandbox: Sandbox) -> None:
    sb = any_sandbox
    empty = await sb.snapshot()
    r = await sb.exec(["python3", "-I", "-c", DEEP])
    assert r.ok, r
    full = await sb.snapshot()
    child = await sb.fork()
    try:
        r = await child.exec(["python3", "-I", "-c", COUNT])
        assert r.stdout.split() == [str(DEPTH), "bottom", "True"], r
    finally:
        await child.close()
    await sb.restore(empty)
    r = await sb.exec("ls -A")
    assert r.ok and r.stdout == "", r
    await sb.restore(full)
    r = await sb.exec(["python3", "-I", "-c", COUNT])
    assert r.stdout.split() == [str(DEPTH), "bottom", "True"], r
