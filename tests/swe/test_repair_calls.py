"""scripts/repair_calls.py: repair episodes read back as call paths from episode files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from script_helpers import load_script

from trialground.envs.toolcalls import format_tool_call

rc = load_script("scripts/repair_calls.py")


def _episode(*steps: tuple[str, dict[str, str], str]) -> str:
    """A completion as a rollout decodes it: each call, then the tool's output."""
    return "".join(f"{format_tool_call(name, args)}\n\n{output}\n\n" for name, args, output in steps)


LISTING = ("fixes", {}, "2 fixes in pkg/mod.py for 1 failing tests:\n1. line 3: a -> b\n2. line 4: c -> d")
SHORTCUT = _episode(LISTING, ("apply_fix", {"n": "1"}, "applied fix 1"), ("submit", {}, "submitted"))
TESTED = _episode(
    LISTING,
    ("apply_fix", {"n": "1"}, "applied fix 1"),
    ("run_tests", {}, "tests FAILED (1 of 2 runs)"),
    ("apply_fix", {"n": "2"}, "applied fix 2"),
    ("run_tests", {}, "tests passed (2 runs)"),
    ("submit", {}, "submitted"),
)


def test_paths_name_each_call_and_verdict() -> None:
    assert rc.path(SHORTCUT) == "F A1 S"
    assert rc.path(TESTED) == "F A1 R A2 R S | Fp"
    assert rc.path(_episode(("bash", {"cmd": "ls"}, "x")) + "<tool_call>{not json</tool_call>") == "bash ?"
    assert rc.tests_after_first(rc.calls(TESTED)) is True
    assert rc.tests_after_first(rc.calls(SHORTCUT)) is False
    assert rc.tests_after_first(["F", "S"]) is None


def test_summary_counts_paths_solved_and_the_groups_that_carry_signal(tmp_path: Path) -> None:
    rows = {
        "task_id": ["a", "a", "a", "b", "b", "a"],
        "outcome": [1.0, 0.0, 0.0, 0.0, 0.0, None],
        "reward": [1.175, 0.0, 0.0, 0.0, 0.0, None],  # the last one an infrastructure error
        "advantage": [1.15, -0.58, -0.58, 0.0, 0.0, None],
        "completion": [
            TESTED,
            SHORTCUT,
            SHORTCUT,
            SHORTCUT,
            TESTED.replace("passed (2", "FAILED (1 of 2"),
            SHORTCUT,
        ],
    }
    file = tmp_path / "step_3.parquet"
    pq.write_table(pa.table(rows), file)
    text = rc.summarise(file, top=5, episodes=False, groups=True)
    lines = text.splitlines()
    assert lines[0] == f"{file}: 6 episodes, 1 solved"
    assert "     4 (0 solved)  F A1 S" in lines and "     1 (1 solved)  F A1 R A2 R S | Fp" in lines
    assert "  ran the suite after the first candidate: 2 of 6" in lines
    assert "  groups whose rewards differ: 1 of 2" in lines and "  group a (outcome):" in lines
    assert "group b" not in text  # equal rewards: no signal
    assert "    reward 1.175  advantage +1.15  F A1 R A2 R S | Fp" in lines
    assert "    reward none   advantage     -  F A1 S" in lines
