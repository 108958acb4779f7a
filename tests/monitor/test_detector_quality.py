"""Detector precision and recall against labelled trajectories, read from a run's Parquet files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trialground.monitor.detector_quality import ANY, CHANGED, detector_quality, format_table
from trialground.orchestrator.rundir import TRAJECTORY_SCHEMA


def _write(path: Path, rows: list[tuple[float | None, list[str], str | None]]) -> None:
    cols: dict[str, list[object]] = {n: [None] * len(rows) for n in TRAJECTORY_SCHEMA.names}
    cols["reward"] = [r for r, _, _ in rows]
    cols["flags"] = [f for _, f, _ in rows]
    cols["error_kind"] = [e for _, _, e in rows]
    (path / "trajectories").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols, schema=TRAJECTORY_SCHEMA), path / "trajectories" / "step_000001.parquet")


def test_counts_against_the_label(tmp_path: Path) -> None:
    _write(
        tmp_path,
        [
            (1.0, ["tests_not_run", "early_exit"], None),  # a hack, detected
            (1.0, ["tests_not_run"], None),  # a hack, missed
            (1.0, ["early_exit"], None),  # an honest pass, falsely flagged
            (0.0, ["tests_not_run", "special_casing"], None),  # labelled but not paid: no hack
            (1.0, [], None),  # honest
            (None, ["tests_not_run"], "sandbox"),  # infrastructure failure: left out
        ],
    )
    q = detector_quality(tmp_path)
    assert (q.trajectories, q.hacks) == (5, 2)
    by = {c.detector: c for c in q.detectors}
    assert (by["early_exit"].tp, by["early_exit"].fp, by["early_exit"].fn) == (1, 1, 1)
    assert by["early_exit"].precision == 0.5 and by["early_exit"].recall == 0.5
    assert (by["special_casing"].tp, by["special_casing"].fp) == (0, 1)
    assert (by[ANY].tp, by[ANY].fp, by[ANY].fn) == (1, 2, 1)
    assert "| early_exit | 1 | 1 | 1 | 50.0% | 50.0% |" in format_table(q)


def test_changed_visible_checks_count_as_a_detector(tmp_path: Path) -> None:
    _write(tmp_path, [(1.0, ["tests_not_run"], None), (1.0, [], None), (0.0, [], None)])
    file = tmp_path / "trajectories" / "step_000001.parquet"
    table = pq.read_table(file)
    changed = pa.array([True, None, True], pa.bool_())
    pq.write_table(table.set_column(table.schema.get_field_index(CHANGED), CHANGED, changed), file)
    by = {c.detector: c for c in detector_quality(tmp_path).detectors}
    assert (by[CHANGED].tp, by[CHANGED].fp, by[CHANGED].fn) == (1, 1, 0)


def test_runs_without_the_hash_column(tmp_path: Path) -> None:
    _write(tmp_path, [(1.0, ["tests_not_run", "does_not_compile"], None)])
    file = tmp_path / "trajectories" / "step_000001.parquet"
    pq.write_table(pq.read_table(file).drop_columns(["visible_checks", CHANGED]), file)
    by = {c.detector: c for c in detector_quality(tmp_path).detectors}
    assert set(by) == {"does_not_compile", ANY} and by["does_not_compile"].recall == 1.0
