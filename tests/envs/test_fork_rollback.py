"""Mid-episode snapshot / rollback / fork on a real sandbox: exact states, independent branches."""

from __future__ import annotations

import pytest
from envkit import call, code_task
from reward_helpers import verdict_of

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.errors import EnvError
from trialground.verify.grader import Grader

CFG = EnvConfig(kind="tool", max_turns=20)

# Digest of every path under /workspace: type, mode, size, content (or link target), sorted.
TREE_DIGEST = r"""
import hashlib, os
h = hashlib.sha256()
for root, dirs, files in os.walk(".", followlinks=False):
    dirs.sort()
    for name in sorted(dirs + files):
        p = os.path.join(root, name)
        st = os.lstat(p)
        h.update(f"{p}\0{st.st_mode:o}\0{st.st_size}\0".encode())
        if os.path.islink(p):
            h.update(os.readlink(p).encode())
        elif os.path.isfile(p):
            h.update(open(p, "rb").read())
print(h.hexdigest())
"""


async def tree_digest(env: ToolEnv) -> str:
    obs = await env.step(call("python", code=TREE_DIGEST))
    assert obs.text.startswith("[exit 0]\n"), obs.text
    return obs.text.split("\n")[1]


async def test_rollback_is_byte_identical(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, CFG, sandbox_config)
    try:
        await env.reset(code_task())
        await env.step(call("bash", command="mkdir -p d/e && printf 'x\\0y' > d/e/bin && ln -s d/e/bin link"))
        before = await tree_digest(env)
        snap = await env.snapshot()
        counters, turn = env.counters, env.state.turn
        await env.step(call("bash", command="rm -rf d notes && echo new > solution.py && chmod 600 link"))
        await env.step(call("write_file", path="extra/file.txt", content="zzz"))
        assert await tree_digest(env) != before
        await env.rollback(snap)
        assert env.counters == counters and env.state.turn == turn  # the episode is back too
        assert await tree_digest(env) == before
        assert (await env.sandbox.read("d/e/bin")) == b"x\0y"  # type: ignore[union-attr]
        # the snapshot stays valid: roll back to it again after more changes
        await env.step(call("bash", command="rm -rf ./*"))
        await env.rollback(snap)
        assert await tree_digest(env) == before
        other = ToolEnv(grader, CFG, sandbox_config)
        try:
            await other.reset(code_task())
            with pytest.raises(EnvError) as err:
                await other.rollback(snap)
            assert err.value.kind == "foreign_snapshot"
        finally:
            await other.close()
    finally:
        await env.close()


async def test_fork_branches_see_state_and_diverge(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, CFG, sandbox_config)
    branches: list[ToolEnv] = []
    try:
        await env.reset(code_task())
        await env.step(call("edit_file", path="solution.py", old="a - b", new="a + b"))
        await env.step(call("write_file", path="state.txt", content="shared\n"))
        parent_digest = await tree_digest(env)
        history = list(env.state.history)
        branches = await env.fork(3)
        assert len({id(b.sandbox) for b in branches} | {id(env.sandbox)}) == 4
        for b in branches:
            assert (
                b.counters == env.counters and b.state.history == history and b.state.turn == env.state.turn
            )
            assert await tree_digest(b) == parent_digest
        for i, b in enumerate(branches):
            await b.step(call("write_file", path="state.txt", content=f"branch {i}\n"))
        for i, b in enumerate(branches):
            assert (await b.sandbox.read("state.txt")) == f"branch {i}\n".encode()  # type: ignore[union-attr]
        assert (await env.sandbox.read("state.txt")) == b"shared\n"  # type: ignore[union-attr]
        # each branch finishes and is graded on its own: one breaks the fix, two keep it
        await branches[0].step(call("edit_file", path="solution.py", old="a + b", new="a * b"))
        results = [await b.step(call("submit")) for b in branches]
        passed = [v.passed for r in results if (v := verdict_of(r)) is not None]
        assert passed == [False, True, True], [verdict_of(r) for r in results]
        assert [b.counters["tool_calls"] for b in branches] == [7, 6, 6]
        assert not env.state.done  # the parent goes on
        obs = await env.step(call("submit"))
        assert verdict_of(obs) is not None and verdict_of(obs).passed
    finally:
        for b in branches:
            await b.close()
        await env.close()


async def test_fork_before_reset_is_an_error(grader: Grader) -> None:
    env = ToolEnv(grader, CFG)
    with pytest.raises(EnvError) as err:
        await env.fork(2)
    assert err.value.kind == "not_reset"
