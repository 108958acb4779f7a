"""Sizing by throughput: how many environments should run at once so neither side idles.

Model: an episode alternates generation turns (``g`` seconds each, on a server that runs up to ``C``
sequences at once) and environment steps (``e`` seconds each). Keeping all ``C`` generation slots busy
needs ``N = C * (g + e) / g`` concurrent episodes (Little's law), and each episode holds one environment,
so the pool's `max_active` should be ``N`` times a small headroom, clamped to ``[lo, hi]``.

The environment side can saturate too (CPU-bound sandboxes): then more episodes only lengthen ``e``, which
would make the formula ask for even more. So every increase is a probe: if the environment step rate did
not grow by at least `min_gain` after it, the previous size becomes a ceiling (re-probed later).

`decide` returns a new size, or None to keep the current one (no data yet, or inside the hysteresis band).
"""

from __future__ import annotations

import math

from trialground.pool.config import PoolConfig


class Autoscaler:
    def __init__(
        self,
        lo: int,
        hi: int,
        *,
        headroom: float = 1.1,
        alpha: float = 0.3,
        hysteresis: float = 0.1,
        min_gain: float = 0.05,
        reprobe_every: int = 10,
    ) -> None:
        if not 1 <= lo <= hi:
            raise ValueError(f"need 1 <= lo <= hi, got {lo}, {hi}")
        self.lo, self.hi = lo, hi
        self.headroom, self.alpha, self.hysteresis = headroom, alpha, hysteresis
        self.min_gain, self.reprobe_every = min_gain, reprobe_every
        self.gen_s: float | None = None
        self.env_s: float | None = None
        self.gen_capacity = 0.0
        self.current: int | None = None
        self.ceiling = hi
        self._env_steps = 0
        self._last: tuple[float, int, float] | None = None  # (time, size, env steps/s) at the last decision
        self._decisions = 0

    @classmethod
    def from_config(cls, config: PoolConfig) -> Autoscaler:
        return cls(config.min_active, config.max_active_bound)

    def _ewma(self, old: float | None, x: float) -> float:
        return x if old is None else (1 - self.alpha) * old + self.alpha * x

    def observe_generation(self, seconds: float, concurrency: int) -> None:
        """One generation turn took `seconds` while `concurrency` sequences were being generated."""
        self.gen_s = self._ewma(self.gen_s, max(seconds, 1e-6))
        self.gen_capacity = max(float(concurrency), self.gen_capacity * 0.99)

    def observe_env(self, seconds: float) -> None:
        """One environment step (tool execution) took `seconds`."""
        self.env_s = self._ewma(self.env_s, max(seconds, 0.0))
        self._env_steps += 1

    def target(self) -> int | None:
        if self.gen_s is None or self.env_s is None or self.gen_capacity <= 0:
            return None
        n = self.gen_capacity * (self.gen_s + self.env_s) / self.gen_s * self.headroom
        return max(self.lo, min(self.hi, self.ceiling, math.ceil(n)))

    def decide(self, now: float, *, queue_depth: int = 0, active: int = 0) -> int | None:
        """The size to use from now on, or None to keep the current one."""
        self._decisions += 1
        if self._decisions % self.reprobe_every == 0:
            self.ceiling = min(self.hi, max(self.ceiling + 1, math.ceil(self.ceiling * 1.25)))
        if self._last is not None:
            t_prev, size_prev, rate_prev = self._last
            rate = self._env_steps / max(now - t_prev, 1e-9)
            if (
                self.current is not None
                and self.current > size_prev
                and rate < rate_prev * (1 + self.min_gain)
            ):
                self.ceiling = max(self.lo, size_prev)  # the bigger size bought nothing: env side saturated
        else:
            rate = 0.0
        self._env_steps = 0
        self._last = (now, self.current or 0, rate)
        target = self.target()
        if target is None:
            return None
        if self.current is not None and abs(target - self.current) <= self.hysteresis * self.current:
            return None
        self.current = target
        return target
