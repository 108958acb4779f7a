"""The shaping measurements the rubric (`trialground.verify.reward.rubric`) pays: process score, redundant
actions, and the overlong penalty.

`process_score` in [0, 1] is a weighted mean of three parts (weights `tests_part`, `errors_part`,
`waste_part`, normalised to sum 1):

- tests: 1 when a test tool ran after the last workspace change and before submitting, 0.5 when tests ran
  only before later edits, 0 when they never ran;
- errors: 1 / (1 + failed tool calls);
- waste: 1 / (1 + redundant actions).

Both count, they do not divide by the number of actions: a share over all actions would let extra calls that
do nothing dilute the failures and the waste, so padding an episode with harmless calls would raise its
reward. More actions can never raise the process score here.

An action is redundant when it is (a) an edit that changed nothing, (b) a read of a file that has not
changed since it was last read, or (c) any other action identical (same tool and argument digest) to an
earlier one with no workspace change in between. Each redundant action is counted once. An episode with
no actions (single-turn completion) has process_score 0 and no redundant actions, so a correct answer
earns exactly 1.0.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from trialground.verify.config import RewardConfig
from trialground.verify.verdict import Action


class ProcessStats(BaseModel):
    """What the shaping terms were computed from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    actions: int
    tool_errors: int
    redundant: int
    tests_score: float
    process_score: float


def count_redundant(actions: Sequence[Action], config: RewardConfig) -> int:
    """Redundant actions: no-op edits, re-reads of unchanged files, repeats with nothing changed between."""
    redundant = 0
    seen: set[tuple[str, str]] = set()  # identical actions since the last workspace change
    read_since_change: set[str] = set()  # files read since they (or anything) last changed
    for a in actions:
        if a.tool in config.edit_tools:
            if a.changed_workspace is False:
                redundant += 1
                continue
        elif a.tool in config.read_tools and a.target is not None:
            if a.target in read_since_change:
                redundant += 1
                continue
            read_since_change.add(a.target)
        elif (a.tool, a.argument_digest) in seen and not a.changed_workspace:
            redundant += 1
            continue
        if a.changed_workspace:
            seen.clear()
            read_since_change.clear()
        seen.add((a.tool, a.argument_digest))
    return redundant


def process_stats(actions: Sequence[Action], config: RewardConfig) -> ProcessStats:
    n = len(actions)
    if n == 0:
        return ProcessStats(actions=0, tool_errors=0, redundant=0, tests_score=0.0, process_score=0.0)
    errors = sum(1 for a in actions if not a.ok)
    redundant = count_redundant(actions, config)
    end = next((i for i, a in enumerate(actions) if a.tool == "submit"), n)
    last_change = max((i for i, a in enumerate(actions[:end]) if a.changed_workspace), default=-1)
    test_runs = [i for i, a in enumerate(actions[:end]) if a.tool in config.test_tools and a.ok]
    tests = 1.0 if any(i > last_change for i in test_runs) else (0.5 if test_runs else 0.0)
    parts = (config.tests_part, config.errors_part, config.waste_part)
    scores = (tests, 1.0 / (1 + errors), 1.0 / (1 + redundant))
    weight = sum(parts)
    score = sum(p * s for p, s in zip(parts, scores, strict=True)) / weight if weight > 0 else 0.0
    return ProcessStats(
        actions=n, tool_errors=errors, redundant=redundant, tests_score=tests, process_score=score
    )


def overlong_penalty(length: int, max_length: int, *, buffer: int = 0, penalty: float = 1.0) -> float:
    """DAPO's soft overlong punishment, in [-penalty, 0].

    0 while `length <= max_length - buffer`; then falls linearly to `-penalty` at `max_length`; stays
    `-penalty` beyond. `buffer=0` gives the hard version: `-penalty` exactly when the response used the
    whole budget (it was cut).
    """
    if max_length <= 0:
        raise ValueError(f"max_length must be positive, got {max_length}")
    if buffer < 0 or buffer > max_length:
        raise ValueError(f"buffer must be in [0, max_length], got {buffer}")
    if penalty == 0.0:
        return 0.0
    if length >= max_length:
        return -penalty
    threshold = max_length - buffer
    if buffer == 0 or length <= threshold:
        return 0.0
    return -penalty * (length - threshold) / buffer
