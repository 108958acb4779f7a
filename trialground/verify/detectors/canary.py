"""The canary set: submissions whose verdict is known, re-scored at every evaluation.

A change in how canaries score means the reward moved while the policy did not (a verifier or sandbox
regression, a drifting judge): the `reward_drift` alert rule watches these keys.

`canary_set(tasks, n)` takes the first `n` tasks (by id) that carry a `reference` and pairs each with two
submissions: its own reference (label: passes) and the reference of the next such task that differs
(label: fails). `rescore(grader, canaries, ...)` grades them with the rule verifier and, when the grader
has a judge, scores them with the judge (`CanaryCheck`):

- `canary/good_pass_rate`: share of references that pass (1.0 on a healthy verifier);
- `canary/bad_pass_rate`: share of wrong submissions that pass (0.0 on a healthy verifier);
- `canary/errors`: gradings that ended in an infrastructure error (left out of both rates);
- `canary/judge_accuracy`: share of canaries the judge labels right (with a judge).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from trialground.errors import TrialgroundError
from trialground.tasks.model import Task
from trialground.verify.grader import Grader
from trialground.verify.judges.judge import Canary, CanaryCheck
from trialground.verify.verdict import Verdict


def canary_set(tasks: Sequence[Task], n: int) -> list[Canary]:
    """Up to `2 n` labelled canaries from `tasks` (deterministic: ordered by task id)."""
    with_ref = sorted((t for t in tasks if t.reference), key=lambda t: t.id)
    picked = with_ref[:n]
    out: list[Canary] = []
    for i, task in enumerate(picked):
        assert task.reference is not None
        out.append(Canary(task=task, submission=task.reference, label=True))
        others = (with_ref[(i + j) % len(with_ref)].reference for j in range(1, len(with_ref)))
        wrong = next((r for r in others if r is not None and r.strip() != task.reference.strip()), None)
        out.append(Canary(task=task, submission=wrong if wrong is not None else "", label=False))
    return out


async def rescore(grader: Grader, canaries: Sequence[Canary], *, step: int = 0) -> dict[str, float]:
    """The `canary/*` metrics for `canaries` (empty when there are none)."""
    if not canaries:
        return {}
    good = bad = good_n = bad_n = errors = 0
    # all at once: single-turn code gradings share batched sandbox execs
    verdicts = await asyncio.gather(
        *(grader.verdict(c.task, c.submission) for c in canaries), return_exceptions=True
    )
    for c, verdict in zip(canaries, verdicts, strict=True):
        if isinstance(verdict, TrialgroundError) or (isinstance(verdict, Verdict) and verdict.error):
            errors += 1
            continue
        if isinstance(verdict, BaseException):
            raise verdict  # a bug, not a verdict
        if c.label:
            good_n += 1
            good += verdict.passed
        else:
            bad_n += 1
            bad += verdict.passed
    out = {
        "canary/good_pass_rate": good / good_n if good_n else 0.0,
        "canary/bad_pass_rate": bad / bad_n if bad_n else 0.0,
        "canary/errors": float(errors),
    }
    if grader.judge is not None:
        report = await CanaryCheck(
            canaries, threshold=grader.reward_config.judge.threshold if grader.reward_config.judge else 0.5
        ).run(grader.judge, step)
        out["canary/judge_accuracy"] = report.accuracy
        out["canary/judge_errors"] = float(report.errors)
    return out
