"""One member of a micro-batch cannot change another member's verdict, nor turn its own failure into an
infrastructure error (real bwrap sandboxes; attacks bypass the worker's audit hook where they can).

Each attack is graded in a batch between five HumanEval canonical solutions: the siblings must pass and
the attacker must get a failed verdict (no error), flagged where named.
"""

from __future__ import annotations

import asyncio

import pytest
from isolation_suite import SPAWN
from reward_helpers import grade_and_score

from trialground.families.humaneval.source import humaneval_tasks
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.verdict import Verdict

pytestmark = pytest.mark.security

ENTRY = "def truncate_number(number):\n    return number % 1.0 + 0.5\n"  # wrong: fails on its own
ATTACKS: dict[str, tuple[str, str | None]] = {
    "killpg_own_group": (SPAWN + "spawn('kill -9 0', setsid=False)\n" + ENTRY, None),
    "killpg_hooked": ("import os\n\ndef truncate_number(number):\n    os.killpg(0, 9)\n", "early_exit"),
    "kill_minus_one_hooked": ("import os\nos.kill(-1, 9)\n" + ENTRY, "early_exit"),
    "kill_minus_one_shell": (
        SPAWN + "spawn('kill -9 -1; sleep 1')\nimport time\ntime.sleep(2)\n" + ENTRY,
        None,
    ),
    "kill_every_pidfd": (
        "import os, signal\n\ndef truncate_number(number):\n    for p in range(1, 300):\n        try:\n"
        "            signal.pidfd_send_signal(os.pidfd_open(p), 9)\n"
        "        except OSError:\n            pass\n",
        "runner_tampering",
    ),
    "deep_tree_tmp": (
        "import os\nos.chdir('/tmp')\nfor i in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\n" + ENTRY,
        None,
    ),
    "deep_tree_workspace_locked": (
        "import os\nfor i in range(3000):\n    os.mkdir('dd')\n    os.chdir('dd')\n"
        "open('x', 'w').write('x')\nos.chmod('.', 0)\nos.chdir('/dev/shm')\nfor i in range(1400):\n"
        "    os.mkdir('e')\n    os.chdir('e')\nos.symlink('/workspace', 'ws')\n" + ENTRY,
        None,
    ),
    "fork_bomb_detached": (
        SPAWN + "for i in range(40):\n    spawn('sleep 1000 & sleep 1000')\n" + ENTRY,
        None,
    ),
    "fork_bomb_to_the_limit": (
        SPAWN + "for i in range(200):\n    try:\n        spawn('sleep 1000 & sleep 1000 & sleep 1000')\n"
        "    except OSError:\n        break\n" + ENTRY,
        None,
    ),
    "detached_rewriter": (
        SPAWN + "spawn('while :; do echo x > /workspace/solution.py; echo y > /tmp/z; done')\n" + ENTRY,
        None,
    ),
    "fill_tmp_and_shm": (
        "def fill(path):\n    with open(path, 'wb') as f:\n        try:\n            for i in range(300):\n"
        "                f.write(b'x' * (1 << 20))\n        except OSError:\n            pass\n\n"
        "fill('/tmp/fill')\nfill('/dev/shm/fill')\n" + ENTRY,
        None,
    ),
    "memory_hog": ("def truncate_number(number):\n    x = bytearray(3 << 30)\n    return len(x)\n", None),
    "memory_hog_at_import": ("blocks = [bytearray(64 << 20) for _ in range(64)]\n" + ENTRY, None),
    "forge_out_of_range_indices": (
        "import os, signal\n\ndef truncate_number(number):\n"
        "    def handler(sig, frame):\n        f = frame\n        while f is not None:\n"
        "            for v in list(f.f_locals.values()):\n                if callable(v):\n"
        "                    for i in (10 ** 9, -5, 2 ** 70):\n                        try:\n"
        "                            v({'t': 'result', 'i': i, 'outcome': 'passed', 'detail': '', 's': 0.0,"
        " 'flags': []})\n                        except BaseException:\n                            pass\n"
        "            f = f.f_back\n"
        "    signal.signal(signal.SIGPROF, handler)\n    signal.setitimer(signal.ITIMER_PROF, 0.001)\n"
        "    for fd in range(3, 64):\n        try:\n"
        "            os.write(fd, b'0' * 64 + b' 7b2274223a2022726573756c74222c202269223a20393939397d\\n')\n"
        "        except OSError:\n            pass\n    return 0.0\n",
        "runner_tampering",
    ),
}
SIBLINGS = (0, 1, 3, 4, 5)


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return humaneval_tasks()


async def _batch(tasks: list[Task], source: str, grading: GradingConfig) -> list[Verdict]:
    grader = make_grader(SandboxConfig(), RewardConfig(grading=grading))
    try:
        items = [(tasks[i], tasks[i].reference or "") for i in SIBLINGS[:2]]
        items.append((tasks[2], source))
        items += [(tasks[i], tasks[i].reference or "") for i in SIBLINGS[2:]]
        out = await grader.resource("code_tests").verifier.verify_many(items)
    finally:
        await grader.close()
    assert all(isinstance(v, Verdict) for v in out), out
    return out  # type: ignore[return-value]


def _check(out: list[Verdict], flag: str | None) -> None:
    siblings = [v for k, v in enumerate(out) if k != 2]
    assert all(v.passed and v.error is None and not v.flags for v in siblings), [
        (v.detail, v.flags) for v in siblings
    ]
    attacker = out[2]
    assert attacker.error is None, attacker.error
    assert not attacker.passed
    if flag is not None:
        assert flag in {f.name for f in attacker.flags}, attacker.flags


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_a_member_cannot_spoil_its_batch(name: str, tasks: list[Task]) -> None:
    source, flag = ATTACKS[name]
    _check(await _batch(tasks, source, GradingConfig(test_timeout_s=5.0, total_timeout_s=40.0)), flag)


@pytest.mark.slow
async def test_stopping_every_process_delays_but_does_not_decide(tasks: list[Task]) -> None:
    source = SPAWN + "spawn('kill -STOP -1')\nimport time\ntime.sleep(1)\n" + ENTRY
    _check(await _batch(tasks, source, GradingConfig(test_timeout_s=5.0, total_timeout_s=8.0)), None)


async def test_a_dirty_sandbox_is_never_reused() -> None:
    # the attacker fills /tmp and /dev/shm, then kills its runner so nothing is wiped; the sandbox it ran
    # in must be discarded, not restored for the next grading
    listing = Task(
        domain="code",
        prompt="list",
        hidden_checks={
            "test_hidden.py": "import solution\n\ndef test_clean():\n"
            "    assert solution.listing() == (['solution.py'], [], [])\n"
        },
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 1}),
    )
    snoop = (
        "import os\n\ndef listing():\n"
        "    return sorted(os.listdir('.')), os.listdir('/tmp'), os.listdir('/dev/shm')\n"
    )
    dirty = SPAWN + "open('/tmp/junk', 'w').write('x')\nopen('/dev/shm/junk', 'w').write('x')\n"
    dirty += "spawn('kill -9 -1')\nimport time\ntime.sleep(2)\n" + snoop
    grader = make_grader(
        SandboxConfig(), RewardConfig(grading=GradingConfig(reuse_sandboxes=1, max_parallel=1))
    )
    try:
        for _ in range(3):
            bad, _ = await grade_and_score(grader, listing, dirty)
            assert not bad.passed and bad.error is None
            good = await asyncio.gather(*(grade_and_score(grader, listing, snoop) for _ in range(3)))
            assert all(v.passed for v, _ in good), [v.tests for v, _ in good]
    finally:
        await grader.close()
