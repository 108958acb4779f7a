"""How a repository task's tests are run: one command, shared by the grader and the agent's `run_tests` tool.

`test_runs(task)` splits a task's FAIL_TO_PASS and PASS_TO_PASS node ids into runs, each one process:
every FAIL_TO_PASS test alone (at most `MAX_ISOLATED` runs; more are spread over that many), then the
PASS_TO_PASS tests of each test file together. Each run is

    python3 -I -S .tg/pytest.py -q -rfE [the repository's pytest_args] <node ids>

in /workspace with `TEST_ENV`, the environment the agent's tools run every program with: a grading and an
agent's own run see the same command, the same variables and the same files. The bundled launcher makes
the exit status 0 only when every named node id ran and passed (`bundle.LAUNCHER_SOURCE`), so whoever
runs it reads the verdict from the exit status the sandbox's supervisor observed, never from a report the
process wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trialground.tasks.model import Task
from trialground.tasks.swe.bundle import LAUNCHER
from trialground.tasks.swe.repos import repo_spec
from trialground.tasks.verifiers import SweTestsParams

MAX_ISOLATED = 8
# The agent's tools run every program with exactly these variables (`trialground.envs.tools`); so does
# grading, so nothing in the process can tell the two apart by its environment.
TEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class TestRun:
    """One process of a task's test runs: which group it belongs to and the node ids it names."""

    group: str  # "fail_to_pass" or "pass_to_pass"
    tests: tuple[str, ...]
    args: tuple[str, ...] = ()  # the repository's own pytest arguments (`RepoSpec.pytest_args`)

    @property
    def argv(self) -> list[str]:
        return ["python3", "-I", "-S", LAUNCHER, "-q", "-rfE", *self.args, *self.tests]

    @property
    def label(self) -> str:
        first = (
            self.tests[0] if len(self.tests) == 1 else f"{len(self.tests)} tests of {_file(self.tests[0])}"
        )
        return f"{self.group}: {first}"


def _file(node_id: str) -> str:
    return node_id.split("::", 1)[0]


def _spread(tests: Sequence[str], parts: int) -> list[tuple[str, ...]]:
    parts = max(1, min(parts, len(tests)))
    return [tuple(tests[i::parts]) for i in range(parts)]


def test_runs(task: Task) -> list[TestRun]:
    """The runs of `task` (see the module docstring), FAIL_TO_PASS first."""
    params = task.verifier.params_as(SweTestsParams)
    args = repo_spec(params.repo).pytest_args
    f2p, p2p = list(params.fail_to_pass), list(params.pass_to_pass)
    runs = [TestRun("fail_to_pass", group, args) for group in _spread(f2p, MAX_ISOLATED)] if f2p else []
    by_file: dict[str, list[str]] = {}
    for t in p2p:
        by_file.setdefault(_file(t), []).append(t)
    runs += [TestRun("pass_to_pass", tuple(tests), args) for _, tests in sorted(by_file.items())]
    return runs
