"""The bundled and generated data is sound: references pass their own checks, broken/trivial ones fail.

Runs the checks directly in subprocesses (trusted data, no sandbox); the sandboxed grading path is tested
by the verify owner.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from taskrunner import run_check_program, run_checks_many

from trialground.families.humaneval.source import humaneval_tasks
from trialground.families.ops.source import FAMILIES
from trialground.tasks.sources import load_source


def _all_passed(task, results: dict[str, str], expected: int | None) -> bool:
    passed = [k for k, v in results.items() if v == "passed"]
    return len(passed) == len(results) and (expected is None or len(passed) == expected)


@pytest.mark.slow
def test_humaneval_canonical_passes_hidden_and_visible_checks_trivial_fails() -> None:
    tasks = humaneval_tasks()
    hidden = run_checks_many([(t, t.reference) for t in tasks])
    bad = [
        t.metadata["name"]
        for t, r in zip(tasks, hidden, strict=True)
        if not _all_passed(t, r, t.verifier.params["expected_tests"])
    ]
    assert bad == []
    with_visible = [t for t in tasks if t.visible_checks]
    visible = run_checks_many([(t, t.reference) for t in with_visible], which="visible")
    assert [
        t.metadata["name"] for t, r in zip(with_visible, visible, strict=True) if not _all_passed(t, r, 1)
    ] == []
    # the prompt alone (function body `pass`) and an empty file fail at least one hidden test everywhere
    stub = run_checks_many(
        [(t, t.prompt.split("```python\n", 1)[1].rsplit("```", 1)[0] + "    pass\n") for t in tasks]
    )
    assert [t.metadata["name"] for t, r in zip(tasks, stub, strict=True) if _all_passed(t, r, None)] == []
    empty = run_checks_many([(t, "") for t in tasks])
    assert all(v != "passed" for r in empty for v in r.values())


def test_humaneval_checks_use_trusted_helpers() -> None:
    """HumanEval/32 checks find_zero through the problem's own `poly`: a submission redefining `poly`
    to return 0 must not pass."""
    task = humaneval_tasks()[32]
    cheat = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0\n"
    (result,) = run_checks_many([(task, cheat)])
    assert any(v != "passed" for v in result.values())


def test_data_reference_programs_print_the_gold_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = load_source("data", n=24, seed=11) + load_source("data", n=6, seed=11, split="eval")
    for i, t in enumerate(tasks):
        work = tmp_path / str(i)
        work.mkdir()
        for rel, text in t.files.items():
            (work / rel).write_text(text)
        monkeypatch.chdir(work)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(t.metadata["reference_program"], "<reference>", "exec"), {})  # trusted, ours
        gold = t.verifier.params["answer"]
        if isinstance(gold, str):
            assert out.getvalue().strip() == gold == t.reference
        else:
            assert float(out.getvalue()) == pytest.approx(gold, abs=1e-9)
            assert float(t.reference) == pytest.approx(gold, abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_ops_reference_fixes_and_broken_setup_fails(family: str) -> None:
    tasks = [t for t in load_source("ops", n=28, seed=5) if t.metadata["family"] == family][:2]
    assert tasks, family
    for t in tasks:
        path = t.verifier.params["solution_path"]
        code, out = run_check_program(t, {path: t.reference or ""})
        assert code == 0, (t.metadata["variant"], out)
        code, out = run_check_program(t, {})
        assert code != 0 and "FAIL" in out, (t.metadata["variant"], out)
        code, _ = run_check_program(t, {path: ""})
        assert code != 0


@pytest.mark.slow
def test_ops_checks_reject_hard_coded_results() -> None:
    tasks = load_source("ops", n=60, seed=2)
    script = next(t for t in tasks if t.metadata["family"] == "script_bug")
    fake = "#!/usr/bin/env bash\nmkdir -p out\necho 'lines=3' > out/report.txt\n"
    assert run_check_program(script, {"run.sh": fake})[0] != 0
    svc = next(t for t in tasks if t.metadata["family"] == "import_error")
    fake_service = "print('cpu 1')\n"
    service = svc.verifier.params["solution_path"]
    assert run_check_program(svc, {service: svc.reference or ""})[0] == 0
    assert run_check_program(svc, {service: fake_service})[0] != 0
    env = next(t for t in tasks if t.metadata["family"] == "env_file")
    fake_start = "#!/usr/bin/env bash\necho 'service up env=production data_files=3 workers=4'\n"
    assert run_check_program(env, {"start.sh": fake_start})[0] != 0
    cfg = next(t for t in tasks if t.metadata["family"] == "config_key")
    # editing the service to accept the broken config does not help: the check runs a pristine copy
    lenient = cfg.files["service.py"].replace(
        "def problem(cfg: dict) -> str | None:", "def problem(cfg):\n    return None\n\n\ndef _unused(cfg):"
    )
    assert run_check_program(cfg, {"service.py": lenient})[0] != 0
