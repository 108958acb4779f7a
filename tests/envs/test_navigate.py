"""`search` and `read_lines` in a real bwrap sandbox: bounded, paged, and never fooled by the workspace."""

from __future__ import annotations

import pytest
from envkit import call

from trialground.envs import navigate
from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.grader import Grader

CFG = EnvConfig(kind="tool", max_turns=40, observation_budget_chars=4000, navigation_tools=True)

LOG = "".join(f"line {i} status={'500' if i % 50 == 0 else '200'}\n" for i in range(1, 2001))


def _task() -> Task:
    return Task(
        domain="longctx",
        prompt="Find it.",
        files={
            "logs/app.log": LOG,
            "src/a.py": "X = tuning.K1\n",
            "src/deep/b.py": "# nothing\nY = tuning.K2\n",
            "src/tuning.py": "K1 = 7\nK2 = 9\n",
        },
        verifier=VerifierSpec(kind="exact", params={"answer": "7"}),
    )


async def test_search_pages_and_follows_a_reference(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, CFG, sandbox_config)
    try:
        obs = await env.reset(_task())
        assert "search(pattern, path?)" in obs.text and "read_lines(path, start?, count?)" in obs.text
        obs = await env.step(call("search", pattern="tuning.K", path="src"))
        assert obs.text == "src/a.py:1:X = tuning.K1\nsrc/deep/b.py:2:Y = tuning.K2\n[2 matches in 2 files]"
        obs = await env.step(call("search", pattern="K2 ="))  # follow the reference, whole workspace
        assert obs.text == "src/tuning.py:2:K2 = 9\n[1 match in 1 file]"
        obs = await env.step(call("search", pattern="status=500", path="logs/app.log"))
        lines = obs.text.splitlines()
        assert len(lines) == navigate.SEARCH_MAX_HITS + 1 and lines[0] == "logs/app.log:50:line 50 status=500"
        assert lines[-1] == f"[40 matches in 1 file; first {navigate.SEARCH_MAX_HITS} shown]"
        obs = await env.step(call("search", pattern="no such text"))
        assert obs.text == "[0 matches in 0 files]" and env.counters["tool_errors"] == 1
        obs = await env.step(call("search", pattern=""))
        assert "non-empty pattern" in obs.text

        obs = await env.step(call("read_lines", path="logs/app.log", start="1000", count="3"))
        assert obs.text == (
            "logs/app.log: lines 1000-1002 of 2000\n"
            "1000| line 1000 status=500\n1001| line 1001 status=200\n1002| line 1002 status=200"
        )
        obs = await env.step(call("read_lines", path="logs/app.log", start="1999"))
        assert obs.text.startswith("logs/app.log: lines 1999-2000 of 2000\n")
        obs = await env.step(call("read_lines", path="logs/app.log"))
        assert obs.text.splitlines()[0] == "logs/app.log: lines 1-20 of 2000"
        obs = await env.step(call("read_lines", path="logs/app.log", start="5000"))
        assert obs.text == "logs/app.log: no line 5000 (the file has 2000 lines)"
        for bad in ({"start": "0"}, {"start": "x"}, {"count": "-1"}):
            obs = await env.step(call("read_lines", path="logs/app.log", **bad))
            assert obs.text.startswith("error: read_lines:")
        obs = await env.step(call("read_lines", path="nope.txt"))
        assert obs.text.startswith("error: nope.txt:")
        obs = await env.step(call("read_lines", path="src", start="1"))
        assert obs.text == "error: src: not a regular file"
    finally:
        await env.close()


async def test_the_workspace_cannot_make_them_follow_links_block_or_read_without_bound(
    grader: Grader, sandbox_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(navigate, "READ_COUNT_BYTES", 1024 * 1024)
    env = ToolEnv(grader, CFG, sandbox_config)
    try:
        await env.reset(_task())
        setup = (
            "ln -s /etc/passwd src/passwd.py && ln -s / src/root && mkfifo src/pipe && "
            "python3 -c \"f = open('big.txt', 'w'); [f.write('y' * 99 + '\\n') for _ in range(50000)]\""
        )
        obs = await env.step(call("bash", command=setup))
        assert obs.text.startswith("[exit 0]"), obs.text
        obs = await env.step(call("search", pattern="root:", path="src"))
        assert obs.text == "[0 matches in 0 files]"  # neither link followed; the fifo is skipped, not read
        obs = await env.step(call("read_lines", path="src/passwd.py"))
        assert obs.text == "error: src/passwd.py: not a regular file"
        obs = await env.step(call("read_lines", path="src/pipe"))
        assert obs.text == "error: src/pipe: not a regular file"
        # 5 MB file, count capped at 1 MiB: the page is shown, the total is a lower bound
        obs = await env.step(call("read_lines", path="big.txt", start="3", count="500"))
        head, *page = obs.text.splitlines()
        assert head.startswith("big.txt: lines 3-202 of more than ")  # count capped at READ_MAX_LINES
        assert page[0] == f"3| {'y' * 99}"  # the observation budget cuts the middle of the page
        assert int(head.rsplit(" ", 1)[1]) < 50000
        obs = await env.step(call("search", pattern="y" * 10, path="big.txt"))
        lines = obs.text.splitlines()
        assert lines[0] == f"big.txt:1:{'y' * 99}" and lines[-1].startswith("[50000 matches in 1 file;")
    finally:
        await env.close()
