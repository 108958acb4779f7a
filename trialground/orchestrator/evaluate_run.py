"""`trialground eval`: build the policy (optionally from a checkpoint) and score the held-out split."""

from __future__ import annotations

from pathlib import Path

from trialground.config import RunConfig
from trialground.orchestrator.components import build
from trialground.orchestrator.evaluate import evaluate


async def evaluate_run(
    config: RunConfig, *, checkpoint: Path | None = None, samples: int = 1
) -> dict[str, float]:
    """Greedy pass@1 (`eval/…`) and, when `samples > 1`, sampled pass@1 and pass@k (`eval_sampled/…`)."""
    c = build(config, None, train=False)
    try:
        if checkpoint is not None:
            import torch

            state = torch.load(checkpoint / "model.pt", map_location="cpu", weights_only=True)
            c.policy.load_weights(state, version=0)
        metrics = (await evaluate(c, c.eval_tasks, params=config.policy.eval_sampling)).metrics
        if samples > 1:
            sampled = await evaluate(
                c, c.eval_tasks, params=config.policy.sampling, samples=samples, prefix="eval_sampled"
            )
            metrics |= sampled.metrics
        return metrics
    finally:
        await c.close()
