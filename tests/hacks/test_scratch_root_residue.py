"""What a submission leaves on the scratch directories themselves (not in them) does not reach the next
grading of a reused sandbox: extended attributes, mode and times of /tmp, /dev/shm and /workspace are set
back at every restore and between the members of a batch (`sandbox/backends/bwrap/reset.py`, `restore_top`).

Emptying a directory keeps the directory; a value an occupant leaves on it (an xattr, a future access
time, a mode) is a memory across gradings, enough to learn a sealed answer one grading at a time."""

from __future__ import annotations

import asyncio

import pytest
from reward_helpers import grade_and_score

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import make_grader

pytestmark = pytest.mark.slow

TOPS = ("/tmp", "/dev/shm", "/workspace")
TASK = Task(
    domain="code",
    prompt="what the scratch directories look like",
    hidden_checks={
        "test_hidden.py": "import solution\n\n\ndef test_clean():\n    assert solution.seen() == []\n"
    },
    verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
)
PLANT = f"""
import os
for top in {TOPS!r}:
    for name, call in (("xattr", lambda: os.setxattr(top, "user.tg", b"1")),
                       ("time", lambda: os.utime(top, (4000000000, 4000000000))),
                       ("mode", lambda: os.chmod(top, 0o000 if top == "/dev/shm" else 0o701))):
        try:
            call()
        except OSError:
            pass

def seen():
    return ["planted"]
"""
PROBE = f"""
import os

def seen():
    out = []
    for top in {TOPS!r}:
        st = os.stat(top)
        out += [f"{{top}}: xattr {{n}}" for n in os.listxattr(top)]
        out += [f"{{top}}: time"] if max(st.st_atime, st.st_mtime) >= 4000000000 else []
        out += [f"{{top}}: mode {{st.st_mode & 0o7777:o}}"] if st.st_mode & 0o7777 != 0o755 else []
    return out
"""


def _grader(max_batch: int):  # type: ignore[no-untyped-def]
    grading = GradingConfig(reuse_sandboxes=1, max_parallel=1, max_batch=max_batch)
    return make_grader(SandboxConfig(), RewardConfig(grading=grading))


def test_the_next_grading_after_a_restore_sees_the_roots_as_made() -> None:
    async def go() -> list[bool]:
        grader = _grader(1)
        try:
            out = []
            for source in (PROBE, PLANT, PROBE):
                verdict, _ = await grade_and_score(grader, TASK, source)
                out.append(verdict.passed)
                if source is PROBE and not verdict.passed:
                    print(verdict.tests[0].detail)
            return out
        finally:
            await grader.close()

    assert asyncio.run(go()) == [True, False, True]


def test_the_next_member_of_a_batch_sees_the_roots_as_made() -> None:
    async def go() -> list[bool]:
        grader = _grader(8)
        try:
            verdicts = await grader.resource("code_tests").verifier.verify_many(
                [(TASK, PLANT), (TASK, PROBE), (TASK, PROBE)]
            )
            for v in verdicts[1:]:
                if not v.passed:
                    print(v.tests[0].detail)
            return [v.passed for v in verdicts]
        finally:
            await grader.close()

    assert asyncio.run(go()) == [False, True, True]
