"""Constant-cost running statistics for pool metrics.

`Window` keeps the last `size` samples in a ring (O(1) per `add`); quantiles are computed only when
metrics are read, so the hot path never sorts.
"""

from __future__ import annotations

import math


class Window:
    def __init__(self, size: int = 4096) -> None:
        self._buf: list[float] = [0.0] * size
        self._size = size
        self._n = 0  # samples ever added
        self.total = 0.0  # sum of every sample ever added

    def add(self, x: float) -> None:
        self._buf[self._n % self._size] = x
        self._n += 1
        self.total += x

    @property
    def count(self) -> int:
        return self._n

    def values(self) -> list[float]:
        return self._buf[: min(self._n, self._size)]

    def mean(self) -> float:
        vals = self.values()
        return sum(vals) / len(vals) if vals else 0.0

    def quantile(self, q: float) -> float:
        """Nearest-rank quantile of the samples in the window (0.0 when empty)."""
        vals = sorted(self.values())
        if not vals:
            return 0.0
        rank = max(1, math.ceil(q * len(vals)))
        return vals[rank - 1]
