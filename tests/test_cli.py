"""The command line: help everywhere, clear errors with exit status 2, `config show`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trialground.cli import app
from trialground.tasks.model import Task

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def tg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trialground", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trialground", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


COMMANDS = [
    [],
    ["train"],
    ["eval"],
    ["config"],
    ["config", "show"],
    ["tasks"],
    ["tasks", "list"],
    ["tasks", "show"],
    ["tasks", "export"],
    ["tasks", "validate"],
    ["tasks", "expert"],
    ["tasks", "from-failures"],
    ["config", "validate"],
    ["policy", "check-template"],
    ["export"],
    ["sandbox"],
    ["sandbox", "run"],
    ["sandbox", "serve"],
    ["env"],
    ["env", "serve"],
    ["policy"],
    ["policy", "serve"],
    ["verify"],
    ["report"],
    ["dashboard"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "trialground")
def test_every_command_has_help(command: list[str]) -> None:
    out = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "Usage:" in out.stdout
    # every option of the command is described, not just listed
    for line in out.stdout.splitlines():
        stripped = line.strip("│ ").strip()
        if stripped.startswith("--") and stripped != "--help":
            assert len(stripped.split()) >= 2, f"option without description: {line!r}"


def test_config_show_prints_resolved_config() -> None:
    out = tg("config", "show", str(QUICKSTART), "--set", "trainer.lr=0.5")
    assert out.returncode == 0, out.stderr
    assert "lr: 0.5" in out.stdout
    assert "name: quickstart" in out.stdout


def test_malformed_config_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop:\n  steps: -3\ntrainer:\n  bogus: 1\n")
    for command in (["config", "show", str(bad)], ["train", str(bad)], ["eval", str(bad)]):
        out = tg(*command)
        assert out.returncode == 2, (command, out.stderr)
        assert str(bad) in out.stderr
        assert "loop.steps" in out.stderr and "trainer.bogus" in out.stderr
        assert "Traceback" not in out.stderr


def test_missing_config_file_is_a_usage_error(tmp_path: Path) -> None:
    out = tg("train", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2
    assert "no such config file" in out.stderr


def test_a_missing_extra_is_a_clear_error_before_the_run_starts(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: nothing is missing")
    res = tg(
        "train", "examples/quickstart.yaml", "--set", "policy.backend=vllm", "--set", f"output_dir={tmp_path}"
    )
    assert res.returncode == 2
    assert "pip install 'trialground[vllm]'" in res.stderr and "Traceback" not in res.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


def test_step_line_reads_like_a_training_tool() -> None:
    from trialground.cli.train_view import StepLine, format_loss

    assert format_loss(2.28e-08) == "+2.28e-08"  # not +0.0000
    assert format_loss(-0.5) == "-0.5000" and format_loss(0.0) == "+0.0000"
    line = StepLine()
    assert line(0, {"eval/pass@1": 0.367, "probe/pass@1": 0.3}) == "eval 36.7% @ step 0"
    step1 = line(1, {"reward/mean": 0.25, "train/loss": 1e-6})
    assert step1 == "reward 0.250  loss +1.00e-06  eval 36.7% @ step 0"
    step10 = line(10, {"reward/mean": 0.5, "train/loss": 0.01, "probe/pass@1": 0.5})
    assert step10.endswith("probe 50.0% @ step 10")


@pytest.mark.slow
def test_train_and_eval_show_progress_without_third_party_bars(tmp_path: Path) -> None:
    small = [
        "loop.steps=2", "loop.batch_tasks=2", "loop.samples_per_task=2", "tasks.num_train=20",
        "tasks.num_eval=3", "loop.probe_interval=0", f"output_dir={tmp_path}", "name=progress",
    ]  # fmt: skip
    sets = [arg for kv in small for arg in ("--set", kv)]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    train = _cli(["train", str(QUICKSTART), *sets], env=env)
    assert train.returncode == 0, train.stderr
    assert "Loading weights" not in train.stderr and "Writing model shards" not in train.stderr
    assert "eta" in train.stderr and "2/2" in train.stderr and "eval " in train.stderr
    ev = _cli(["eval", str(QUICKSTART), *sets[:-2]], env=env)
    assert ev.returncode == 0, ev.stderr
    assert "Loading weights" not in ev.stderr and "Traceback" not in ev.stderr


# `--json` and `-` are uniform: every command that prints a result can print it as JSON on stdout, and
# every command that reads an input file (or a task source) reads standard input for `-`.
JSON_COMMANDS = [
    ["config", "show"],
    ["config", "validate"],
    ["tasks", "list"],
    ["tasks", "show"],
    ["tasks", "validate"],
    ["tasks", "expert"],
    ["tasks", "from-failures"],
    ["verify"],
    ["eval"],
    ["policy", "check-template"],
    ["sandbox", "run"],
]


@pytest.mark.parametrize("command", JSON_COMMANDS, ids=" ".join)
def test_every_reporting_command_takes_json(command: list[str]) -> None:
    import typer

    cmd: Any = typer.main.get_command(app)
    for name in command:
        cmd = cmd.commands[name]
    flags = {opt for p in cmd.params for opt in p.opts}
    assert "--json" in flags, (command, sorted(flags))


def _math_tasks(tmp_path: Path, n: int) -> tuple[list[Task], str]:
    from trialground.tasks.io import write_jsonl
    from trialground.tasks.sources import load_source

    tasks = load_source("math", n=n)
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    return tasks, (tmp_path / "tasks.jsonl").read_text()


def test_tasks_list_and_show_read_a_task_file_on_stdin(tmp_path: Path) -> None:
    tasks, text = _math_tasks(tmp_path, 3)
    res = CliRunner().invoke(app, ["tasks", "list", "-", "--json"], input=text)
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == [t.id for t in tasks]
    res = CliRunner().invoke(app, ["tasks", "show", "-", tasks[1].id, "--json"], input=text)
    assert res.exit_code == 0, res.output
    assert len(res.stdout.strip().splitlines()) == 1 and json.loads(res.stdout)["id"] == tasks[1].id
    res = CliRunner().invoke(app, ["tasks", "list", "-"], input="not json\n")
    assert res.exit_code == 2 and "<stdin>:1" in res.output


def test_verify_reads_solutions_or_tasks_on_stdin(tmp_path: Path) -> None:
    tasks, text = _math_tasks(tmp_path, 2)
    gold = [t.reference or "" for t in tasks]
    rows = "".join(
        json.dumps({"task_id": t.id, "solution": s}) + "\n"
        for t, s in zip(tasks, [gold[0], "nope"], strict=True)
    )
    res = CliRunner().invoke(
        app, ["verify", str(tmp_path / "tasks.jsonl"), "--solutions", "-", "--json"], input=rows
    )
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["passed"] for line in res.stdout.splitlines()] == [True, False]
    (tmp_path / "s.jsonl").write_text(rows)
    res = CliRunner().invoke(
        app, ["verify", "-", "--solutions", str(tmp_path / "s.jsonl"), "--json"], input=text
    )
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["passed"] for line in res.stdout.splitlines()] == [True, False]
    res = CliRunner().invoke(app, ["verify", "-", "--solutions", "-"], input=text)
    assert res.exit_code == 2 and "both be -" in res.output
    res = CliRunner().invoke(app, ["verify", "math", "--solutions", "-"], input="{broken\n")
    assert res.exit_code == 2 and "<stdin>:1" in res.output


def test_tasks_from_failures_reads_stdin_and_answers_in_json(tmp_path: Path) -> None:
    record = json.dumps({"prompt": "What is 6*7?", "answer": "42", "origin": "log"}) + "\n"
    out = tmp_path / "online.jsonl"
    res = CliRunner().invoke(app, ["tasks", "from-failures", "-", "--out", str(out), "--json"], input=record)
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert row["origin"] == "log" and row["failure_record"] == 1 and row["id"] in out.read_text()
    bad = json.dumps({"prompt": "p", "origin": "o"}) + "\n"
    res = CliRunner().invoke(
        app, ["tasks", "from-failures", "-", "--out", str(tmp_path / "x.jsonl")], input=bad
    )
    assert res.exit_code == 2 and "<stdin>:1" in res.output and not (tmp_path / "x.jsonl").exists()


def test_tasks_validate_answers_in_json_and_keeps_the_report_file(tmp_path: Path) -> None:
    _, text = _math_tasks(tmp_path, 2)
    report = tmp_path / "report.json"
    args = ["tasks", "validate", "-", "--runs", "1", "--json", "--json-report", str(report)]
    res = CliRunner().invoke(app, args, input=text)
    assert res.exit_code in (0, 1), res.output
    data = json.loads(res.stdout)  # stdout is the report and nothing else
    assert len(data["tasks"]) == 2 and data == json.loads(report.read_text())


def test_eval_progress_counts_tasks_done_of_all(tmp_path: Path) -> None:
    """`trialground eval` says how many held-out tasks there are (N/M), not only how many are done."""
    small = [
        "tasks.num_train=8", "tasks.num_eval=3", "policy.eval_sampling.max_new_tokens=8",
        f"output_dir={tmp_path}",
    ]  # fmt: skip
    sets = [arg for kv in small for arg in ("--set", kv)]
    env = {**os.environ, "COLUMNS": "120", "OMP_NUM_THREADS": "1"}
    episodes = tmp_path / "episodes"
    ev = _cli(["eval", str(QUICKSTART), *sets, "--json", "--episodes", str(episodes)], env=env)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "3/3 tasks" in ev.stderr, ev.stderr[-3000:]
    metrics = json.loads(ev.stdout)  # stdout stays one JSON object
    # --episodes keeps every held-out episode (greedy only without --samples), scored as the metric was
    assert sorted(p.name for p in episodes.iterdir()) == ["eval.parquet"]
    rows = pq.read_table(episodes / "eval.parquet").to_pylist()
    assert len(rows) == 3 and len({r["task_id"] for r in rows}) == 3
    assert {r["step"] for r in rows} == {0}  # the starting policy: no checkpoint
    assert all(r["completion"] is not None and r["advantage"] is None for r in rows)
    solved = sum(r["outcome"] is not None and r["outcome"] > 0.0 for r in rows)  # RewardBreakdown.solved
    assert solved / 3 == pytest.approx(metrics["eval/pass@1"])


def test_eval_episodes_carry_the_checkpoints_step(tmp_path: Path) -> None:
    from trialground.orchestrator.evaluate_run import checkpoint_step

    step_8 = tmp_path / "checkpoints" / "step_8"
    step_8.mkdir(parents=True)
    assert checkpoint_step(None) == 0 and checkpoint_step(step_8) == 0  # no meta.json: not a run's
    (step_8 / "meta.json").write_text('{"step": 8, "version": 8}')
    assert checkpoint_step(step_8) == 8


def test_eval_episodes_that_cannot_be_written_fail_before_the_evaluation(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = CliRunner().invoke(app, ["eval", str(QUICKSTART), "--episodes", str(blocker / "episodes")])
    assert res.exit_code == 2 and "--episodes" in res.output and "cannot write episodes there" in res.output
    assert "eval" not in res.output.split("error:")[0]  # no progress line: nothing was evaluated


def test_tasks_expert_takes_repository_tasks_only(tmp_path: Path) -> None:
    _, text = _math_tasks(tmp_path, 2)
    res = CliRunner().invoke(app, ["tasks", "expert", "-"], input=text)
    assert res.exit_code == 2 and "repository tasks (swe:<repo>) only" in res.output


def test_help_shows_kinds_and_defaults_as_the_ecosystems_clis_do() -> None:
    from trialground.cli.helpstyle import ecosystem_label

    assert ecosystem_label("<list[str]>") == "TEXT ..." and ecosystem_label("<int range>") == "INTEGER RANGE"
    assert ecosystem_label("<a|b>") == "[a|b]" and ecosystem_label("<path>") == "PATH"
    for command in (["train"], ["eval"], ["config", "validate"]):
        text = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"}).output
        assert "<bool>" not in text and "<list[" not in text and "<path>" not in text, text
        assert "KEY=VALUE" in text
    text = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "120"}).output
    assert "INTEGER RANGE" in text and "[default: 1]" in text, text


@pytest.mark.parametrize(("given", "seen"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_command_lets_openmp_threads_sleep_unless_told_otherwise(given: str | None, seen: str) -> None:
    """OpenMP's spinning waits make torch's threads crawl on shared cores: the command sets PASSIVE before
    anything imports torch, and keeps a value the user set."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    script = (
        "import os, sys\n"
        "sys.argv = ['trialground', '--version']\n"
        "from trialground.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == f"False {seen}"
