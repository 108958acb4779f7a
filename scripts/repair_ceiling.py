"""How far the repair tools reach on a task set: where the right candidate stands in `fixes()`'s listing,
and what the scripted player (`trialground.rollout.swe_fixer.play_fixes`) solves with them.

    .venv/bin/python scripts/repair_ceiling.py swe:inflection:140:brief --split eval
    .venv/bin/python scripts/repair_ceiling.py swe:inflection:140:brief --split eval --play 4 6 --shortcut

For each task of the split, in a real sandbox: `fixes()`, then the rank of the listed candidate whose file
parses to the same tree as the library's own (the injected bug undone; a candidate that passes the tests
some other way is not counted here, the player's runs count it). `--play N ...` also plays the full
strategy with N tries (list, apply, run the suite, the next while it fails, submit) and `--shortcut` the
top candidate submitted untested; a task counts as solved when the grader passes the submission. Prints
one line a task and the totals; `--json FILE` writes them.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import time
from collections import Counter
from typing import Any

from trialground.envs.config import EnvConfig
from trialground.envs.repair import RepairMemo
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.rollout.swe_fixer import play_fixes
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.sources import load_source
from trialground.tasks.swe.repos import repo_files, repo_spec
from trialground.verify.grader import make_grader

ENV = EnvConfig(
    kind="tool", max_turns=16, observation_budget_chars=2000, tool_timeout_s=120, repair_tools=True
)


def _tree(text: str) -> str | None:
    try:
        return ast.dump(ast.parse(text))
    except (SyntaxError, ValueError):
        return None


async def _episode(task: Task, play: Any) -> Any:
    config = SandboxConfig()
    grader = make_grader(config)
    env = ToolEnv(grader, ENV, config)
    try:
        return await play(env)
    finally:
        await env.close()
        await grader.close()


def rank(task: Task, pristine: dict[str, str]) -> tuple[int | None, int]:
    """The 1-based rank of the candidate that restores the library's tree (None if none listed does) and
    how many were listed."""

    async def listing(env: ToolEnv) -> list[Any]:
        await env.reset(task)
        await env.step(format_tool_call("fixes", {}))
        return list(env.state.memos[RepairMemo].fixes)

    fixes = asyncio.run(_episode(task, listing))
    right = {path: _tree(text) for path, text in pristine.items()}
    found = next((i for i, f in enumerate(fixes, 1) if _tree(f.after) == right.get(f.path)), None)
    return found, len(fixes)


def solved(task: Task, **kw: Any) -> bool:
    trace = asyncio.run(_episode(task, lambda env: play_fixes(env, task, **kw)))
    return bool(trace["solved"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", help="a repository task source, e.g. swe:inflection:140:brief")
    parser.add_argument("--split", choices=["train", "eval"], default="eval")
    parser.add_argument("--play", type=int, nargs="*", default=[], metavar="TRIES")
    parser.add_argument("--shortcut", action="store_true", help="also play the top candidate untested")
    parser.add_argument("--json", dest="json_out", help="write the per-task rows and totals here")
    args = parser.parse_args()

    tasks = [t for t in load_source(args.source) if t.split == args.split]
    pristine: dict[str, dict[str, str]] = {}
    rows = []
    started = time.monotonic()
    for task in tasks:
        repo = str(task.verifier.params["repo"])
        if repo not in pristine:
            pristine[repo] = repo_files(repo_spec(repo))
        found, listed = rank(task, pristine[repo])
        row: dict[str, Any] = {"bug": task.metadata.get("bug"), "rank": found, "listed": listed}
        for tries in args.play:
            row[f"solved_{tries}"] = solved(task, tries=tries)
        if args.shortcut:
            row["solved_shortcut"] = solved(task, shortcut=True)
        rows.append(row)
        print(json.dumps(row), flush=True)
    ranks = Counter(r["rank"] for r in rows)
    totals: dict[str, Any] = {
        "tasks": len(rows),
        "ranks": {str(k): ranks[k] for k in sorted(ranks, key=lambda k: (k is None, k or 0))},
        **{f"within_{k}": sum(1 for r in rows if r["rank"] and r["rank"] <= k) for k in (1, 2, 3, 4, 6)},
        **{
            key: sum(1 for r in rows if r[key])
            for key in (rows[0] if rows else {})
            if key.startswith("solved_")
        },
        "wall_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(totals))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "totals": totals}, f, indent=1)


if __name__ == "__main__":
    main()
