"""Cost accounting: sandbox-seconds, generated tokens and trainer time turned into money.

Input keys, read from each step's metrics when present (all optional):

| key | meaning |
|---|---|
| `env/sandbox_s` | sandbox-seconds consumed this step (sum over sandboxes of wall time held) |
| `rollout/generated_tokens` | tokens the policy generated this step |
| `rollout/useful_tokens` | of those, tokens of trajectories with non-zero advantage (see `useful_tokens`) |
| `train/step_s` | trainer wall seconds this step |

Output keys (added to the same step's metrics): `cost/sandbox_usd`, `cost/generation_usd`,
`cost/trainer_usd`, `cost/step_usd`, `cost/per_useful_token_usd` (step cost / useful tokens; absent when
none were useful), `cost/total_usd`, `cost/per_useful_token_cum_usd`, and running totals
`cost/sandbox_s_total`, `cost/generated_tokens_total`, `cost/useful_tokens_total`, `cost/trainer_s_total`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trialground.monitor.config import CostConfig

INPUT_KEYS = ("env/sandbox_s", "rollout/generated_tokens", "rollout/useful_tokens", "train/step_s")


def useful_tokens(advantages: Sequence[float | None], completion_tokens: Sequence[int]) -> int:
    """Generated tokens that carry gradient: those of trajectories whose advantage is non-zero.

    An advantage of None (an infrastructure failure, excluded from training) counts as not useful.
    """
    return sum(
        int(n) for adv, n in zip(advantages, completion_tokens, strict=True) if adv is not None and adv != 0.0
    )


class CostMeter:
    """Accumulates resource use and prices it. `update` returns the `cost/...` keys for one step."""

    def __init__(self, config: CostConfig) -> None:
        self.config = config
        self.sandbox_s = 0.0
        self.tokens = 0.0
        self.useful = 0.0
        self.trainer_s = 0.0
        self.total_usd = 0.0

    def update(self, metrics: Mapping[str, float]) -> dict[str, float]:
        if not any(k in metrics for k in INPUT_KEYS):
            return {}
        c = self.config
        sandbox_s = float(metrics.get("env/sandbox_s", 0.0) or 0.0)
        tokens = float(metrics.get("rollout/generated_tokens", 0.0) or 0.0)
        useful = float(metrics.get("rollout/useful_tokens", 0.0) or 0.0)
        trainer_s = float(metrics.get("train/step_s", 0.0) or 0.0)
        sandbox_usd = sandbox_s / 3600.0 * c.sandbox_usd_per_hour
        generation_usd = tokens / 1e6 * c.usd_per_million_tokens
        trainer_usd = trainer_s / 3600.0 * c.trainer_usd_per_hour
        step_usd = sandbox_usd + generation_usd + trainer_usd
        self.sandbox_s += sandbox_s
        self.tokens += tokens
        self.useful += useful
        self.trainer_s += trainer_s
        self.total_usd += step_usd
        out = {
            "cost/sandbox_usd": sandbox_usd,
            "cost/generation_usd": generation_usd,
            "cost/trainer_usd": trainer_usd,
            "cost/step_usd": step_usd,
            "cost/total_usd": self.total_usd,
            "cost/sandbox_s_total": self.sandbox_s,
            "cost/generated_tokens_total": self.tokens,
            "cost/useful_tokens_total": self.useful,
            "cost/trainer_s_total": self.trainer_s,
        }
        if useful > 0:
            out["cost/per_useful_token_usd"] = step_usd / useful
        if self.useful > 0:
            out["cost/per_useful_token_cum_usd"] = self.total_usd / self.useful
        return out
