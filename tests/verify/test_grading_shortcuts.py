"""Gradings decided without a sandbox run of their own: a solution that does not compile (failed on the host
exactly as the runner fails it, once the sandbox's Python is known to be the host's build) and identical
submissions in flight together (one run, one verdict). Real sandboxes throughout."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from reward_helpers import step_metrics

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.detectors.exit_early import compile_flags
from trialground.verify.grader import Grader, make_grader
from trialground.verify.kinds.code_tests import import_failure
from trialground.verify.validate import Validator

HIDDEN_A = (
    "from solution import f\n\n\ndef test_one():\n    assert f(1) == 2\n\n\n"
    "def test_two():\n    assert f(2) == 3\n"
)
HIDDEN_B = "from solution import f\n\n\ndef test_three():\n    assert f(10) == 11\n"
VISIBLE = "from solution import f\n\n\ndef test_seen():\n    assert f(0) == 1\n"
GOOD = "def f(x):\n    return x + 1\n"
# what a sampled program gets wrong: syntax, indentation, a NUL byte, a coding cookie its bytes break
BROKEN = [
    "def f(x) return x + 1\n",
    "def f(x):\nreturn x + 1\n",
    "def f(x):\n    return x + 1\x00\n",
    "# -*- coding: ascii -*-\ndef f(x):\n    return x + 1  # \u00e9\n",
    "def f(x):\n    return (x + 1\n",
]


def task(**params: object) -> Task:
    return Task(
        domain="code",
        prompt="f(x) = x + 1",
        hidden_checks={"test_a.py": HIDDEN_A, "test_b.py": HIDDEN_B},
        visible_checks={"test_visible.py": VISIBLE},
        verifier=VerifierSpec(kind="code_tests", params={"expected_tests": 3, **params}),
    )


def grader_with(**grading: object) -> Grader:
    return make_grader(SandboxConfig(), RewardConfig(grading=GradingConfig(**grading)))


async def test_a_solution_that_does_not_compile_gets_the_runners_verdict_from_the_host() -> None:
    sandboxed, host = grader_with(precheck_syntax=False), grader_with()
    t = task()
    try:
        first = await host.grade(t, BROKEN[0])  # the sandbox's Python is not known yet: it runs there
        assert first.verdict.shortcut == "" and not first.verdict.passed
        assert host.resource("code_tests").verifier.sandbox_python is not None
        assert (await host.grade(t, GOOD)).verdict.passed
        for text in BROKEN:
            want = (await sandboxed.grade(t, text)).verdict
            got = (await host.grade(t, text)).verdict
            assert want.shortcut == "" and got.shortcut == "host_syntax", text
            assert got.model_dump(exclude={"shortcut"}) == want.model_dump(exclude={"shortcut"}), text
            assert not got.passed and got.score == 0.0
            assert [r.outcome for r in got.tests] == ["error"] * 4  # three hidden, the visible one
            assert got.tests[0].detail.startswith("importing solution: ")
        assert (await host.grade(t, GOOD)).verdict.shortcut == ""  # what compiles always runs
    finally:
        await sandboxed.close()
        await host.close()


async def test_the_host_decides_only_for_its_own_python_build() -> None:
    g = grader_with()
    try:
        await g.grade(task(), GOOD)
        g.resource("code_tests").verifier.sandbox_python = "3.11.0 (another build)"
        verdict = (await g.grade(task(), BROKEN[0])).verdict
    finally:
        await g.close()
    assert verdict.shortcut == "" and not verdict.passed
    assert (
        g.resource("code_tests").verifier.sandbox_python != "3.11.0 (another build)"
    )  # learnt again from the report


def test_an_import_that_could_find_another_module_is_left_to_the_sandbox() -> None:
    t = task()
    assert import_failure(t, {"solution.py": BROKEN[0]}) is not None
    assert import_failure(t, {"solution.py": GOOD}) is None
    # the import finds a package, a compiled module or a cached one before the file
    for other in ("solution/__init__.py", "solution.cpython-311-x86_64-linux-gnu.so", "__pycache__/x.pyc"):
        assert import_failure(t, {"solution.py": BROKEN[0], other: ""}) is None, other
    # a stdlib or builtin name can be found (or already imported) without reading the file
    for name in ("string", "sys", "json"):
        named = task(solution_path=f"{name}.py")
        assert import_failure(named, {f"{name}.py": BROKEN[0]}) is None, name
    # the compiler giving up is the host's limit, not a verdict
    assert import_failure(t, {"solution.py": "x = " + "(" * 5000 + ")" * 5000 + "\n"}) is not None
    deep = "def f(x):\n    return " + "-" * 200_000 + "x\n"
    assert import_failure(t, {"solution.py": deep}) is None


@pytest.mark.parametrize("host_filter", ["always", "error"])
def test_host_compiles_neither_print_nor_fail_on_the_compilers_warnings(host_filter: str) -> None:
    """`x = [1](2)` compiles with a SyntaxWarning: the runner's import prints it and goes on; the host's
    compiles (the precheck, the `does_not_compile` evidence) show nothing, and a host running with
    `-W error` still does not call it a failure."""
    warned = "def f(x):\n    return [x](1) or x + 1\n"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter(host_filter)
        assert import_failure(task(), {"solution.py": warned}) is None
        assert compile_flags(warned, "solution.py") == []
        assert import_failure(task(), {"solution.py": BROKEN[0]}) is not None
        assert [f.name for f in compile_flags(BROKEN[0], "solution.py")] == ["does_not_compile"]
        warnings.simplefilter("always")  # the filters are the caller's again
        warnings.warn("the host's own warnings still count", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["the host's own warnings still count"]


async def test_the_host_parses_no_solution_over_its_bound() -> None:
    """Compiling and parsing on the host cost ~1-4 us a byte: a solution over `host_parse_max_bytes` is
    left whole to the sandbox run (no precheck, no static checks) and says so in a flag; the verdict is the
    sandbox's, the same as for a small file."""
    g = grader_with(host_parse_max_bytes=4096)
    pad = "# padding\n" * 500  # 5,000 bytes
    try:
        assert (await g.grade(task(), GOOD)).verdict.passed  # the sandbox's Python is now known
        small = (await g.grade(task(), BROKEN[0])).verdict
        big = (await g.grade(task(), pad + BROKEN[0])).verdict
        big_good = (await g.grade(task(), pad + GOOD)).verdict
    finally:
        await g.close()
    assert small.shortcut == "host_syntax" and "does_not_compile" in {f.name for f in small.flags}
    assert big.shortcut == "" and not big.passed  # run in the sandbox: it does not compile there either
    assert [r.outcome for r in big.tests] == ["error"] * 4 and "SyntaxError" in big.tests[0].detail
    assert {f.name for f in big.flags} >= {"oversized_solution", "import_failed"}
    assert "does_not_compile" not in {f.name for f in big.flags}  # the host did not compile it
    assert big_good.passed and [f.name for f in big_good.flags] == ["oversized_solution"]
    assert "5,0" in big_good.flags[0].evidence and "4,096" in big_good.flags[0].evidence


async def test_identical_submissions_in_flight_share_one_grading() -> None:
    g = grader_with()
    t, other = task(), task(test_timeout_s=4.0)  # same text, another task: never shared
    calls: list[int] = []
    inner = g.resource("code_tests").verifier.verify_many

    async def counting(items):  # type: ignore[no-untyped-def]
        calls.append(len(items))
        return await inner(items)

    g.resource("code_tests").batcher._run_batch = counting
    try:
        first = await asyncio.gather(*(g.grade(t, GOOD) for _ in range(8)), g.grade(other, GOOD))
        again = await g.grade(t, GOOD)  # nothing in flight any more: it runs
    finally:
        await g.close()
    verdicts = [x.verdict for x in first]
    assert all(v.passed for v in verdicts) and again.verdict.passed
    assert [v.shortcut for v in verdicts].count("shared") == 7
    assert verdicts[8].shortcut == "" and again.verdict.shortcut == ""
    assert sum(calls) == 3  # t once, other once, t again
    shared = [v for v in verdicts if v.shortcut == "shared"]
    first_dump = verdicts[0].model_dump(exclude={"shortcut"})
    assert all(v.model_dump(exclude={"shortcut"}) == first_dump for v in shared)
    metrics = step_metrics(list(first))
    assert metrics["verify/shared"] == 7.0 and metrics["verify/host_decided"] == 0.0


async def test_without_batches_identical_submissions_still_share() -> None:
    g = grader_with(max_batch=1)  # each grading in a sandbox exec of its own
    assert not g.resource("code_tests").verifier.batching
    try:
        graded = await asyncio.gather(*(g.grade(task(), GOOD) for _ in range(4)))
    finally:
        await g.close()
    assert sorted(x.verdict.shortcut for x in graded) == ["", "shared", "shared", "shared"]
    assert all(x.verdict.passed for x in graded)


async def test_sharing_off_runs_every_copy() -> None:
    g = grader_with(share_identical=False, precheck_syntax=False)
    try:
        await g.grade(task(), GOOD)  # the sandbox's Python becomes known: still no host decision
        graded = await asyncio.gather(*(g.grade(task(), text) for text in [GOOD] * 4 + [BROKEN[0]] * 2))
    finally:
        await g.close()
    assert [x.verdict.shortcut for x in graded] == [""] * 6
    assert [x.verdict.passed for x in graded] == [True] * 4 + [False] * 2
    assert step_metrics(list(graded))["verify/host_decided"] == 0.0


async def test_the_validator_refuses_a_grader_that_shares() -> None:
    sharing, independent = grader_with(), grader_with(share_identical=False)
    try:
        with pytest.raises(ValueError, match="share_identical"):
            Validator(sharing)
        Validator(independent)
    finally:
        await sharing.close()
        await independent.close()
