"""The HTML report and the live dashboard: content, self-containment, tolerance, and headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from monkit import chromium, dump_dom, pixel_stats, screenshot
from typer.testing import CliRunner

from trialground.cli import app
from trialground.monitor.dashboard import Dashboard
from trialground.monitor.report import write_report
from trialground.monitor.rundata import load_run
from trialground.monitor.synthetic import write_synthetic_run_dir

needs_chromium = pytest.mark.skipif(
    chromium() is None,
    reason="headless Chromium not installed (apt-get install -y chromium; ./dev test does it)",
)


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_run_dir(
        tmp_path_factory.mktemp("runs") / "hacky", seed=0, steps=120, fault_step=60
    )


def test_run_data_reads_everything(synth_run: Path) -> None:
    d = load_run(synth_run)
    assert len(d.metrics) == 120 and d.last_step == 119
    assert {a.rule for a in d.alerts} >= {"reward_eval_divergence"}
    assert d.flagged and d.flagged[0].count >= d.flagged[-1].count
    assert d.flagged[0].flags["test_tampering"] > 0 and "synthetic" in d.flagged[0].example
    assert d.regressions and all(r.attempts >= 0 for r in d.regressions)
    assert any(r.solved_step is not None and r.solved_step > r.queued_step for r in d.regressions)
    assert d.trajectory_rows == 120 * 16 and d.error_rows > 0


def test_report_is_one_self_contained_file(synth_run: Path, tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["report", str(synth_run), "--out", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    html = (tmp_path / "r.html").read_text()
    for title in (
        "Reward by domain",
        "Training reward vs evaluation",
        "Pass rates",
        "Environment latency",
        "Pool utilisation",
        "Alert timeline",
        "Most-flagged trajectories",
        "Regression loop",
        "Cost per step",
    ):
        assert title in html, title
    assert html.count("<svg") >= 10
    assert "reward_eval_divergence" in html and "spearman" in html  # alert evidence shown
    assert "wrote conftest.py" in html  # flag evidence shown
    assert "solved at step" in html
    # Offline: no external scripts, styles, images or fonts.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<script" not in html


def test_report_of_an_empty_or_partial_run(tmp_path: Path) -> None:
    (tmp_path / "alerts.jsonl").touch()
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "time": 1, "reward/mean": 0.1}\n{"step": 1, "ti')
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "step_0.parquet").write_bytes(b"not parquet")
    html = write_report(tmp_path).read_text()
    assert "no alerts fired" in html and "no evaluation yet" in html
    assert CliRunner().invoke(app, ["report", str(tmp_path / "missing")]).exit_code == 2


def test_dashboard_json_endpoint_follows_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "time": 1.0, "reward/mean": 0.2}) + "\n")
    dash = Dashboard(run, port=0, refresh_s=0.5).start()
    try:
        page = httpx.get(dash.url, timeout=10)
        assert page.status_code == 200 and "api/state" in page.text and "<svg" in page.text
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["cache-control"] == "no-store" and page.headers["server"] == "uvicorn"
        assert httpx.get(dash.url + "index.html", timeout=10).text.count("api/state") >= 1
        static = httpx.get(dash.url + "report.html", timeout=10)
        assert static.status_code == 200 and "<svg" in static.text and "<script" not in static.text
        s1 = httpx.get(dash.url + "api/state", timeout=10).json()
        assert s1["last_step"] == 0 and "Reward" in s1["html"]
        with (run / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": 1, "time": 2.0, "reward/mean": 0.4}) + "\n")
        s2 = httpx.get(dash.url + "api/state", timeout=10).json()
        assert s2["last_step"] == 1 and s2["version"] != s1["version"]
        missing = httpx.get(dash.url + "nope", timeout=10)
        assert missing.status_code == 404 and missing.text == "not found"
        shutil.rmtree(run)  # the run directory went away: a 404 naming it, the server still up
        gone = httpx.get(dash.url + "api/state", timeout=10)
        assert gone.status_code == 404 and str(run) in gone.text
    finally:
        dash.close()
    with pytest.raises(httpx.TransportError):  # closed: nothing listens any more
        httpx.get(dash.url, timeout=2)


def test_dashboard_port_in_use_raises_at_construction(tmp_path: Path) -> None:
    first = Dashboard(tmp_path, port=0)
    try:
        with pytest.raises(OSError):
            Dashboard(tmp_path, port=first.port)
    finally:
        first.close()


@pytest.mark.slow
@needs_chromium
def test_report_screenshot_shows_plots(synth_run: Path, tmp_path: Path) -> None:
    report = write_report(synth_run)
    png = screenshot(report.resolve().as_uri(), tmp_path / "report.png", size=(1280, 2400))
    var, colours = pixel_stats(png)
    assert var > 100 and colours > 50, (var, colours)


@pytest.mark.slow
@needs_chromium
def test_dashboard_screenshot_live(synth_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "live"
    shutil.copytree(synth_run, run)
    dash = Dashboard(run, port=0, refresh_s=0.5).start()
    try:
        png = screenshot(dash.url, tmp_path / "dash.png", size=(1280, 1600), wait_ms=3000)
        # The page's script polled /api/state in the real browser and rewrote the header.
        dom = dump_dom(dash.url, wait_ms=3000)
        assert "live · last step 119" in dom, dom[:2000]
    finally:
        dash.close()
    var, colours = pixel_stats(png)
    assert var > 100 and colours > 50, (var, colours)


def test_dashboard_command_serves_over_http(synth_run: Path) -> None:
    exe = Path(sys.executable).with_name("trialground")
    proc = subprocess.Popen(
        [str(exe), "dashboard", str(synth_run), "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://\S+/", line)
        assert url, line
        state = httpx.get(url.group(0) + "api/state", timeout=20).json()
        assert state["last_step"] == 119 and "Alert timeline" in state["html"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_report_shows_the_config_and_escaped_sample_completions_of_the_latest_step(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trialground.orchestrator.run_config import RunConfig, dump_config

    (tmp_path / "config.yaml").write_text(
        dump_config(RunConfig(name="cfg", output_dir="runs/<b>out</b>", seed=11))
    )
    (tmp_path / "metrics.jsonl").write_text('{"step": 10, "time": 1, "reward/mean": 0.5}\n')
    traj = tmp_path / "trajectories"
    traj.mkdir()

    def write(step: int, rows: list[tuple[str, float, str]]) -> None:
        pq.write_table(
            pa.table({
                "step": [step] * len(rows),
                "task_id": [r[0] for r in rows],
                "domain": ["code"] * len(rows),
                "reward": [r[1] for r in rows],
                "flags": [["test_tampering"] if r[1] > 1 else [] for r in rows],
                "completion": [r[2] for r in rows],
            }),
            traj / f"step_{step}.parquet",
        )  # fmt: skip

    write(9, [("old", 0.0, "from step nine")])
    write(10, [
        ("t1", 1.0, "<script>alert(1)</script> & done"),
        ("t1", 0.0, "second sample of t1"),
        ("t2", 2.0, "def f():\n    return 1"),
    ])  # fmt: skip
    (traj / "step_11.parquet").write_bytes(b"half-written")  # unreadable: the step before is the latest
    data = load_run(tmp_path)
    assert [(s.step, s.task_id) for s in data.samples] == [(10, "t1"), (10, "t2")]  # one per task
    html = write_report(tmp_path).read_text()
    assert 'id="samples"' in html and 'id="config"' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; done" in html and "<script" not in html
    assert "from step nine" not in html and "second sample of t1" not in html
    assert "return 1" in html and "test_tampering" in html
    assert "&lt;b&gt;out&lt;/b&gt;" in html and "seed: 11" in html and "<b>out" not in html


def test_report_without_config_or_trajectories_says_so(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "time": 1, "reward/mean": 0.1}\n')
    html = write_report(tmp_path).read_text()
    assert "no config.yaml in the run directory" in html
    assert "no completions in the trajectories yet" in html
