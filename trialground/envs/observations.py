"""What the agent is shown of its tool outputs: the feedback ablation (`env.observations`).

- `full` (default): every tool's real output.
- `blank`: the same tools run with the same effects (files change, tests run, grading is unchanged), but
  each tool's output is replaced by one fixed placeholder, so the agent learns nothing from it.
- `shuffled`: each tool's output is replaced by a real output recorded earlier in this process from an
  episode of *another* task (the placeholder until one exists): text of the right shape that says nothing
  true about this workspace.

Turn count, tool calls and grading stay as they are, so the difference between `full` and the others is
how much of an agent's score comes from reading feedback (not from having more turns).
"""

from __future__ import annotations

import random
import threading
from collections import deque
from typing import Literal

ObservationMode = Literal["full", "blank", "shuffled"]
PLACEHOLDER = "(tool output withheld)"
_KEEP = 512  # recorded outputs kept for `shuffled`


class _Recorded:
    """Real tool outputs of recent episodes, with their task ids (shared by every environment here)."""

    def __init__(self) -> None:
        self._items: deque[tuple[str, str]] = deque(maxlen=_KEEP)
        self._lock = threading.Lock()

    def add(self, task_id: str, text: str) -> None:
        with self._lock:
            self._items.append((task_id, text))

    def other(self, task_id: str, rng: random.Random) -> str | None:
        with self._lock:
            pool = [text for tid, text in self._items if tid != task_id]
        return rng.choice(pool) if pool else None


_RECORDED = _Recorded()


def shown(mode: ObservationMode, task_id: str, text: str, *, turn: int, call: int) -> str:
    """The text the agent sees for one tool call's real output `text`."""
    if mode == "full":
        return text
    _RECORDED.add(task_id, text)
    if mode == "blank":
        return PLACEHOLDER
    rng = random.Random(f"{task_id}:{turn}:{call}:{len(text)}")
    return _RECORDED.other(task_id, rng) or PLACEHOLDER
