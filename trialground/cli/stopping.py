"""How `trialground train` stops on Ctrl-C (SIGINT) and on SIGTERM (what Slurm, Kubernetes and `kill` send).

The first signal during training asks the loop to stop after the step in progress: that step completes,
is checkpointed, and the run ends with one line naming the step and the command that continues it. A
second signal (or the first, before the first step starts: nothing would be lost) stops at once; the run
then continues from its newest checkpoint, or from step 0 when it has none. Either way the exit status is
128 + the signal's number (130, 143), as a shell reports a process a signal ended.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TypeVar

from trialground.monitor.sinks.jsonl import read_metrics

SIGNALS = (signal.SIGINT, signal.SIGTERM)
T = TypeVar("T")


class Interrupted(BaseException):
    """A stop asked for by a signal, raised where the run was (a `BaseException`, as `KeyboardInterrupt`:
    no `except Exception` in a component swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopOnSignal:
    """Signal handlers for SIGINT and SIGTERM. `arm()` once the loop can stop between steps; the loop
    asks `requested()` after each step. Stopping at once cancels the run's task (`watch`), so every
    component unwinds through its own cleanup, as asyncio does with Ctrl-C; raising in whatever code the
    signal interrupted could land in a helper task and be logged there as a traceback."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._armed = False
        self._task: asyncio.Task[object] | None = None

    def arm(self) -> None:
        self._armed = True

    async def watch(self, run: Awaitable[T]) -> T:
        """Await `run` as the task a stop at once cancels; then raise `Interrupted`."""
        self._task = asyncio.current_task()
        try:
            return await run
        except asyncio.CancelledError:
            if self.signum is None:
                raise
            raise Interrupted(self.signum) from None
        finally:
            self._task = None

    def requested(self) -> str | None:
        """The name of the signal that asked the run to stop after this step, or None."""
        return None if self.signum is None else signal.Signals(self.signum).name

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        again, self.signum = self.signum is not None, signum
        if again or not self._armed:
            task = self._task
            if task is None or task.done() or task.cancelling():  # not in the run, or a third signal
                raise Interrupted(signum)
            task.cancel()
            return
        name = signal.Signals(signum).name
        # os.write: a signal handler must not take the console's lock (the progress display may hold it)
        os.write(2, f"\n{name}: stopping after the step in progress, which is checkpointed "
                    f"(send it again to stop at once)\n".encode())  # fmt: skip

    @contextmanager
    def installed(self) -> Iterator[StopOnSignal]:
        previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def resume_command(run_dir: Path) -> str:
    return f"trialground train --resume {shlex.quote(str(run_dir))}"


def where_stopped(run_dir: Path) -> str:
    """`stopped after step N (...)` for a run directory a stop left behind: the last step its metrics hold
    and the step a resumed run starts after."""
    from trialground.train.checkpoint import checkpoint_meta, latest_checkpoint

    metrics = run_dir / "metrics.jsonl"
    steps = [int(row["step"]) for row in read_metrics(metrics)] if metrics.is_file() else []
    last = max(steps, default=None)
    ckpt = latest_checkpoint(run_dir)
    meta = checkpoint_meta(ckpt) if ckpt is not None else None
    saved = int(meta["step"]) if meta else None
    if last is None or last == 0:
        return "stopped before its first training step"
    if saved is None:
        return f"stopped after step {last}, before its first checkpoint (a resumed run starts from step 0)"
    if saved >= last:
        return f"stopped after step {last} (checkpointed)"
    return (
        f"stopped after step {last}; its newest checkpoint is step {saved} (a resumed run continues after it)"
    )


def exit_status(signum: int) -> int:
    return 128 + signum
