"""`cluster: ray` in a real single-turn run on a local Ray cluster: grading sandboxes open on the Ray
workers (single-turn episodes have no sandbox of their own), and the run's results equal a local run's on
the same seed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from loopkit import BAD, GOOD, HIDDEN, code_task, config, parquet_rows, tool_call, trained_rows

pytest.importorskip("torch")
ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]


def test_single_turn_grading_runs_on_ray_with_the_local_results(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    tasks = [code_task("train", n, tool=False) for n in ("a", "b", "c")] + [
        code_task("eval", "e", tool=False)
    ]
    fence = "```python\n{}```"
    script = [fence.format(GOOD), fence.format(BAD), fence.format(GOOD), "no code here"]
    common = ["loop.steps=2", "sandbox.limits.wall_s=60", "reward.grading.total_timeout_s=300"]
    ray_opts = ["cluster=ray", "pool.ray_workers=1", "pool.ray_worker_cpus=0.5"]
    local = asyncio.run(run(config(tmp_path / "local", tasks, script, "name=local", *common)))
    on_ray = asyncio.run(run(config(tmp_path / "ray", tasks, script, "name=ray", *common, *ray_opts)))
    rows = trained_rows(Path(on_ray.run_dir))
    assert rows[-1]["pool/ray/workers"] == 1.0
    # single-turn episodes have no sandbox: what the worker opened were the grading sandboxes (batched,
    # and restored for reuse between batches, so few of them for all the gradings)
    assert rows[-1]["pool/ray/sandboxes_opened"] >= 1
    assert sum(r["verify/gradings"] for r in rows) >= 16
    assert "pool/ray/workers" not in trained_rows(Path(local.run_dir))[-1]
    for step in (1, 2):
        here = sorted((r["completion"], r["reward"]) for r in parquet_rows(Path(local.run_dir), step))
        there = sorted((r["completion"], r["reward"]) for r in parquet_rows(Path(on_ray.run_dir), step))
        assert here == there
        assert {reward for _, reward in there} == {0.0, 1.0}  # both verdicts, not one constant
    assert on_ray.eval_after == local.eval_after
    ray_rows, local_rows = rows, trained_rows(Path(local.run_dir))
    for key in ("reward/mean", "verify/pass_rate", "verify/errors"):
        assert [r[key] for r in ray_rows] == [r[key] for r in local_rows], key


def test_tool_episodes_and_their_grading_run_on_ray_with_the_local_results(tmp_path: Path) -> None:
    """Tool episodes: each episode's sandbox and its fresh grading sandbox are on the Ray worker; per task,
    the rewards equal a local run's (every episode writes the same file, so order does not matter)."""
    from trialground.orchestrator.loop import run

    plus_one = code_task("train", "a", tool=True)
    plus_two = code_task("train", "b", tool=True)
    plus_two = plus_two.model_copy(
        update={"id": "", "hidden_checks": {"test_hidden.py": HIDDEN.replace("42", "43")}}
    )
    plus_two = type(plus_two).model_validate(plus_two.model_dump(exclude={"id"}))
    tasks = [plus_one, plus_two, code_task("eval", "e", tool=True)]
    script = [tool_call("write_file", path="solution.py", content=GOOD)]
    common = ["loop.steps=1", "env.kind=tool", "env.max_turns=2", "sandbox.limits.wall_s=60"]
    ray_opts = ["cluster=ray", "pool.ray_workers=1", "pool.ray_worker_cpus=0.5"]
    local = asyncio.run(run(config(tmp_path / "local", tasks, script, "name=local", *common)))
    on_ray = asyncio.run(run(config(tmp_path / "ray", tasks, script, "name=ray", *common, *ray_opts)))
    last = trained_rows(Path(on_ray.run_dir))[-1]
    # 8 episodes in pooled sandboxes on the worker, each graded in a fresh grading sandbox there (the
    # first evaluation's grading is counted with step 1 too)
    assert last["pool/ray/sandboxes_opened"] >= 2 and last["verify/gradings"] >= 8
    here = sorted((r["task_id"], r["reward"]) for r in parquet_rows(Path(local.run_dir), 1))
    there = sorted((r["task_id"], r["reward"]) for r in parquet_rows(Path(on_ray.run_dir), 1))
    assert here == there
    assert {r for _, r in there if r is not None} != {0.0} and min(r for _, r in there) == 0.0
