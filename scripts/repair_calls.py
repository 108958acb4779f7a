"""What a policy did in repair episodes: each episode's calls in one line, and which paths were solved.

    .venv/bin/python scripts/repair_calls.py runs/swe_fixes_cpu/evaluations/eval_step_8.parquet
    .venv/bin/python scripts/repair_calls.py runs/swe_fixes_cpu/trajectories/step_*.parquet --paths 5
    .venv/bin/python scripts/repair_calls.py EPISODES.parquet --episodes
    .venv/bin/python scripts/repair_calls.py runs/swe_fixes_cpu/trajectories/step_*.parquet --groups

Reads episode files of the run directory's trajectory columns (`trajectories/step_N.parquet`,
`evaluations/*.parquet`, `trialground eval --episodes DIR`) and parses every completion's tool calls with
the environment's own parser. A path is written `F A1 R A2 R S`: `F` fixes(), `An` apply_fix(n) (`A`
without a number), `R` run_tests(), `S` submit(), any other tool by its name, `?` a call that did not
parse; the suite's verdicts follow after `|` (`F` failed, `p` passed). Per file: the paths by frequency
with how many were solved, and the share of episodes that ran the suite right after applying their first
candidate (the decision `tiny-fix` is unsure of, docs/swe.md). `--groups` also lists every task whose
episodes' rewards differ (the only groups a group-relative advantage learns from), each episode with its
reward and advantage.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from trialground.envs.toolcalls import InvalidCall, parse_tool_calls

SHORT = {"fixes": "F", "run_tests": "R", "submit": "S"}
VERDICT = re.compile(r"tests (passed|FAILED)")
APPLY = re.compile(r"A\d*")  # an apply_fix call's code (other tools keep their lower-case names)


def calls(completion: str) -> list[str]:
    """One code per tool call of an episode's completion, in order."""
    out = []
    for call in parse_tool_calls(completion):
        if isinstance(call, InvalidCall):
            out.append("?")
        elif call.name == "apply_fix":
            out.append(f"A{call.arguments.get('n', '')}")
        else:
            out.append(SHORT.get(call.name, call.name))
    return out


def path(completion: str) -> str:
    verdicts = "".join(v[0] for v in VERDICT.findall(completion))
    return " ".join(calls(completion)) + (f" | {verdicts}" if verdicts else "")


def tests_after_first(codes: list[str]) -> bool | None:
    """Whether the call after the first apply_fix ran the suite (None: none applied, or no call after it)."""
    first = next((i for i, c in enumerate(codes) if APPLY.fullmatch(c)), None)
    if first is None or first + 1 >= len(codes):
        return None
    return codes[first + 1] == "R"


def summarise(file: Path, top: int, episodes: bool, groups: bool = False) -> str:
    columns = ["task_id", "outcome", "reward", "advantage", "completion"]
    rows = pq.read_table(file, columns=columns).to_pylist()
    lines = [f"{file}: {len(rows)} episodes, {sum(_solved(r) for r in rows)} solved"]
    if episodes:
        lines += [
            f"  {r['task_id']}  {'solved' if _solved(r) else 'failed':6}  {path(r['completion'])}"
            for r in rows
        ]
    tally = Counter(path(r["completion"]) for r in rows)
    solved = Counter(path(r["completion"]) for r in rows if _solved(r))
    for p, n in tally.most_common(top):
        lines.append(f"  {n:4d} ({solved[p]} solved)  {p}")
    decided = [d for d in (tests_after_first(calls(r["completion"])) for r in rows) if d is not None]
    if decided:
        lines.append(f"  ran the suite after the first candidate: {sum(decided)} of {len(decided)}")
    if groups:
        lines += signal_groups(rows)
    return "\n".join(lines)


def signal_groups(rows: list[dict[str, Any]]) -> list[str]:
    """The tasks whose episodes' rewards differ: `outcome` when some were solved and some not, `reward
    only` when they differ in the rest of the reward alone (efficiency, process)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_task.setdefault(r["task_id"], []).append(r)
    lines = []
    for task, group in by_task.items():
        rewards = {r["reward"] for r in group if r["reward"] is not None}
        if len(rewards) < 2:
            continue
        kind = "outcome" if len({_solved(r) for r in group}) > 1 else "reward only"
        lines.append(f"  group {task} ({kind}):")
        for r in group:
            adv = "-" if r["advantage"] is None else f"{r['advantage']:+.2f}"
            reward = "none " if r["reward"] is None else f"{r['reward']:.3f}"  # an infrastructure error
            lines.append(f"    reward {reward}  advantage {adv:>5}  {path(r['completion'])}")
    n = len(by_task)
    return [
        f"  groups whose rewards differ: {sum(line.startswith('  group') for line in lines)} of {n}",
        *lines,
    ]


def _solved(row: dict[str, Any]) -> bool:
    outcome = row["outcome"]
    return isinstance(outcome, float) and outcome > 0.0  # RewardBreakdown.solved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="episode parquet files")
    parser.add_argument("--paths", type=int, default=10, help="most frequent paths shown per file")
    parser.add_argument("--episodes", action="store_true", help="also one line per episode")
    parser.add_argument("--groups", action="store_true", help="also the groups whose rewards differ")
    args = parser.parse_args()
    missing = [str(f) for f in args.files if not f.is_file()]
    if missing:
        parser.error(f"no such episode file: {', '.join(missing)}")
    for file in sorted(args.files, key=_step_order):
        print(summarise(file, args.paths, args.episodes, args.groups))


def _step_order(file: Path) -> tuple[str, int]:
    stem, _, number = file.stem.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (file.stem, -1)


if __name__ == "__main__":
    main()
