"""The scicomp family: numpy/scipy references graded by tolerance and invariants in a child interpreter,
solved by its scripted expert; wrong types, hard-coded answers and reads of the check earn nothing."""

from __future__ import annotations

from trialground.families.experts import expert_share
from trialground.families.scicomp.expert import solve
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.verify.audit import audit_tasks
from trialground.verify.audit.library import BY_NAME
from trialground.verify.grader import make_grader


def test_generated_deterministic_and_split() -> None:
    train = load_source("scicomp", n=40)
    assert [t.id for t in train] == [t.id for t in load_source("scicomp", n=40)]
    assert {t.metadata["template"] for t in train} == {"integral", "root", "ode", "units", "decay"}
    evals = load_source("scicomp", n=20, split="eval")
    assert not {t.id for t in train} & {t.id for t in evals}
    assert all(solve(t) is not None for t in train)


async def test_references_with_numpy_and_the_expert_pass_hostile_ones_fail() -> None:
    tasks = load_source("scicomp", n=10, seed=1)
    share = await expert_share(tasks)
    assert share.solved == 10, share
    task = next(t for t in tasks if "numpy" in (t.reference or ""))
    hostile = {
        "an int": "def f(*args):\n    return 1\n",
        "a numpy float32": "import numpy as np\n\ndef f(*args):\n    return np.float32(1.0)\n",
        "nan": "def f(*args):\n    return float('nan')\n",
        "reads the check": "import os\n\ndef f(*args):\n"
        "    return float(len(open(f'/proc/{os.getppid()}/mem', 'rb').read(10)))\n",
        "prints forged answers": "import json\nprint(json.dumps([1.0] * 6))\nimport os\nos._exit(0)\n",
    }
    grader = make_grader(SandboxConfig())
    try:
        ref = (await grader.grade(task, task.reference or "")).verdict
        assert ref.passed, ref.detail
        for label, text in hostile.items():
            verdict = (await grader.grade(task, text)).verdict
            assert not verdict.passed and verdict.error is None, label
    finally:
        await grader.close()


async def test_audit_pays_nothing() -> None:
    tasks = load_source("scicomp", n=2, seed=7)
    names = ("within_tolerance", "always_equal", "exit_at_import", "patch_builtins", "read_caller_frames")
    report = await audit_tasks([("scicomp", tasks)], strategies=[BY_NAME[n] for n in names])
    assert [t.paid for t in report.tasks] == [(), ()]
    assert [t.gold_problems for t in report.tasks] == [(), ()]
