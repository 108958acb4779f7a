"""check_program: the task's check programs against the episode's files, in fresh bwrap sandboxes."""

from __future__ import annotations

import pytest
from reward_helpers import grade_and_score

from trialground.sandbox.base import SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.grader import Grader, make_grader

CHECK_SH = "set -e\ngrep -qx 'port=8080' service.ini\n"
CHECK_PY = (
    "import configparser, sys\nc = configparser.ConfigParser()\n"
    "c.read_string('[s]\\n' + open('service.ini').read())\n"
    "sys.exit(0 if c['s'].getint('workers') >= 1 else 1)\n"
)


def ops_task() -> Task:
    return Task(
        domain="ops",
        prompt="the service does not start; fix service.ini",
        files={"service.ini": "port=99999\nworkers=0\n"},
        hidden_checks={"check_port.sh": CHECK_SH, "check_workers.py": CHECK_PY},
        reference="port=8080\nworkers=2\n",
        verifier=VerifierSpec(kind="check_program", params={"solution_path": "service.ini"}),
    )


@pytest.fixture
async def grader():  # type: ignore[no-untyped-def]
    g = make_grader(SandboxConfig())
    yield g
    await g.close()


async def test_fixed_file_passes_every_check(grader: Grader) -> None:
    verdict, reward = await grade_and_score(grader, ops_task(), "port=8080\nworkers=2\n")
    assert verdict.passed and reward.total == 1.0
    assert [t.name for t in verdict.tests] == ["check_port.sh", "check_workers.py"]


async def test_untouched_or_half_fixed_fails(grader: Grader) -> None:
    verdict, _ = await grade_and_score(grader, ops_task(), "port=99999\nworkers=0\n")
    assert not verdict.passed and verdict.score == 0.0
    verdict, _ = await grade_and_score(grader, ops_task(), "port=8080\nworkers=0\n")
    assert not verdict.passed and verdict.score == 0.5


async def test_checks_run_on_a_fork_of_the_agent_workspace(grader: Grader) -> None:
    task = ops_task()
    async with await open_sandbox(SandboxConfig(), task.files) as agent:
        await agent.write("service.ini", "port=8080\nworkers=3\n")
        await agent.write("sitecustomize.py", "import sys; sys.exit(0)\n")  # must not affect `python3 -I`
        verdict, reward = await grade_and_score(grader, task, "", workspace=agent)
        assert (
            await agent.read("service.ini") == b"port=8080\nworkers=3\n"
        )  # the agent's sandbox is untouched
        with pytest.raises(FileNotFoundError):
            await agent.read("check_port.sh")  # hidden checks never entered it
    assert verdict.score == 1.0  # both checks passed: the planted sitecustomize.py had no effect ...
    assert "test_tampering" in {f.name for f in verdict.flags}  # ... but it is flagged, and a hack never pays
    assert not verdict.passed and reward.total == 0.0
