"""Fail fast: every check that needs no training runs before the run directory exists, and a failed start
leaves nothing that blocks the same command once it is fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trialground.errors import ConfigError
from trialground.orchestrator.preflight import cautions, model_problems, preflight, problems
from trialground.orchestrator.run_config import load_config

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
TINY = [
    "loop.steps=1",
    "loop.eval_interval=0",
    "loop.batch_tasks=1",
    "loop.samples_per_task=2",
    "tasks.num_train=8",
    "tasks.num_eval=2",
    "policy.sampling.max_new_tokens=8",
    "policy.eval_sampling.max_new_tokens=8",
    "sandbox.limits.wall_s=60",
]


def _cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trialground", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=900,
    )


def _sets(*overrides: str) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def test_every_problem_is_listed_before_anything_is_loaded(tmp_path: Path) -> None:
    cfg = load_config(
        QUICKSTART,
        [
            f"output_dir={tmp_path}",
            "policy.model=/nonexistent/model",
            "tasks.sources=[{source: codegne}, {source: 'hf:openai/gsm8k'}, {source: 'reasoning_gym'}]",
        ],
    )
    found = problems(cfg, "train")
    text = "\n".join(found)
    assert len(found) == 4, found
    assert "policy.model='/nonexistent/model': no such directory" in text
    assert "did you mean 'codegen'" in text
    assert "reads only local datasets" in text and "hf download openai/gsm8k" in text
    assert "reasoning_gym: name an argument" in text
    with pytest.raises(ConfigError, match="the run cannot start"):
        preflight(cfg, "train")
    assert not (tmp_path / "quickstart").exists()


def test_a_model_directory_without_weights_or_tokenizer_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    cfg = load_config(QUICKSTART, [f"output_dir={tmp_path}", f"policy.model={model}"])
    text = "\n".join(problems(cfg, "train"))
    assert "holds no weights" in text and "holds no tokenizer" in text


def test_a_run_directory_in_use_is_refused_and_a_run_without_checkpoint_resumes(tmp_path: Path) -> None:
    cfg = load_config(QUICKSTART, [f"output_dir={tmp_path}"])
    assert problems(cfg, "train") == []
    (cfg.run_dir / "checkpoints").mkdir(parents=True)
    (cfg.run_dir / "metrics.jsonl").write_text("")
    assert any("not a run directory" in p for p in problems(cfg, "train"))
    assert any("no run there" in p for p in problems(cfg, "train", resume=True))
    (cfg.run_dir / "config.yaml").write_text("")  # a run stopped before its first checkpoint
    assert any("already holds a run (no checkpoint yet" in p for p in problems(cfg, "train"))
    assert problems(cfg, "train", resume=True) == []  # it continues from step 0


def test_an_unknown_key_gets_a_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'loop\.checkpoint_interval'"):
        load_config(None, ["loop.chekpoint_interval=3"])
    with pytest.raises(ConfigError, match=r"did you mean 'tasks\.sources\.0\.weight'"):
        load_config(None, ["tasks.sources=[{source: codegen, wieght: 2}]"])


def test_config_validate_reads_stdin_and_answers_in_json(tmp_path: Path) -> None:
    good = _cli("config", "validate", "-", "--json", cwd=tmp_path, stdin="loop: {steps: 1}\n")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["ok"] is True
    bad = _cli(
        "config", "validate", "-", "--json", cwd=tmp_path, stdin="policy: {model: /nonexistent/model}\n"
    )
    assert bad.returncode == 2
    report = json.loads(bad.stdout)
    assert report["ok"] is False and "no such directory" in report["problems"][0]
    shown = _cli("config", "show", "-", "--json", cwd=tmp_path, stdin="loop: {steps: 3}\n")
    assert shown.returncode == 0 and json.loads(shown.stdout)["loop"]["steps"] == 3


def test_a_pool_smaller_than_a_step_in_flight_is_a_caution_not_a_problem(tmp_path: Path) -> None:
    """6 tasks x 6 samples in flight on 32 environments: 4 episodes would wait and could fail with
    acquire_timeout; the run can still start, and validate says so (text and JSON)."""
    sets = ["env.kind=tool", "loop.batch_tasks=6", "loop.samples_per_task=6", "loop.rollout_concurrency=8"]
    small = load_config(None, [*sets, "pool.max_active=32"])
    assert problems(small, "eval") == []
    (caution,) = cautions(small)
    assert "pool.max_active=32" in caution and "= 36" in caution and "4 wait" in caution
    assert cautions(load_config(None, [*sets, "pool.max_active=36"])) == []
    assert cautions(load_config(None, [*sets, "pool.max_active=32", "loop.rollout_concurrency=5"])) == []
    scaling = load_config(None, [*sets, "pool.autoscale=true", "pool.max_active_bound=16"])
    assert "pool.max_active_bound=16" in cautions(scaling)[0]
    assert cautions(load_config(None, ["env.kind=single_turn", "pool.max_active=1"])) == []
    stdin = "env: {kind: tool}\nloop: {batch_tasks: 6, samples_per_task: 6}\npool: {max_active: 32}\n"
    text = _cli("config", "validate", "-", "--eval", cwd=tmp_path, stdin=stdin)
    assert text.returncode == 0 and "caution: pool.max_active=32" in text.stderr
    report = json.loads(_cli("config", "validate", "-", "--eval", "--json", cwd=tmp_path, stdin=stdin).stdout)
    assert report["ok"] is True and len(report["cautions"]) == 1


def test_train_prints_the_caution_before_starting_and_eval_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trialground.cli.run_cmd import _config

    path = tmp_path / "small_pool.yaml"
    path.write_text("env: {kind: tool}\nloop: {batch_tasks: 6, samples_per_task: 6}\npool: {max_active: 32}")
    _config(path, [f"output_dir={tmp_path}", "name=r"], None, purpose="train")
    assert "caution: pool.max_active=32" in capsys.readouterr().err
    _config(path, [f"output_dir={tmp_path}", "name=r"], None, purpose="eval")
    assert "caution" not in capsys.readouterr().err


def _train_with_a_missing_model(tmp_path: Path) -> None:
    """Exit 2 at once (before any model or task loads: well under a minute even on a loaded machine), the
    field named, no run directory left behind."""
    sets = _sets(*TINY, f"output_dir={tmp_path}", "name=first")
    started = time.monotonic()
    bad = _cli("train", str(QUICKSTART), *sets, "--set", "policy.model=/nonexistent/model", cwd=tmp_path)
    seconds = time.monotonic() - started
    assert bad.returncode == 2, bad.stderr
    assert "policy.model='/nonexistent/model': no such directory" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "first").exists() and not any(tmp_path.iterdir())
    assert seconds < 60, f"the failed start took {seconds:.0f} s"


def test_train_with_a_missing_model_fails_at_once(tmp_path: Path) -> None:
    _train_with_a_missing_model(tmp_path)


@pytest.mark.slow
def test_train_with_a_missing_model_fails_at_once_and_the_fixed_command_runs(tmp_path: Path) -> None:
    _train_with_a_missing_model(tmp_path)
    sets = _sets(*TINY, f"output_dir={tmp_path}", "name=first")
    good = _cli("train", str(QUICKSTART), *sets, cwd=tmp_path)
    assert good.returncode == 0, good.stderr[-3000:]
    assert (tmp_path / "first" / "checkpoints" / "step_1" / "meta.json").is_file()


PLUGIN = """
from trialground.errors import TaskError
from trialground.tasks.sources import TaskSource

def _load(request):
    raise TaskError("the source broke while loading", kind="unreadable")

BROKEN = TaskSource("broken_on_load", _load, "a source whose spec checks out and whose loading fails")
"""


@pytest.mark.slow
def test_a_start_that_fails_after_the_checks_leaves_no_run_directory(tmp_path: Path) -> None:
    (tmp_path / "brokensource.py").write_text(PLUGIN)
    sets = _sets(
        *TINY, f"output_dir={tmp_path}", "name=broken", "tasks.sources=[{source: 'brokensource:BROKEN'}]"
    )
    env_path = f"{ROOT}{os.pathsep}{tmp_path}"
    proc = subprocess.run(
        [sys.executable, "-m", "trialground", "train", str(QUICKSTART), *sets],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": env_path, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "the source broke while loading" in proc.stderr
    assert not (tmp_path / "broken").exists()


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    from trialground import __version__

    out = _cli("--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"trialground {__version__}"


def test_the_checkpoint_cadence_counts_steps_and_seconds() -> None:
    from trialground.orchestrator.config import LoopConfig
    from trialground.orchestrator.state import Cadence

    default = Cadence(LoopConfig(steps=50))
    assert [s for s in range(1, 51) if default.due(s)] == [10, 20, 30, 40, 50]
    timed = Cadence(LoopConfig(steps=50, checkpoint_interval=0, checkpoint_every_s=60.0))
    assert not timed.due(3)
    timed.last_s -= 61.0  # a minute passed since the last checkpoint
    assert timed.due(3)
    timed.saved()
    assert not timed.due(4) and timed.due(50)


def test_only_a_hub_like_name_gets_the_download_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    hub = "Qwen/Qwen2.5-0.5B-Instruct"
    (hint,) = model_problems(hub, "policy.model", weights=True)
    assert f"hf download {hub}" in hint
    for path in ("models/Qwen2.5-0.5B-Instruct", "./Qwen2.5", "/abs/Qwen2.5", "a/b/c"):
        (text,) = model_problems(path, "policy.model", weights=True)
        assert "no such directory" in text and "hf download" not in text, text
    (tmp_path / "mine").mkdir()  # a folder of one's own: a path, not an organisation on the Hub
    (text,) = model_problems("mine/model", "policy.model", weights=True)
    assert "hf download" not in text


def test_a_json_commands_error_is_one_json_object(tmp_path: Path) -> None:
    bad = _cli("config", "show", "-", "--json", cwd=tmp_path, stdin="loop: {stepz: 3}\n")
    assert bad.returncode == 2 and bad.stderr == ""
    error = json.loads(bad.stdout)
    assert set(error) == {"error", "kind", "where"}
    assert error["kind"] == "usage" and error["where"] == "-"
    assert "did you mean 'loop.steps'" in error["error"]


def test_validate_lists_every_broken_record_of_a_task_file_with_its_line(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    good = {"domain": "code", "prompt": "p", "verifier": {"kind": "exact", "params": {"answer": "1"}}}
    lines = [json.dumps(good), "{broken", "", json.dumps({"prompt": 3, "domain": 4}), "[1]"]
    tasks.write_text("\n".join(lines) + "\n")
    cfg = load_config(None, [f"tasks.sources=[{{source: '{tasks}'}}]", f"output_dir={tmp_path}"])
    found = [p for p in problems(cfg, "eval") if p.startswith("tasks.sources[0]")]
    assert found[0] == f"tasks.sources[0]: {tasks}:2: (json): Expecting property name enclosed in double " \
        "quotes at column 2"  # fmt: skip
    assert any(f"{tasks}:4: prompt:" in p for p in found) and any(f"{tasks}:4: domain:" in p for p in found)
    assert any(f"{tasks}:5: expected a JSON object" in p for p in found)
    assert not any(f"{tasks}:1:" in p for p in found)
    many = tmp_path / "many.jsonl"
    many.write_text("{\n" * 25)
    cfg = load_config(None, [f"tasks.sources=[{{source: '{many}'}}]", f"output_dir={tmp_path}"])
    listed = [p for p in problems(cfg, "eval") if p.startswith("tasks.sources[0]")]
    assert len(listed) == 21 and listed[-1].endswith("and 5 more problems")
    bad = _cli(
        "config",
        "validate",
        "-",
        "--eval",
        cwd=tmp_path,
        stdin=f"tasks: {{sources: [{{source: '{tasks}'}}]}}\n",
    )
    assert bad.returncode == 2 and f"{tasks}:2: (json)" in bad.stderr, bad.stderr
    usage = _cli("eval", "-", "--json", "--samples", "0", cwd=tmp_path, stdin="")
    assert usage.returncode == 2
    assert json.loads(usage.stdout) == {
        "error": "Invalid value for '--samples': Input should be greater than or equal to 1",
        "kind": "usage",
        "where": "--samples",
    }
