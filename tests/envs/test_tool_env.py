"""Scripted multi-turn episodes in a real bwrap sandbox with the real grader."""

from __future__ import annotations

import asyncio

import pytest
from envkit import call, code_task
from reward_helpers import error_of, finish_reason_of, reward_of, verdict_of

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.verify.grader import Grader

CFG = EnvConfig(kind="tool", max_turns=30, tool_format="auto", observation_budget_chars=2000)


async def test_scripted_episode_every_tool(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, CFG, sandbox_config)
    task = code_task()
    try:
        obs = await env.reset(task)
        assert task.prompt in obs.text and "run_tests" in obs.text and not obs.done

        obs = await env.step("Let me look.\n" + call("bash", command="ls -R"))
        assert "solution.py" in obs.text and "test_visible.py" in obs.text
        assert "test_hidden" not in obs.text  # hidden checks never enter the agent's sandbox
        assert obs.text.startswith("[exit 0]")

        obs = await env.step(call("read_file", path="solution.py"))
        assert obs.text == "def add(a, b):\n    return a - b\n\n\ndef double(a):\n    return a + a\n"

        obs = await env.step(call("run_tests"))
        assert "FAILED test_visible.py::test_add_small" in obs.text and "0 passed, 1 failed" in obs.text

        # malformed and unknown calls: explained, counted, never raised
        obs = await env.step('<tool_call>{"name": "bash", "arguments": {"command": </tool_call>')
        assert "not valid JSON" in obs.text
        obs = await env.step(call("rm_everything", target="/"))
        assert "unknown tool 'rm_everything'" in obs.text
        obs = await env.step(call("write_file", path="x.txt"))
        assert "missing parameter(s) content" in obs.text
        obs = await env.step("I think I am done, no tool needed.")
        assert "no tool call found" in obs.text
        obs = await env.step(
            "<tool_call>\n<function=bash>\n<parameter=command>\necho hi\n</function>\n</tool_call>"
        )
        assert "not closed with </parameter>" in obs.text
        assert env.counters["invalid_calls"] == 5 and env.counters["tool_calls"] == 3

        # edit_file: ambiguous, missing, then exact
        obs = await env.step(call("edit_file", path="solution.py", old="return a", new="return b"))
        assert "ambiguous: 2 matches" in obs.text
        obs = await env.step(call("edit_file", path="solution.py", old="a * b", new="a + b"))
        assert "not found" in obs.text
        obs = await env.step(call("edit_file", path="solution.py", old="a - b", new="a + b"))
        assert "edited solution.py" in obs.text

        obs = await env.step(call("python", fmt="xml", code="import solution\nprint(solution.add(2, 5))"))
        assert obs.text == "[exit 0]\n7"
        obs = await env.step(call("write_file", path="notes/todo.txt", content="done\n"))
        assert "wrote 5 chars" in obs.text
        obs = await env.step(call("read_file", path="missing.txt"))
        assert obs.text.startswith("error: cannot read missing.txt")
        # two calls in one message, both run in order
        obs = await env.step(call("run_tests") + "\n" + call("bash", command="cat notes/todo.txt"))
        assert "1 passed, 0 failed" in obs.text and obs.text.rstrip().endswith("done")

        obs = await env.step(call("submit"))
        assert obs.done and verdict_of(obs) is not None and reward_of(obs) is not None
        assert verdict_of(obs).error is None and verdict_of(obs).passed, verdict_of(obs)
        assert reward_of(obs).outcome == 1.0 and reward_of(obs).total >= 1.0
        assert finish_reason_of(obs) == "submitted" and error_of(obs) is None
        counters = env.counters
        assert counters["invalid_calls"] == 5
        assert counters["tool_calls"] == 12  # 3 + 3 edits + python + write + read + run_tests + bash + submit
        assert counters["tool_errors"] == 4  # failed run_tests, 2 bad edits, missing read
        assert counters["tool/edit_file"] == 3 and counters["tool/submit"] == 1
        tools = [a.tool for a in env.actions]
        assert tools.count("run_tests") == 2 and tools[-1] == "submit"
        assert sum(not a.ok for a in env.actions) == 4 + 4  # errors + invalid calls that named a tool
        edit = [a for a in env.actions if a.tool == "edit_file"]
        assert [a.changed_workspace for a in edit] == [False, False, True]
        # after the end: an observation, not an exception
        again = await env.step(call("bash", command="ls"))
        assert again.done and again.end is None
    finally:
        await env.close()


async def test_wrong_fix_fails_hidden_tests(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, CFG, sandbox_config)
    try:
        await env.reset(code_task())
        # passes the visible test only
        await env.step(call("write_file", path="solution.py", content="def add(a, b):\n    return 3\n"))
        obs = await env.step(call("submit"))
        assert obs.done and verdict_of(obs) is not None and not verdict_of(obs).passed
        assert reward_of(obs) is not None and reward_of(obs).total == 0.0 and verdict_of(obs).error is None
    finally:
        await env.close()


async def test_turn_limit_grades_workspace(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, EnvConfig(kind="tool", max_turns=2), sandbox_config)
    try:
        await env.reset(code_task())
        obs = await env.step(call("edit_file", path="solution.py", old="a - b", new="a + b"))
        assert not obs.done
        obs = await env.step(call("bash", command="true"))
        assert obs.done and finish_reason_of(obs) == "max_turns"
        assert verdict_of(obs) is not None and verdict_of(obs).passed
    finally:
        await env.close()


async def test_time_limit_and_long_output_truncated(grader: Grader, sandbox_config) -> None:
    cfg = EnvConfig(kind="tool", max_episode_s=1.5, observation_budget_chars=500, grade_on_limit=False)
    env = ToolEnv(grader, cfg, sandbox_config)
    try:
        await env.reset(code_task())
        obs = await env.step(call("python", code="print('A' * 50000)\nprint('THE END')"))
        assert len(obs.text) <= 500 and "chars dropped" in obs.text
        assert obs.text.startswith("[exit 0]\nAAAA") and obs.text.endswith("THE END")
        obs = await env.step(call("bash", command="sleep 5"))  # the episode's clock caps the command
        assert (
            obs.done
            and finish_reason_of(obs) == "time_limit"
            and verdict_of(obs) is None
            and reward_of(obs).outcome == 0.0
        )  # type: ignore[union-attr]
        assert env.elapsed_s() < 4.5
    finally:
        await env.close()


@pytest.mark.parametrize("fmt", ["json_tags", "xml"])
async def test_configured_format_only(grader: Grader, sandbox_config, fmt: str) -> None:
    env = ToolEnv(grader, EnvConfig(kind="tool", tool_format=fmt), sandbox_config)  # type: ignore[arg-type]
    other = "xml" if fmt == "json_tags" else "json_tags"
    try:
        await env.reset(code_task())
        obs = await env.step(call("bash", fmt=fmt, command="echo ok"))
        assert obs.text == "[exit 0]\nok"
        obs = await env.step(call("bash", fmt=other, command="echo ok"))
        assert obs.text.startswith("error:")
    finally:
        await env.close()


async def test_bad_paths_are_tool_errors_not_episode_errors(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, CFG, sandbox_config)
    try:
        await env.reset(code_task())
        for text in (
            call("read_file", path="/etc/passwd"),
            call("read_file", path="../../etc/passwd"),
            call("write_file", path="../escape.txt", content="x"),
            call("read_file", path="notes"),  # a directory
            call("edit_file", path="notes", old="a", new="b"),
            call("write_file", path="solution.py/inner", content="x"),
        ):
            obs = await env.step(text)
            assert not obs.done and obs.text.startswith("error:"), obs.text
        assert env.counters["tool_errors"] == 6 and not env.failed
        await env.step(call("bash", command="rm solution.py && mkdir solution.py"))
        obs = await env.step(call("submit"))  # the solution path is a directory: graded, fails, no crash
        assert obs.done and verdict_of(obs) is not None and not verdict_of(obs).passed
    finally:
        await env.close()


async def test_time_spent_generating_counts(grader: Grader, sandbox_config) -> None:
    cfg = EnvConfig(kind="tool", max_episode_s=0.3, grade_on_limit=False)
    env = ToolEnv(grader, cfg, sandbox_config)
    try:
        await env.reset(code_task())
        await asyncio.sleep(0.4)  # the policy took too long
        obs = await env.step(call("write_file", path="late.txt", content="x"))
        assert (
            obs.done
            and finish_reason_of(obs) == "time_limit"
            and verdict_of(obs) is None
            and reward_of(obs).outcome == 0.0
        )  # type: ignore[union-attr]
        with pytest.raises(FileNotFoundError):
            await env.sandbox.read("late.txt")  # type: ignore[union-attr]
    finally:
        await env.close()


async def test_surplus_calls_in_one_message_are_invalid(grader: Grader, sandbox_config) -> None:
    env = ToolEnv(grader, EnvConfig(kind="tool", max_calls_per_turn=2), sandbox_config)
    try:
        await env.reset(code_task())
        obs = await env.step("".join(call("bash", command=f"echo {i}") for i in range(4)))
        assert obs.text.split("\n")[:4] == ["[exit 0]", "0", "[exit 0]", "1"]
        assert "only 2 tool calls per message" in obs.text
        assert env.counters["tool_calls"] == 2 and env.counters["invalid_calls"] == 1
    finally:
        await env.close()


async def test_a_host_side_tool_bug_is_the_environments_failure_not_the_sandboxes(
    grader: Grader, sandbox_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception in a tool's own code on the host ends the episode as `env/tool_crashed`; one the
    sandbox backend raises as `sandbox/crashed`. Either way the episode ends with the error as data."""
    import trialground.envs.tools.base as tools

    def broken_render(*_a: object, **_k: object) -> str:
        raise ValueError("host-side rendering bug")

    env = ToolEnv(grader, CFG, sandbox_config)
    try:
        await env.reset(code_task())
        with monkeypatch.context() as m:
            m.setattr(tools, "render_exec", broken_render)
            obs = await env.step(call("bash", command="echo hi"))
        err = error_of(obs)
        assert obs.done and err is not None, obs
        assert (err.boundary, err.kind) == ("env", "tool_crashed"), err
        assert "bash: ValueError: host-side rendering bug" in err.message
    finally:
        await env.close()

    env = ToolEnv(grader, CFG, sandbox_config)
    try:
        await env.reset(code_task())
        sandbox = env.sandbox
        assert sandbox is not None

        async def lost(*_a: object, **_k: object) -> object:
            raise ConnectionResetError("backend connection lost")

        monkeypatch.setattr(sandbox, "exec", lost)
        obs = await env.step(call("bash", command="echo hi"))
        err = error_of(obs)
        assert obs.done and err is not None, obs
        assert (err.boundary, err.kind) == ("sandbox", "crashed"), err
        assert "sandbox exec failed: ConnectionResetError: backend connection lost" in err.message
        monkeypatch.undo()  # the real exec again, for the close
    finally:
        await env.close()


async def test_hostile_json_in_a_call_is_the_models_failure_with_a_reward(
    grader: Grader, sandbox_config
) -> None:
    """A 5,000-digit integer and 5,000-deep JSON used to raise out of `step` (an infrastructure error the
    episode escaped its reward by); now each is an invalid call, and the episode ends with a reward."""
    from trialground.envs.base import EpisodeEnd
    from trialground.orchestrator.metrics import rollout_metrics
    from trialground.rollout.trajectory import Trajectory

    env = ToolEnv(grader, EnvConfig(kind="tool", max_turns=3), sandbox_config)
    try:
        await env.reset(code_task())
        big = (
            '<tool_call>{"name": "bash", "arguments": {"command": "ls", "n": ' + "9" * 5000 + "}}</tool_call>"
        )
        deep = '<tool_call>{"name": "bash", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>"
        obs = await env.step(big)
        assert "usable JSON" in obs.text and not obs.done
        obs = await env.step(deep)
        assert "usable JSON" in obs.text and not obs.done
        obs = await env.step(call("bash", command="true"))
        assert obs.done and error_of(obs) is None and finish_reason_of(obs) == "max_turns"
        assert reward_of(obs) is not None
        end = obs.end
        assert isinstance(end, EpisodeEnd) and (end.invalid_calls, end.tool_calls) == (2, 1)
        traj = Trajectory(task_id="t", group_id="g", sample_index=0, policy_version=0, end=end)
        metrics = rollout_metrics([[traj]], {}, 0)
        assert metrics["env/error_rate"] == 0.0
        assert metrics["env/invalid_action_rate"] == pytest.approx(2 / 3)
    finally:
        await env.close()
