"""benchmarks/run_all.py: the registry lists, results go to JSON, tables go between the markers of the
document it is given and nowhere else, and a failing benchmark is reported without stopping the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "run_all.py"

DOC = """# Benchmarks

Hand-written prose that must stay as it is.

<!-- run_all:simulate_scale -->
| old | table |
|---|---|
| 1 | 2 |
<!-- /run_all:simulate_scale -->

More prose after the table.

## Later section

Its prose.
"""

FAIL = [
    {
        "name": "always_fails",
        "argv": [
            sys.executable,
            "-c",
            "import sys; sys.stderr.write('deliberate failure xyzzy'); sys.exit(3)",
        ],
    }
]


def run_all(*args: str, tmp_path: Path, extra: list[dict] | None = None) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    env.pop("TRIALGROUND_RUN_ALL_EXTRA", None)
    if extra is not None:
        env["TRIALGROUND_RUN_ALL_EXTRA"] = json.dumps(extra)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--lock", str(tmp_path / "bench.lock"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_list_names_every_entry_with_its_command(tmp_path: Path) -> None:
    res = run_all("--list", tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    names = [line.split()[0] for line in res.stdout.splitlines()]
    expected = ["sandbox", "pool", "sandbox_slo", "verify", "generation", "train_vs_trl", "async_vs_sync"]
    expected += ["branching", "tree_advantage", "monitor_alarms", "swe_restore", "simulate_scale"]
    assert set(expected) <= set(names)
    assert "benchmarks/pool.py" in res.stdout
    quick = run_all("--list", "--quick", "--only", "pool", tmp_path=tmp_path)
    assert quick.stdout.split() == ["pool", ".venv/bin/python", "benchmarks/pool.py", "--quick"]


def test_every_benchmark_script_has_an_entry() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run_all  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    covered = {e.script for e in run_all.ENTRIES}
    # not comparisons
    helpers = {"run_all.py", "run_all_tables.py", "make_model.py", "fork_server_probe.py", "swe_policy.py"}
    # measurements run by hand, each with its command and figures in the docs: they need the real Gemma
    # model, a swe task cache or several torchrun ranks, too long or too large for run_all's loop
    by_hand = {
        "long_sequence.py": "docs/benchmarks.md (one step on one long sequence of the real model)",
        "memory_model.py": "docs/memory.md (torchrun ranks against the estimate)",
        "packing.py": "docs/benchmarks.md (needs a recorded run's trajectories)",
        "swe_calls_coverage.py": "docs/swe.md (needs the repository sets' caches)",
        "swe_policy_labelled.py": "docs/swe.md (needs the inflection task cache)",
        "train_step.py": "scripts/gpu_smoke.sh step 2b (a GPU measurement)",
    }
    for script, doc in by_hand.items():
        assert (ROOT / doc.split()[0]).read_text().count(script.removesuffix(".py")) > 0, (script, doc)
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")} - helpers - set(by_hand)
    assert scripts <= covered, scripts - covered


def test_unknown_entry_is_an_error(tmp_path: Path) -> None:
    res = run_all("--only", "nope", "--no-write", tmp_path=tmp_path)
    assert res.returncode == 2
    assert "unknown entries" in res.stderr


@pytest.mark.slow
def test_quick_run_writes_json_and_only_the_marked_regions(tmp_path: Path) -> None:
    doc, out = tmp_path / "benchmarks.md", tmp_path / "results.json"
    doc.write_text(DOC)
    res = run_all(
        "--quick", "--only", "simulate_scale,monitor_alarms", "--out", str(out), "--doc", str(doc),
        tmp_path=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    results = json.loads(out.read_text())
    assert results["quick"] is True and results["cores"] == os.cpu_count()
    by = {e["name"]: e for e in results["entries"]}
    assert set(by) == {"simulate_scale", "monitor_alarms"}
    for e in by.values():
        assert e["ok"] and e["returncode"] == 0
        assert len(e["load_before"]) == 3 and len(e["load_after"]) == 3
        assert e["result"] and e["table"].startswith("| ")
    assert by["simulate_scale"]["result"][0]["size"] == 10
    text = doc.read_text()
    # the marked region is replaced; prose before, between and after is untouched
    assert "| old | table |" not in text
    assert text.startswith(
        "# Benchmarks\n\nHand-written prose that must stay as it is.\n\n<!-- run_all:simulate_scale -->\n"
    )
    assert (
        "<!-- /run_all:simulate_scale -->\n\nMore prose after the table.\n\n## Later section\n\nIts prose.\n"
        in text
    )
    region = text.split("<!-- run_all:simulate_scale -->")[1].split("<!-- /run_all:simulate_scale -->")[0]
    assert "| S | episodes | utilisation |" in region and "Load average" in region
    assert f"{os.cpu_count()} cores" in region
    # an entry without markers gets a generated subsection of its own, with markers, at the end
    assert text.count("## All comparisons in one run") == 1
    tail = text.split("## All comparisons in one run")[1]
    assert "<!-- run_all:monitor_alarms -->" in tail and "<!-- /run_all:monitor_alarms -->" in tail
    # a second run replaces the regions instead of adding more
    again = run_all(
        "--quick", "--only", "simulate_scale,monitor_alarms", "--out", str(out), "--doc", str(doc),
        tmp_path=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    text2 = doc.read_text()
    assert text2.count("<!-- run_all:monitor_alarms -->") == 1
    assert text2.count("<!-- run_all:simulate_scale -->") == 1
    assert (
        text2.split("<!-- run_all:simulate_scale -->")[0] == text.split("<!-- run_all:simulate_scale -->")[0]
    )


@pytest.mark.slow
def test_loop_driven_benchmarks_count_steps_not_the_start_up_report(tmp_path: Path) -> None:
    """The loop reports its start-up as step 0 (no rollouts in it): the branching benchmark must not read
    it as a step, and async vs sync must take its steady state from real step ends."""
    out = tmp_path / "results.json"
    res = run_all("--quick", "--only", "branching,async_vs_sync", "--out", str(out), "--no-write",
                  tmp_path=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    by = {e["name"]: e for e in json.loads(out.read_text())["entries"]}
    branching = {r["mode"]: r for r in by["branching"]["result"]["results"]}
    for r in branching.values():
        assert r["steps"] == 1 and r["trained_samples"] > 0
    for r in by["async_vs_sync"]["result"]["results"]:
        assert r["steps_timed"] == 4 and 0 < r["steady_step_s"] < r["seconds"]


@pytest.mark.slow
def test_a_failing_entry_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    doc, out = tmp_path / "benchmarks.md", tmp_path / "results.json"
    doc.write_text(DOC)
    res = run_all(
        "--quick", "--only", "always_fails,simulate_scale", "--out", str(out), "--doc", str(doc),
        tmp_path=tmp_path, extra=FAIL,
    )  # fmt: skip
    assert res.returncode == 1
    assert "failed: always_fails" in res.stdout
    by = {e["name"]: e for e in json.loads(out.read_text())["entries"]}
    assert by["always_fails"]["ok"] is False and by["always_fails"]["returncode"] == 3
    assert "deliberate failure xyzzy" in by["always_fails"]["stderr_tail"]
    assert by["simulate_scale"]["ok"] is True  # ran after the failure
    region = (
        doc.read_text().split("<!-- run_all:always_fails -->")[1].split("<!-- /run_all:always_fails -->")[0]
    )
    assert "**failed**, exit 3" in region and "deliberate failure xyzzy" in region


def test_no_write_leaves_the_document_alone(tmp_path: Path) -> None:
    doc, out = tmp_path / "benchmarks.md", tmp_path / "results.json"
    doc.write_text(DOC)
    ok = [
        {
            "name": "tiny_ok",
            "argv": [
                sys.executable,
                "-c",
                "import json,sys; open(sys.argv[1],'w').write(json.dumps({'x': 1}))",
                "{json}",
            ],
        }
    ]
    res = run_all(
        "--only", "tiny_ok", "--no-write", "--out", str(out), "--doc", str(doc), tmp_path=tmp_path, extra=ok
    )
    assert res.returncode == 0, res.stderr
    assert doc.read_text() == DOC
    entry = json.loads(out.read_text())["entries"][0]
    assert entry["result"] == {"x": 1} and entry["ok"]


def test_the_benchmarks_evaluation_stand_in_returns_what_the_loop_unpacks() -> None:
    """async_vs_sync.py and branching.py replace the loop's held-out evaluation with `skip_eval`; it must
    return the same shape as `_eval_and_log` (the loop unpacks it), or both benchmarks fail at step 0."""
    import asyncio
    import typing

    from trialground.orchestrator import loop

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from async_vs_sync import skip_eval
    finally:
        sys.path.pop(0)
    shape = typing.get_type_hints(loop._eval_and_log)["return"]
    assert typing.get_origin(shape) is tuple
    assert len(asyncio.run(skip_eval())) == len(typing.get_args(shape))
