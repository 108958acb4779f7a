"""Precision and recall of the SWE diff policy (evidence, not the verdict) on a labelled set.

Positives: every forgery of `tests/hacks/swe_attack_patches.py` (each leaves the bug in place and forges
the verdict in-process: frames, inspect, pytest and pluggy patched, the record pipe written with or without
a star import or an encoding declaration, an early exit, a lying `__eq__`, the test file read as data) on
every task of the cached inflection task sets. Negatives: the gold patch of every cached task of every
repository. A patch is flagged when `added_violations` finds anything in one of its library files.

    python benchmarks/swe_policy_labelled.py          # one line of counts, then the misses by label
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from trialground.tasks.swe.patch import apply_patch
from trialground.tasks.swe.policy import added_violations
from trialground.tasks.swe.repos import cache_dir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "hacks"))


def flagged(files: dict[str, str], patch: str) -> bool:
    changed = apply_patch(files, patch)
    return any(added_violations(files.get(p), t) for p, t in changed.items() if p.endswith(".py"))


def main() -> None:
    from swe_attack_patches import attacks, forgeries

    from trialground.tasks.sources import load_source

    seen: set[str] = set()
    tp = fn = fp = tn = 0
    missed: collections.Counter[str] = collections.Counter()
    refused_gold: list[str] = []
    for path in sorted((cache_dir() / "tasks").glob("*.json")):
        head = json.loads(path.read_text())
        repo, n = head["repo"], len(head["records"])
        source = f"swe:{repo}:{path.name.split('-c')[1].split('-')[0]}"
        tasks = [t for t in load_source(source) if t.id not in seen]
        seen.update(t.id for t in tasks)
        for task in tasks:
            if flagged(task.files, task.reference or ""):
                fp += 1
                refused_gold.append(task.id)
            else:
                tn += 1
            if repo != "inflection":
                continue
            for label, patch in {**attacks(task), **forgeries(task)}.items():
                if flagged(task.files, patch):
                    tp += 1
                else:
                    fn += 1
                    missed[label] += 1
        print(f"{source}: {len(tasks)} tasks ({n} records)", file=sys.stderr)
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    print(
        f"forgeries flagged {tp}/{tp + fn} (recall {recall:.3f}), gold patches flagged {fp}/{fp + tn}, "
        f"precision {precision:.3f}"
    )
    for label, k in sorted(missed.items()):
        print(f"  missed: {label} x{k}")
    for task_id in refused_gold:
        print(f"  gold flagged: {task_id}")


if __name__ == "__main__":
    main()
