"""Host-side work that a submission controls is bounded, and its failures are failed verdicts.

A task's answer regex runs on the host against text the policy wrote: a backtracking engine runs for ever
on `(a+)+b` against a run of `a`s, and answer extraction was quadratic in newlines (seconds of blocked
event loop). A 5,000-digit fraction must be a wrong answer, not an infrastructure error (which would
leave the sample out of the baseline and dodge its negative advantage). `read_file` shows a bounded part
of a huge file instead of reading all of it onto the host.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reward_helpers import grade_and_score

from trialground.sandbox.base import Limits, Sandbox, SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader

ROOT = Path(__file__).resolve().parents[2]


def _task(kind: str, **params: object) -> Task:
    return Task(domain="qa", prompt="?", verifier=VerifierSpec(kind=kind, params=params))


def test_catastrophic_regex_is_linear() -> None:
    # In a child process, so that a backtracking engine can be killed when it never finishes.
    script = (
        "from trialground.verify.kinds.answers import verify_regex\n"
        "from trialground.tasks.model import Task, VerifierSpec\n"
        "spec = VerifierSpec(kind='regex', params={'pattern': '(a+)+b'})\n"
        "t = Task(domain='qa', prompt='?', verifier=spec)\n"
        "print(verify_regex(t, 'Answer: ' + 'a' * 5000).passed)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a backtracking regex ran for over 120 s on 5,000 characters")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "task",
    [
        _task("regex", pattern=r"\s*answer\s*", flags="m"),
        _task("regex", pattern=r"(?:^\s*$)*x", flags="m"),
        _task("exact", answer="42"),
        _task("numeric", answer=42),
    ],
    ids=["regex_m", "regex_m_lines", "exact", "numeric"],
)
async def test_many_newlines_never_block_the_event_loop(task: Task) -> None:
    grader = make_grader(SandboxConfig(), RewardConfig())
    gaps: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(stop))
    try:
        await asyncio.sleep(0.05)
        verdict = (await grader.grade(task, "\n" * 20_000 + "answer: 7\n" + "\n" * 20_000)).verdict
    finally:
        stop.set()
        await tick
        await grader.close()
    assert verdict.error is None and not verdict.passed
    assert max(gaps) < 5.0, f"event loop blocked for {max(gaps):.1f} s"


@pytest.mark.parametrize(
    "answer",
    ["1" * 5000 + "/3", "3/" + "7" * 5000, "1" + "0" * 400 + "/3", "9" * 5000, "1e999999"],
    ids=["huge_numerator", "huge_denominator", "overflowing_quotient", "huge_integer", "huge_exponent"],
)
async def test_unrepresentable_numbers_are_wrong_answers(answer: str) -> None:
    grader = make_grader(SandboxConfig(), RewardConfig())
    try:
        verdict, reward = await grade_and_score(grader, _task("numeric", answer=0.75), f"Answer: {answer}")
    finally:
        await grader.close()
    assert verdict.error is None, verdict.error
    assert not verdict.passed and reward.total == 0.0


def count_reads(sandbox: Sandbox) -> list[int]:
    """The sizes of what reaches the host through the sandbox's own `read`, from now on (the real read
    still does the reading)."""
    reads: list[int] = []
    real_read = sandbox.read

    async def counted(path: str, limit: int | None = None) -> bytes:
        data = await real_read(path, limit)
        reads.append(len(data))
        return data

    sandbox.read = counted  # type: ignore[method-assign]
    return reads


@pytest.mark.security
async def test_read_file_never_reads_a_huge_file_onto_the_host(sandbox: Sandbox) -> None:
    from trialground.envs.tools.registry import run_named
    from trialground.envs.tools.toolbox import READ_FILE_MAX_BYTES, Toolbox

    size = 60 << 20
    make = f"f = open('big.log', 'wb'); f.write(b'HEAD'); f.seek({size}); f.write(b'TAIL'); f.close()"
    res = await sandbox.exec(["python3", "-c", make], cwd="/workspace")
    assert res.ok, res.stderr
    box = Toolbox(sandbox, _task("exact", answer="x"), Limits())
    reads = count_reads(sandbox)
    out = await run_named(box, "read_file", {"path": "big.log"}, wall_s=10.0)
    assert out.ok, out.text
    assert len(out.text) <= READ_FILE_MAX_BYTES + 200
    assert out.text.startswith("HEAD") and out.text.endswith("TAIL") and "bytes not shown" in out.text
    edit = await run_named(box, "edit_file", {"path": "big.log", "old": "HEAD", "new": "BODY"}, wall_s=10.0)
    assert not edit.ok and "edits files up to" in edit.text
    over = await run_named(box, "write_file", {"path": "big.log", "content": "short\n"}, wall_s=10.0)
    assert over.ok and over.changed_workspace
    small = await run_named(box, "write_file", {"path": "small.txt", "content": "hello\n"}, wall_s=10.0)
    assert small.ok
    assert (await run_named(box, "read_file", {"path": "small.txt"}, wall_s=10.0)).text == "hello\n"
    assert max(reads) <= READ_FILE_MAX_BYTES, reads  # read_file, edit_file and write_file alike
    # Outside the workspace and through a symlink: still refused, as for a small file.
    assert (await sandbox.exec(["ln", "-s", "big.log", "link.log"], cwd="/workspace")).ok
    for path in ("link.log", "/etc/passwd", "../../etc/passwd"):
        assert not (await run_named(box, "read_file", {"path": path}, wall_s=10.0)).ok, path


@pytest.mark.security
async def test_workspace_reads_at_grading_are_bounded_per_file_and_in_all(sandbox: Sandbox) -> None:
    """Sparse files and hard links cost a sandbox no disk, and the host a file's whole size at each path:
    a repository task's grading reads each file up to a limit and the workspace up to a budget (over it:
    `WorkspaceTooLarge`, a failed verdict), and the tamper check reads a visible check up to its own size."""
    from trialground.verify.detectors.tamper import workspace_flags
    from trialground.verify.kinds.swe_tests import WorkspaceTooLarge, workspace_changes

    plant = "truncate -s 3M pkg/big.py && for i in 1 2 3 4 5; do ln pkg/big.py pkg/big$i.py; done"
    assert (await sandbox.exec(["sh", "-c", f"mkdir pkg && {plant}"], cwd="/workspace")).ok
    await sandbox.write("pkg/ok.py", "x = 2\n")
    reads = count_reads(sandbox)
    start = {"pkg/ok.py": "x = 1\n"}
    # each big file over the per-file limit: as if gone (they were not there at the start: no change)
    assert await workspace_changes(start, sandbox, file_limit=1 << 20, budget=64 << 20) == {
        "pkg/ok.py": "x = 2\n"
    }
    assert max(reads) <= 1 << 20
    reads.clear()
    with pytest.raises(WorkspaceTooLarge):  # each under the per-file limit, together over the budget
        await workspace_changes(start, sandbox, file_limit=4 << 20, budget=8 << 20)
    assert sum(reads) <= 8 << 20, reads
    reads.clear()
    check = "def test_x():\n    assert True\n"
    task = Task(
        domain="code",
        prompt="p",
        visible_checks={"pkg/big.py": check},
        verifier=VerifierSpec(kind="code_tests"),
    )
    flags = await workspace_flags(task, sandbox)
    assert any(f.name == "test_tampering" and "pkg/big.py" in f.evidence for f in flags), flags
    assert max(reads, default=0) <= len(check) + 1, reads


@pytest.mark.security
async def test_a_task_file_larger_than_the_per_file_limit_is_read_whole(sandbox: Sandbox) -> None:
    """The per-file limit bounds what a submission adds; a file of the task itself is read up to twice its
    size, so a large library file, unchanged or edited, is not taken for a deleted one."""
    from trialground.verify.kinds.swe_tests import workspace_changes

    big = "x = 1\n" * 50_000  # 300 kB
    start = {"pkg/big.py": big}
    await sandbox.write("pkg/big.py", big)
    assert await workspace_changes(start, sandbox, file_limit=64 << 10, budget=8 << 20) == {}
    await sandbox.write("pkg/big.py", big + "y = 2\n")
    assert await workspace_changes(start, sandbox, file_limit=64 << 10, budget=8 << 20) == {
        "pkg/big.py": big + "y = 2\n"
    }
