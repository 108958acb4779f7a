"""`trainer.advantage: tree` in the real training loop: branched groups of scripted tool episodes in
pooled bwrap sandboxes, turn advantages from the shared prefixes, trained by the real trainer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_loop_branching import config

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_tree_advantages_train_branched_groups_end_to_end(tmp_path: Path) -> None:
    from trialground.orchestrator import loop as loop_module
    from trialground.train.advantages import Scored

    seen: list[list[Scored]] = []
    original = loop_module.score_groups

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = original(*args, **kwargs)
        seen.append(out)
        return out

    loop_module.score_groups = spy  # type: ignore[assignment]
    try:
        cfg = config(tmp_path, "loop.branch=first_obs", "trainer.advantage=tree", "name=tree")
        summary = asyncio.run(loop_module.run(cfg))
    finally:
        loop_module.score_groups = original  # type: ignore[assignment]
    assert summary.steps == 2 and len(seen) == 2
    rows = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train/loss" in r]
    assert len(trained) == 2 and all(r["env/error_rate"] == 0.0 for r in trained)
    records = [s for batch in seen for s in batch if s.trainable]
    assert records and all(s.turn_advantages is not None for s in records)
    for s in records:  # one advantage per own policy turn
        own = [t for t in s.trajectory.turns if t.role == "policy"]
        assert len(s.turn_advantages or ()) == len(own)
    # the scripted episodes differ in reward, so some turns carry credit and the trainer moved
    assert any(a != 0.0 for s in records for a in s.turn_advantages or ())
    assert any(r.get("train/adv_abs_mean", 0.0) > 0.0 for r in trained)
