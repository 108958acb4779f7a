"""Checkpoint and resume of a whole run: trainer, task pool, policy sampling RNG, step, monitor state."""

from __future__ import annotations

from trialground.orchestrator.components import Components
from trialground.orchestrator.rundir import RunDir
from trialground.policy.loading import base_model_dir
from trialground.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


def save(c: Components, run: RunDir, step: int) -> None:
    extra = {"step": step, "task_pool": c.tasks.state_dict(), "policy": c.policy_state()}
    save_checkpoint(
        run.checkpoint_dir(step),
        c.require_trainer(),
        step=step,
        extra=extra,
        tokenizer=c.policy.tokenizer,
        base_model=base_model_dir(c.config.policy),
    )


def restore(c: Components, run: RunDir) -> int:
    """Load the newest complete checkpoint; forget what the killed run wrote after it. Returns its step."""
    path = latest_checkpoint(run.path)
    if path is None:
        raise FileNotFoundError(f"{run.path}: no complete checkpoint to resume from")
    loaded = load_checkpoint(path, c.require_trainer())
    c.tasks.load_state_dict(loaded.extra["task_pool"])
    c.load_policy_state(loaded.extra.get("policy", {}))
    c.sync_weights()
    run.truncate_after(loaded.step + 1)
    if c.monitor is not None:  # rule history, cooldowns, cost: as they were at the checkpoint
        c.monitor.resume(loaded.step)
    return loaded.step
