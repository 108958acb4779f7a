"""The metric history the alert rules read: the last N finite observations of every key, with steps."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping

import numpy as np


class MetricHistory:
    """The last `maxlen` finite observations of every metric, with the step each came from."""

    def __init__(self, maxlen: int = 2000) -> None:
        self._maxlen = maxlen
        self._data: dict[str, deque[tuple[int, float]]] = {}
        self.updated: set[str] = set()  # keys observed in the latest `add`

    def add(self, step: int, metrics: Mapping[str, float], *, more: bool = False) -> None:
        """Record one step's metrics; `more=True` adds to the latest step's keys instead of starting anew."""
        if not more:
            self.updated = set()
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            self._data.setdefault(key, deque(maxlen=self._maxlen)).append((step, float(value)))
            self.updated.add(key)

    def keys(self) -> list[str]:
        return list(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def series(self, key: str, last: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of `key`, the last `last` observations when given."""
        obs = list(self._data.get(key, ()))
        if last is not None:
            obs = obs[-last:]
        if not obs:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        steps, values = zip(*obs, strict=True)
        return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=float)

    def between(self, key: str, lo: int, hi: int) -> np.ndarray:
        """Values of `key` with lo < step <= hi."""
        steps, values = self.series(key)
        return values[(steps > lo) & (steps <= hi)]
