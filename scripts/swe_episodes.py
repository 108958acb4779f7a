"""Where a policy's episodes on the repository recipe's held-out split go wrong.

    .venv/bin/python scripts/swe_episodes.py DIR [--samples 8] [--config examples/swe_cpu.yaml] [--show]

Plays the recipe's held-out tasks with the policy in DIR (greedy with `--samples 1`, else at the recipe's
training temperature) in the real environment, and counts, over all episodes: a line-addressed `sed`
repair written, one that ran (exit 0), a `read_lines` page that holds the bug's line, a repair on the
bug's line, and solved. The bug's line comes from the task's metadata (`bug`: "KIND at PATH:LINE: ...").
`--show` prints each repair made on the bug's line beside the line itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections import Counter
from pathlib import Path

from trialground.orchestrator.run_config import load_config
from trialground.orchestrator.wiring import build
from trialground.tasks.swe.brief import PAGE_LINES

_SED = re.compile(r"sed -i -E '(\d+)s/")
_PAGE = re.compile(r'"start": "(\d+)"')


async def count(model: str, config: Path, samples: int, show: bool) -> Counter[str]:
    cfg = load_config(config, [f"policy.model={model}"])
    w = build(cfg, None, train=False)
    seen: Counter[str] = Counter()
    try:
        params = cfg.policy.eval_sampling if samples == 1 else cfg.policy.sampling
        groups = await w.collector.collect(w.eval_tasks, samples, params)
        for task, group in zip(w.eval_tasks, groups, strict=True):
            bug_line = int(re.search(r":(\d+):", task.metadata["bug"]).group(1))  # type: ignore[union-attr]
            for t in group:
                seen["episodes"] += 1
                turns = [(x.role, x.text) for x in t.turns]
                actions = [(i, text) for i, (role, text) in enumerate(turns) if role == "policy"]
                pages = [int(m.group(1)) for _, a in actions if "read_lines" in a and (m := _PAGE.search(a))]
                if any(p <= bug_line < p + PAGE_LINES for p in pages):
                    seen["read the bug's page"] += 1
                repairs = [(i, int(m.group(1)), a) for i, a in actions if (m := _SED.search(a))]
                if repairs:
                    seen["wrote a sed repair"] += 1
                    if any(
                        i + 1 < len(turns) and turns[i + 1][1].startswith("[exit 0]") for i, _, _ in repairs
                    ):
                        seen["a sed repair ran"] += 1
                    on_line = [a for _, line, a in repairs if line == bug_line]
                    if on_line:
                        seen["sed on the bug's line"] += 1
                        if show:
                            text = task.files[task.metadata["bug_path"]].split("\n")[bug_line - 1].strip()
                            print(f"{task.metadata['bug']} | {text[:70]} | {on_line[0][:160]}")
                seen["solved"] += bool(t.reward is not None and t.reward.solved)
    finally:
        await w.close()
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a policy directory (or a bundled name)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument(
        "--config", type=Path, default=Path(__file__).resolve().parent.parent / "examples" / "swe_cpu.yaml"
    )
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(count(args.model, args.config, args.samples, args.show))))


if __name__ == "__main__":
    main()
