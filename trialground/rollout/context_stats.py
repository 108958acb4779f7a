"""Context use of one step's episodes: how long contexts get, and how often budgets cut them.

`context_metrics(trajectories, domains)` returns, over every trajectory (errors included: a cut context
is often why an episode failed):

- `context/tokens_mean`, `context/tokens_p90`, `context/tokens_max`: tokens per episode (prompt, policy
  turns and observations: the whole context the policy saw last);
- `context/truncation_rate`: share of episodes the context budget cut (`Trajectory.truncated`), and
  `context/truncation_rate/<domain>` per task domain;
- `context/observation_cut_rate`: share of observations the observation budget cut (`truncate_middle`'s
  marker), and `context/observation_chars_mean`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from trialground.rollout.trajectory import Trajectory

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
