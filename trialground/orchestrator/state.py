"""Checkpoint and resume of a whole run: trainer, task pool, policy sampling RNG, step, monitor state."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field

from trialground.monitor.monitor import Monitor
from trialground.orchestrator.config import LoopConfig
from trialground.orchestrator.rundir import RunDir
from trialground.orchestrator.wiring import sync_weights
from trialground.policy.base import Policy
from trialground.tasks.pool import TaskPool
from trialground.train.checkpoint import (
    completed_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from trialground.train.trainer import Trainer


@dataclass
class Cadence:
    """When a step is checkpointed: every `checkpoint_interval` steps, once `checkpoint_every_s` have
    passed since the last checkpoint (or the start), and at the last step."""

    loop: LoopConfig
    last_s: float = field(default_factory=time.monotonic)

    def due(self, step: int) -> bool:
        every, seconds = self.loop.checkpoint_interval, self.loop.checkpoint_every_s
        return (
            step == self.loop.steps
            or bool(every and step % every == 0)
            or bool(seconds and time.monotonic() - self.last_s >= seconds)
        )

    def saved(self) -> None:
        self.last_s = time.monotonic()


def save(
    run: RunDir,
    step: int,
    trainer: Trainer,
    tasks: TaskPool,
    policy: Policy,
    *,
    base_model: str | None,
    keep: int = 3,
) -> None:
    """Write checkpoint `step`, then delete complete ones older than the newest `keep` (0: keep all)."""
    rng = policy.sampling_rng_state()
    extra = {"step": step, "task_pool": tasks.state_dict(), "policy": {} if rng is None else {"rng": rng}}
    save_checkpoint(
        run.checkpoint_dir(step),
        trainer,
        step=step,
        extra=extra,
        tokenizer=policy.tokenizer,
        base_model=base_model,
    )
    if keep:  # the new one is complete (renamed into place): older ones beyond `keep` can go
        for old in completed_checkpoints(run.path)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


def restore(run: RunDir, trainer: Trainer, tasks: TaskPool, policy: Policy, monitor: Monitor | None) -> int:
    """Load the newest complete checkpoint; forget what the killed run wrote after it. Returns its step.
    A run stopped before its first checkpoint starts again from step 0 (the state `build` made from the
    same config and seeds), in the same directory, whose sinks keep their run ids."""
    path = latest_checkpoint(run.path)
    if path is None:
        run.truncate_after(0)
        if monitor is not None:
            monitor.resume(-1)  # no metric history, no alert raised
        return 0
    loaded = load_checkpoint(path, trainer)
    tasks.load_state_dict(loaded.extra["task_pool"])
    state = loaded.extra.get("policy", {})
    if "rng" in state:
        policy.set_sampling_rng_state(state["rng"])
    sync_weights(trainer, policy)
    run.truncate_after(loaded.step + 1)
    if monitor is not None:  # rule history, cooldowns, cost: as they were at the checkpoint
        monitor.resume(loaded.step)
    return loaded.step
