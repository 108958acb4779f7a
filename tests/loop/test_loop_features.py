"""Environment-side features reached by real training runs: each test is a short run of the real loop
(scripted policy, real tiny-model trainer, real sandboxes and graders) whose run directory must show the
feature at work."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from loopkit import (
    GOOD,
    answer_task,
    code_task,
    config,
    jsonl,
    metrics,
    parquet_rows,
    tool_call,
    trained_rows,
)

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_async_tool_run_autoscales_flags_and_holds_the_staleness_bound(tmp_path: Path) -> None:
    """Async mode with tool episodes in pooled sandboxes: the autoscaler is fed generation and
    environment timings and resizes the pool (pool/max_active over steps, in the report); a planted
    conftest.py is flagged into flagged.jsonl and the regression queue (regressions.jsonl); every
    trained sample's policy version is within loop.max_staleness of the step it trained."""
    from trialground.monitor.report import write_report
    from trialground.orchestrator.loop import run

    tasks = [code_task("train", "a", tool=True), code_task("train", "b", tool=True)]
    tasks.append(code_task("eval", "e", tool=True))
    script = [
        tool_call("write_file", path="conftest.py", content="import pytest\n"),
        tool_call("write_file", path="solution.py", content=GOOD),
        tool_call("submit"),
    ]
    cfg = config(
        tmp_path,
        tasks,
        script,
        "name=async",
        "env.kind=tool",
        "env.max_turns=4",
        "loop.mode=async",
        "loop.max_staleness=1",
        "loop.steps=3",
        "pool.max_active=2",
        "pool.autoscale=true",
        "pool.min_active=1",
        "pool.max_active_bound=6",
        "pool.autoscale_interval_s=0.01",
        "pool.maintenance_interval_s=0.01",
    )
    summary = asyncio.run(run(cfg))
    assert summary.steps == 3
    run_dir = Path(summary.run_dir)
    rows = trained_rows(run_dir)
    assert len(rows) == 3

    # autoscaler: decisions made from real timings, and visible in the metrics over time
    assert rows[-1]["pool/autoscale_resizes"] >= 1
    assert rows[-1]["pool/autoscale_gen_s"] > 0 and rows[-1]["pool/autoscale_env_s"] > 0
    sizes = [r["pool/max_active"] for r in rows]
    assert any(s != 2 for s in sizes), sizes
    assert all(1 <= s <= 6 for s in sizes)
    html = write_report(run_dir).read_text()
    assert "Autoscaler: max_active" in html and "autoscaler resizes so far" in html

    # async: staleness bound held by every sample, and samples really were stale (batches overlapped)
    stale = []
    for step in (1, 2, 3):
        trainer_version = step - 1  # the version trained by this step
        for row in parquet_rows(run_dir, step):
            assert trainer_version - 1 <= row["policy_version"] <= trainer_version, (
                step,
                row["policy_version"],
            )
            stale.append(trainer_version - row["policy_version"])
    assert max(stale) == 1
    assert all(r["async/staleness_max"] <= 1 for r in rows)
    # per sampled token too: the trained tokens' lag, within the bound, and some tokens really stale
    assert all(r["async/token_staleness_max"] <= 1 for r in rows)
    assert any(r["async/stale_token_frac"] > 0 for r in rows)

    # flagged trajectories and the regression queue, written by the real run
    flagged = jsonl(run_dir / "flagged.jsonl")
    assert flagged and all("test_tampering" in f["flags"] for f in flagged)
    assert all("conftest.py" in " ".join(f["evidence"]) for f in flagged)
    queued = [e for e in jsonl(run_dir / "regressions.jsonl") if e["event"] == "queued"]
    assert {e["task_id"] for e in queued if e["reason"] == "flagged"} == {f["task_id"] for f in flagged}
    assert rows[-1]["tasks/regressions"] >= 1
    assert "nothing sent to the regression queue" not in html


class JudgeServer(ThreadingHTTPServer):
    """An OpenAI-compatible chat endpoint that scores every submission 1 and counts the requests."""

    request_queue_size = 256  # every grading of a step may ask at once

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _JudgeHandler)
        self.requests = 0


class _JudgeHandler(BaseHTTPRequestHandler):
    server: JudgeServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions" and body["model"] == "judge"
        self.server.requests += 1
        reply = {"choices": [{"finish_reason": "stop", "message": {"content": "Looks right.\nSCORE: 1"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    server = JudgeServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_judge_canaries_dynamic_sampling_and_forgotten_tasks(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    """Single-turn answers: the configured judge (an OpenAI-compatible endpoint) cross-checks every
    rule-graded submission and disagrees with the failures; the canaries are re-scored at each evaluation;
    dynamic sampling refills dropped groups with more generation batches; a task the policy forgot goes
    back to the regression queue by itself."""
    from trialground.orchestrator.loop import run

    tasks = [answer_task("train", "a", "yes"), answer_task("train", "b", "yes")]
    tasks += [answer_task("eval", f"e{i}", answer) for i, answer in enumerate(["yes", "no", "maybe", "yes"])]
    # Groups of 4 consecutive generations: all pass (no signal), mixed, all fail (no signal), ...
    script = ["yes"] * 4 + ["no", "yes", "yes", "yes"] + ["no"] * 4
    port = judge_server.server_address[1]
    cfg = config(
        tmp_path,
        tasks,
        script,
        "name=judged",
        "loop.steps=3",
        "loop.eval_interval=2",
        "loop.dynamic_sampling=true",
        "loop.dynamic_sampling_max_batches=4",
        "tasks.requeue_pass_rate=0.5",
        "reward.judge_sample_rate=1.0",
        f"reward.judge={{kind: openai, base_url: 'http://127.0.0.1:{port}/v1', model: judge}}",
    )
    summary = asyncio.run(run(cfg))
    run_dir = Path(summary.run_dir)
    rows = metrics(run_dir)
    trained = [r for r in rows if "train/loss" in r]
    assert len(trained) == 3

    # judge: every rule-graded submission also scored; it passes the failures, so they disagree
    last = trained[-1]
    assert last["verify/judge_calls"] > 0 and last["verify/judge_errors"] == 0
    assert 0.0 < last["verify/judge_disagreement"] < 1.0
    assert judge_server.requests >= last["verify/judge_calls"]
    assert last["verify/error_rate/answers"] == 0.0

    # canaries at evaluation cadence (steps 0, 2 and 3): references pass, wrong answers fail, and the
    # judge (which passes everything) is right on half of them
    evals = [r for r in rows if "eval/pass@1" in r]
    assert [r["step"] for r in evals] == [0, 2, 3]
    for r in evals:
        assert r["canary/good_pass_rate"] == 1.0 and r["canary/bad_pass_rate"] == 0.0
        assert r["canary/judge_accuracy"] == 0.5

    # dynamic sampling: groups without signal dropped, refilled by further generation batches
    assert sum(r["filter/zero_variance_groups"] for r in trained) > 0
    assert max(r["filter/generation_batches"] for r in trained) > 1
    for r in trained:
        kept = r["filter/groups_kept"]
        assert kept + r["filter/groups_short"] == 2
        assert r["train/sequences"] == 4 * kept
    assert sum(r["filter/refill_groups"] for r in trained) > 0

    # a task that had passed and then failed a whole group is re-queued by the pool
    queued = [e for e in jsonl(run_dir / "regressions.jsonl") if e["event"] == "queued"]
    assert any(e["reason"] == "forgotten" for e in queued)
