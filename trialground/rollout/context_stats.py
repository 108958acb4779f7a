"""Context use of one step's episodes: how long contexts get, and how often budgets cut them.

`context_metrics(trajectories, domains)` returns, over every trajectory (errors included: a cut context
is often why an episode failed):

- `context/tokens_mean`, `context/tokens_p90`, `context/tokens_max`: tokens per episode (prompt, policy
  turns and observations: the whole context the policy saw last);
- `context/truncation_rate`: share of episodes the context budget cut (`Trajectory.truncated`), and
  `context/truncation_rate/<domain>` per task domain;
- `context/observation_cut_rate`: share of observations the observation budget cut (`truncate_middle`'s
  marker), and `context/observation_chars_mean`.

`WorkspaceTokens` adds how large the tasks' workspaces are against the context (`context/workspace_*`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trialground.rollout.trajectory import Trajectory
from trialground.tasks.model import Task

_CUT = re.compile(r"\n\[\.\.\. \d+ chars dropped \.\.\.\]\n")


def context_metrics(trajs: Sequence[Trajectory], domains: Mapping[str, str]) -> dict[str, float]:
    if not trajs:
        return {}
    tokens = [sum(len(turn.token_ids) for turn in t.turns) for t in trajs]
    observations = [turn.text for t in trajs for turn in t.turns if turn.role == "env"]
    out = {
        "context/tokens_mean": float(np.mean(tokens)),
        "context/tokens_p90": float(np.percentile(tokens, 90)),
        "context/tokens_max": float(max(tokens)),
        "context/truncation_rate": sum(t.truncated for t in trajs) / len(trajs),
    }
    if observations:
        out["context/observation_cut_rate"] = sum(bool(_CUT.search(o)) for o in observations) / len(
            observations
        )
        out["context/observation_chars_mean"] = float(np.mean([len(o) for o in observations]))
    by_domain: dict[str, list[bool]] = defaultdict(list)
    for t in trajs:
        by_domain[domains.get(t.task_id, "unknown")].append(t.truncated)
    for domain, cut in by_domain.items():
        out[f"context/truncation_rate/{domain}"] = sum(cut) / len(cut)
    return out


class WorkspaceTokens:
    """How much text a task's workspace holds against the policy's context (`context/workspace_*`).

    `context/workspace_chars_mean` is exact over each step's tasks. Tokenising a large workspace costs
    seconds of CPU, so tokens are counted for the first `sample` distinct tasks a run sees (cached) and
    reported every step over that sample: `context/workspace_tokens_mean`, `context/workspace_tokens_min`
    and `context/workspace_to_context_min` (the smallest measured workspace over `max_context_tokens`)."""

    def __init__(self, tokenizer: Any, max_context_tokens: int, sample: int = 8) -> None:
        self._tokenizer = tokenizer
        self._context = max(1, max_context_tokens)
        self._sample = sample
        self._tokens: dict[str, int] = {}

    def _count(self, task: Task) -> int:
        texts = (v if isinstance(v, str) else v.decode("utf-8", "replace") for v in task.files.values())
        return sum(len(self._tokenizer.encode(t, add_special_tokens=False)) for t in texts if t)

    def metrics(self, tasks: Sequence[Task]) -> dict[str, float]:
        if not tasks:
            return {}
        for task in tasks:
            if len(self._tokens) < self._sample and task.id not in self._tokens:
                self._tokens[task.id] = self._count(task)
        chars = [sum(len(v) for v in t.files.values()) for t in tasks]
        out = {"context/workspace_chars_mean": float(np.mean(chars))}
        if self._tokens:
            counts = list(self._tokens.values())
            out["context/workspace_tokens_mean"] = float(np.mean(counts))
            out["context/workspace_tokens_min"] = float(min(counts))
            out["context/workspace_to_context_min"] = min(counts) / self._context
        return out
