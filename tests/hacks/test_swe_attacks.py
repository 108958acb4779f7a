"""Repository grading attacked from inside the process under test (issue 23, class 1), end to end on a real
repository (inflection) in real sandboxes. Every attack here earned full reward from the harness that read
an in-process signed report; each must now earn nothing, and the agent's `run_tests` must run exactly what
grading runs."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator

import pytest
from swe_attack_patches import attacks, forgeries

from trialground.envs.tools.registry import run_named
from trialground.errors import TaskError
from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.swe.patch import apply_patch
from trialground.verify.config import GradingConfig
from trialground.verify.kinds.swe_tests import SweTestsVerifier
from trialground.verify.verdict import Verdict

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Task]:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    from trialground.tasks.sources import load_source
    from trialground.tasks.swe.repos import cache_dir, fetch, repo_spec

    spec = repo_spec("inflection")
    user = cache_dir() / "sdists" / spec.filename
    cache = tmp_path_factory.mktemp("swe-attack-cache")
    old = os.environ.get("TRIALGROUND_SWE_CACHE")
    os.environ["TRIALGROUND_SWE_CACHE"] = str(cache)
    try:
        if user.exists():
            (cache / "sdists").mkdir()
            shutil.copy(user, cache / "sdists" / spec.filename)
        try:
            fetch(spec)
        except TaskError as e:
            pytest.skip(f"the inflection sdist is neither cached nor downloadable: {e}")
        yield load_source("swe:inflection:3")[0]
    finally:
        if old is None:
            os.environ.pop("TRIALGROUND_SWE_CACHE", None)
        else:
            os.environ["TRIALGROUND_SWE_CACHE"] = old


def _grade(task: Task, patches: dict[str, str]) -> dict[str, tuple[bool, list[str]]]:
    async def main() -> dict[str, tuple[bool, list[str]]]:
        verifier = SweTestsVerifier(SandboxConfig(), GradingConfig())
        try:
            out = {}
            for label, patch in patches.items():
                v = await verifier.verify(task, patch)
                assert v.error is None, (label, v.detail)
                out[label] = (v.passed, [f.name for f in v.flags])
            return out
        finally:
            await verifier.close()

    return asyncio.run(main())


@pytest.mark.timeout(1200)  # 17 gradings, each making the tests' calls again: minutes on a busy machine
def test_every_in_process_attack_earns_nothing_and_the_gold_patch_passes(task: Task) -> None:
    results = _grade(task, {"gold": task.reference or "", **attacks(task)})
    assert results.pop("gold") == (True, [])
    assert set(results) >= {"frames_forge", "inspect_expected", "swap_outcomes", "replace_hooks",
                            "patch_unittest", "rewrite_later_tests", "grader_only_fix",
                            "early_exit", "variable_getattr", "main_module", "builtins_attribute",
                            "update_wrapper", "lying_eq", "star_import_pipe", "encoding_hidden"}  # fmt: skip
    for label, (passed, flags) in results.items():
        assert not passed, label
        assert "diff_policy" in flags, label


def _verdicts(task: Task, patches: dict[str, str]) -> dict[str, Verdict]:
    async def main() -> dict[str, Verdict]:
        verifier = SweTestsVerifier(SandboxConfig(), GradingConfig())
        try:
            return {label: await verifier.verify(task, patch) for label, patch in patches.items()}
        finally:
            await verifier.close()

    return asyncio.run(main())


@pytest.mark.timeout(900)
def test_forgeries_earn_nothing_where_the_policy_sees_nothing(
    task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict does not rest on the diff policy: with the policy blind (it finds nothing, as it finds
    nothing in a forgery of a kind it does not name), each forgery that leaves the bug in place (an encoding
    declaration, a star import writing the record pipe, the pipe written directly with an early exit and a
    passing summary, the test file read as data) earns nothing, and its FAIL_TO_PASS tests fail on what
    the library was observed to return in a sandbox that holds no test. The in-process harness paid each
    of them 1.0 once the policy missed it."""
    from trialground.tasks.swe import policy

    monkeypatch.setattr(policy, "added_violations", lambda before, after: [])
    results = _verdicts(task, {"gold": task.reference or "", **forgeries(task)})
    gold = results.pop("gold")
    assert gold.passed and gold.flags == (), gold.detail
    assert set(results) == {"star_import_pipe", "encoding_hidden", "pipe_direct", "tests_as_data"}
    for label, v in results.items():
        assert v.error is None, (label, v.detail)
        assert not v.passed, (label, v.detail)
        f2p = [t for t in v.tests if t.detail.startswith("fail_to_pass")]
        assert f2p and all(t.outcome == "failed" for t in f2p), (label, v.detail)
        assert any(": calls: " in t.detail for t in f2p), (label, [t.detail for t in f2p][:2])


def test_reading_the_tests_as_data_is_a_forgery_the_policy_does_not_name(task: Task) -> None:
    """`urllib.request` on a `file:` URL reads the test file, and the library returns the tests' expected
    values from their own tables with the bug in place: the policy finds nothing in it (so the grading
    above, with the policy blind, is the grading it gets), and the in-process harness paid it 1.0."""
    from trialground.tasks.swe.policy import added_violations

    changed = apply_patch(task.files, forgeries(task)["tests_as_data"])
    assert changed and all(added_violations(task.files.get(p), t) == [] for p, t in changed.items())


def test_run_tests_runs_the_graders_commands_and_shows_the_failures(task: Task) -> None:
    from trialground.envs.tools.toolbox import ENV as _ENV
    from trialground.envs.tools.toolbox import Toolbox
    from trialground.sandbox.factory import open_sandbox
    from trialground.tasks.swe.harness import TEST_ENV, test_runs

    assert TEST_ENV == _ENV  # the same variables for the agent's programs and for grading
    f2p = task.verifier.params["fail_to_pass"]

    async def main() -> tuple[str, bool, str, bool]:
        sandbox = await open_sandbox(SandboxConfig(), task.files)
        try:
            box = Toolbox(sandbox, task, task.limits or SandboxConfig().limits)
            before = await run_named(box, "run_tests", {}, 120.0)
            fixed = apply_patch(task.files, task.reference or "")
            for path, text in fixed.items():
                assert text is not None
                await sandbox.write(path, text)
            after = await run_named(box, "run_tests", {}, 120.0)
            return before.text, before.ok, after.text, after.ok
        finally:
            await sandbox.close()

    before, before_ok, after, after_ok = asyncio.run(main())
    assert not before_ok and "FAILED" in before and f2p[0].split("::")[-1][:30] in before
    assert after_ok and "FAILED" not in after
    heads = [line for line in before.splitlines() if line.startswith(("== fail_to_pass", "== pass_to_pass"))]
    assert len(heads) == len(test_runs(task))
