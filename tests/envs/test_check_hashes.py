"""Test-integrity hashes: real bwrap episodes record the sha256 of each visible check at the start and the
end; an edited, replaced or deleted visible check is counted in `hack/visible_tests_changed_rate`, an
untouched one is not, and the verdict never depends on them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
from envkit import VISIBLE, call, code_task

from trialground.envs.base import CheckHashes, EpisodeEnd
from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.orchestrator.canaries import visible_check_metrics
from trialground.orchestrator.run_config import load_config
from trialground.orchestrator.rundir import RunDir
from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Scored
from trialground.verify.grader import Grader

CFG = EnvConfig(kind="tool", max_turns=6)
SHA = hashlib.sha256(VISIBLE.encode()).hexdigest()
FIX = call("edit_file", path="solution.py", old="a - b", new="a + b")


async def _episode(grader: Grader, sandbox_config, steps: list[str], cfg: EnvConfig = CFG) -> EpisodeEnd:
    env = ToolEnv(grader, cfg, sandbox_config)
    try:
        await env.reset(code_task())
        obs = None
        for text in steps:
            obs = await env.step(text)
        assert obs is not None and obs.done and obs.end is not None
        return obs.end
    finally:
        await env.close()


def _traj(end: EpisodeEnd | None, i: int = 0) -> Trajectory:
    return Trajectory(task_id="t", group_id="g", sample_index=i, policy_version=0, end=end)


async def test_untouched_visible_checks_are_not_counted(grader: Grader, sandbox_config) -> None:
    end = await _episode(grader, sandbox_config, [FIX, call("run_tests"), call("submit")])
    assert end.visible_checks == CheckHashes(start={"test_visible.py": SHA}, end={"test_visible.py": SHA})
    assert end.visible_checks.changed == () and _traj(end).visible_checks_changed is False
    assert verdict_of_end(end).passed
    assert visible_check_metrics([[_traj(end)]]) == {
        "hack/visible_tests_episodes": 1.0,
        "hack/visible_tests_changed_rate": 0.0,
    }


async def test_edited_deleted_or_replaced_visible_checks_are_counted(grader: Grader, sandbox_config) -> None:
    edited = await _episode(
        grader,
        sandbox_config,
        [
            FIX,
            call("write_file", path="test_visible.py", content="def test_ok():\n    pass\n"),
            call("submit"),
        ],
    )
    deleted = await _episode(
        grader, sandbox_config, [FIX, call("bash", command="rm test_visible.py"), call("submit")]
    )
    replaced = await _episode(
        grader,
        sandbox_config,
        [call("bash", command="rm test_visible.py && mkdir test_visible.py"), call("submit")],
    )
    untouched = await _episode(grader, sandbox_config, [FIX, call("submit")])
    assert edited.visible_checks is not None and edited.visible_checks.start == {"test_visible.py": SHA}
    new = hashlib.sha256(b"def test_ok():\n    pass\n").hexdigest()
    assert edited.visible_checks.end == {"test_visible.py": new}
    assert deleted.visible_checks is not None and deleted.visible_checks.end == {"test_visible.py": None}
    assert replaced.visible_checks is not None and replaced.visible_checks.end == {"test_visible.py": None}
    for end in (edited, deleted, replaced):
        assert end.visible_checks is not None and end.visible_checks.changed == ("test_visible.py",)
        assert _traj(end).visible_checks_changed is True
    trajs = [_traj(e, i) for i, e in enumerate((edited, deleted, replaced, untouched))]
    trajs.append(_traj(None, 9))  # no hashes (an infrastructure failure): not in the denominator
    assert visible_check_metrics([trajs]) == {
        "hack/visible_tests_episodes": 4.0,
        "hack/visible_tests_changed_rate": 0.75,
    }
    # evidence only: the hashes are not what failed these verdicts (the tampering detector did)
    assert {f.name for f in verdict_of_end(edited).flags} >= {"test_tampering"}


async def test_limit_without_grading_still_records_the_end(grader: Grader, sandbox_config) -> None:
    cfg = EnvConfig(kind="tool", max_turns=1, grade_on_limit=False)
    end = await _episode(grader, sandbox_config, [call("bash", command="echo x >> test_visible.py")], cfg)
    assert end.graded is None and end.finish_reason == "max_turns"
    assert end.visible_checks is not None and end.visible_checks.changed == ("test_visible.py",)


async def test_off_records_nothing(grader: Grader, sandbox_config) -> None:
    cfg = EnvConfig(kind="tool", max_turns=6, visible_check_hashes=False)
    end = await _episode(grader, sandbox_config, [FIX, call("submit")], cfg)
    assert end.visible_checks is None and _traj(end).visible_checks_changed is None
    assert visible_check_metrics([[_traj(end)]]) == {}


def test_run_dir_records_the_hashes(tmp_path: Path) -> None:
    hashes = CheckHashes(start={"test_visible.py": SHA}, end={"test_visible.py": None})
    end = EpisodeEnd(finish_reason="submitted", visible_checks=hashes)
    run_dir = RunDir(load_config(None, [f"output_dir={tmp_path}", "name=h"]))
    batch = [Scored(_traj(end), None, None), Scored(_traj(None, 1), None, None)]
    rows = pq.read_table(run_dir.write_step(1, batch, ["", ""], {})).to_pylist()
    assert [r["visible_checks_changed"] for r in rows] == [True, None]
    assert json.loads(rows[0]["visible_checks"]) == {
        "start": {"test_visible.py": SHA},
        "end": {"test_visible.py": None},
    }
    assert rows[1]["visible_checks"] is None


def verdict_of_end(end: EpisodeEnd):  # type: ignore[no-untyped-def]
    assert end.graded is not None
    return end.graded.verdict
