"""`trialground eval`: build the policy (optionally from a checkpoint) and score the held-out split."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trialground.orchestrator.evaluate import EvalResult, evaluate
from trialground.orchestrator.run_config import RunConfig
from trialground.orchestrator.rundir import evaluation_records, write_episodes
from trialground.orchestrator.wiring import Wiring, build
from trialground.train.checkpoint import checkpoint_meta


async def evaluate_run(
    config: RunConfig,
    *,
    checkpoint: Path | None = None,
    samples: int = 1,
    on_task: Callable[[], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    episodes: Path | None = None,
) -> dict[str, float]:
    """Greedy pass@1 (`eval/…`) and, when `samples > 1`, sampled pass@1 and pass@k (`eval_sampled/…`).
    `on_start` is called once the tasks are built, with how many `on_task` calls will follow; `on_task` is
    called as each task of each pass is done (`len(tasks)` times, twice with `samples > 1`). With `episodes`
    (a directory), every episode goes to `episodes/eval.parquet` (greedy) and `episodes/eval_sampled.parquet`
    in the run directory's trajectory schema, `step` the checkpoint's (0 without one)."""
    w = build(config, None, train=False)
    try:
        if on_start is not None:
            on_start(len(w.eval_tasks) * (2 if samples > 1 else 1))
        if checkpoint is not None:  # its peft adapter on the run's base model, else its hf/ weights
            from trialground.policy.loading import base_model_dir
            from trialground.train.hf_checkpoint import checkpoint_weights

            state = checkpoint_weights(checkpoint, base_model_dir(config.policy))
            w.policy.load_weights(state, version=0)
        greedy = await evaluate(
            w.collector, w.eval_tasks, params=config.policy.eval_sampling, on_task=on_task
        )
        step = checkpoint_step(checkpoint)
        _keep(episodes, "eval", step, greedy, w)
        metrics = greedy.metrics
        if samples > 1:
            sampled = await evaluate(
                w.collector,
                w.eval_tasks,
                params=config.policy.sampling,
                samples=samples,
                prefix="eval_sampled",
                on_task=on_task,
            )
            _keep(episodes, "eval_sampled", step, sampled, w)
            metrics |= sampled.metrics
        return metrics
    finally:
        await w.close()


def checkpoint_step(checkpoint: Path | None) -> int:
    """The training step a checkpoint was saved at (its `meta.json`); 0 for the starting policy or a
    checkpoint directory without one."""
    meta = None if checkpoint is None else checkpoint_meta(checkpoint)
    return 0 if meta is None else int(meta.get("step", 0))


def _keep(directory: Path | None, name: str, step: int, result: EvalResult, w: Wiring) -> None:
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    records, texts = evaluation_records(result.trajectories, w.policy.tokenizer.decode)
    write_episodes(directory / f"{name}.parquet", step, records, texts, w.domains)
