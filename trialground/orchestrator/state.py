"""Checkpoint and resume of a whole run: trainer, task pool, policy sampling RNG, step; the cadence."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field

from trialground.orchestrator.components import Components
from trialground.orchestrator.config import LoopConfig
from trialground.orchestrator.rundir import RunDir
from trialground.policy.loading import base_model_dir
from trialground.train.checkpoint import (
    completed_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


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
    keep = c.config.loop.keep_checkpoints
    if keep:  # the new one is complete (renamed into place): older ones beyond `keep` can go
        for old in completed_checkpoints(run.path)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


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
    return loaded.step
