"""Admitting candidate tasks (from recorded failures, or a user's own) like every other task: duplicates
dropped, invalid ones dropped, hackable ones dropped, each with its reason.

    kept, dropped = await admit(candidates, pool=existing, validate=True, audit=True)

1. duplicates: a candidate equal to an earlier candidate after normalisation (`content_key`), or equal to
   or covering a task of `pool` (`decontaminate`, the run's own measure);
2. validation (`validate_tasks`): the reference passes (`runs` times), trivial and adversarial submissions
   fail; a candidate that is not `valid` is dropped with its problems;
3. the audit (`audit_tasks`): a candidate some exploit strategy was paid on, or that fails the gold gate,
   is dropped with the strategies.
"""

from __future__ import annotations

from collections.abc import Sequence

from trialground.tasks.dedup import content_key, decontaminate
from trialground.tasks.model import Task


async def admit(
    candidates: Sequence[Task],
    *,
    pool: Sequence[Task] = (),
    validate: bool = True,
    audit: bool = True,
    runs: int = 2,
    concurrency: int = 8,
) -> tuple[list[Task], list[tuple[str, str]]]:
    """(the admitted tasks, (task id, why) for each dropped one)."""
    dropped: list[tuple[str, str]] = []
    seen: set[str] = set()
    unique: list[Task] = []
    for t in candidates:
        key = content_key(t)
        if key in seen:
            dropped.append((t.id, "duplicate of an earlier candidate"))
            continue
        seen.add(key)
        unique.append(t)
    kept, report = decontaminate(unique, pool) if pool else (unique, None)
    if report is not None:
        dropped += [(tid, "repeats a task of the pool") for tid in report.removed_copies]
        dropped += [(tid, "near-duplicate of a task of the pool") for tid in report.removed_near]
    if validate and kept:
        from trialground.verify.validate import validate_tasks

        checked = await validate_tasks(kept, runs=runs, concurrency=concurrency)
        bad = {r.task_id: "; ".join(r.problems)[:300] for r in checked.tasks if r.status != "valid"}
        dropped += [(tid, f"invalid: {why}") for tid, why in bad.items()]
        kept = [t for t in kept if t.id not in bad]
    if audit and kept:
        from trialground.verify.audit import audit_tasks

        found = await audit_tasks([("candidates", kept)], concurrency=concurrency)
        bad = dict(found.excluded())
        dropped += [(tid, f"audit: {why}") for tid, why in bad.items()]
        kept = [t for t in kept if t.id not in bad]
    return kept, dropped
