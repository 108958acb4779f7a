"""Retries of HTTP requests: exponential backoff with jitter, bounded in tries and in time, honouring
429 and `Retry-After`. Shared by the HTTP clients (the `openai` and `remote` policy backends, the
OpenAI-compatible judge).

A request is tried again when it did not reach an answer (`httpx.TransportError`: refused, reset, timed
out) or was answered 429 (Too Many Requests) or 5xx. Any other answer, 2xx or 4xx, is returned for the
caller to judge. The wait before retry `k` (0, 1, ...) is drawn from [d/2, d] with
`d = min(max_wait_s, base_s * 2**k)`; an answer with `Retry-After` (seconds, or an HTTP date) waits at
least what it asks. Two bounds: at most `attempts` tries, and no wait that would end more than `total_s`
after the first try began (a `Retry-After` beyond that gives up at once, and says so).

Why not a retry library: httpx's own `HTTPTransport(retries=N)` retries only failed connections, not
429/5xx answers nor `Retry-After`. tenacity (the library these users know) would carry only the loop in
`send_with_retries` (~25 lines): what this module is for, reading `Retry-After` as seconds or an HTTP
date, waiting at least that, refusing at once a wait past the budget with the reason, and the failure
text naming the URL and status, would each be a tenacity callback of the same length, plus a
dependency the `openai` and `remote` backends do not otherwise need. Its tests (`tests/test_retry.py`)
pin each of those behaviours.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

_RNG = random.Random()


@dataclass(frozen=True)
class Backoff:
    """`attempts`: tries in all (1: no retry); `base_s`: the first wait; `max_wait_s`: the longest backoff
    wait (a `Retry-After` may ask for more); `total_s`: the time, from the first try, past which no wait
    may end."""

    attempts: int = 3
    base_s: float = 0.5
    max_wait_s: float = 30.0
    total_s: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_s < 0 or self.max_wait_s < 0 or self.total_s < 0:
            raise ValueError(f"invalid backoff {self}: attempts >= 1 and non-negative times")

    def wait_s(self, retry: int, rng: random.Random | None = None) -> float:
        """The jittered wait before retry number `retry` (0 for the first)."""
        d = min(self.max_wait_s, self.base_s * 2.0 ** min(retry, 60))
        return (rng or _RNG).uniform(d / 2, d)


class RetriesExhausted(Exception):
    """No answer worth returning within the bounds. `response`: the last retryable answer, if any."""

    def __init__(self, message: str, *, tries: int, response: httpx.Response | None) -> None:
        super().__init__(message)
        self.tries = tries
        self.response = response


def retryable(response: httpx.Response) -> bool:
    return response.status_code == 429 or response.status_code >= 500


def retry_after_s(response: httpx.Response, now: float | None = None) -> float | None:
    """The wait `Retry-After` asks for, in seconds (0 for a date already past); None when absent or
    unreadable. `now`: the current Unix time (for dates)."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.now(UTC).timestamp() if now is None else now
        return max(0.0, when.timestamp() - current)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def describe(response: httpx.Response) -> str:
    text = response.text.strip()
    return f"{response.request.url}: HTTP {response.status_code}" + (f": {text[:200]}" if text else "")


async def send_with_retries(
    send: Callable[[int], Awaitable[httpx.Response]],
    backoff: Backoff,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> httpx.Response:
    """`await send(try_number)` until an answer that is not retryable (module docstring), and return it.
    Other exceptions of `send` pass through. Raises `RetriesExhausted` with the number of tries and the
    last failure (`URL: HTTP 503: body`, or `URL: ConnectError: ...`)."""
    start = clock()
    last, response = "", None
    for attempt in range(backoff.attempts):
        asked: float | None = None
        try:
            response = await send(attempt)
        except httpx.TransportError as exc:
            response = None
            url = _url(exc)
            last = f"{url + ': ' if url else ''}{type(exc).__name__}: {exc}".rstrip(": ")
        else:
            if not retryable(response):
                return response
            last = describe(response)
            asked = retry_after_s(response)
        if attempt + 1 == backoff.attempts:
            break
        wait = backoff.wait_s(attempt, rng)
        if asked is not None:
            wait = max(wait, asked)
        elapsed = clock() - start
        if elapsed + wait > backoff.total_s:
            why = "the next wait"
            if asked is not None and asked >= wait:
                why = f"the {asked:g} s Retry-After asks for"
            raise RetriesExhausted(
                f"failed after {attempt + 1} tries ({why} would end past the {backoff.total_s:g} s retry "
                f"budget): {last}",
                tries=attempt + 1,
                response=response,
            )
        await sleep(wait)
    raise RetriesExhausted(
        f"failed after {backoff.attempts} tries: {last}", tries=backoff.attempts, response=response
    )


def _url(exc: httpx.TransportError) -> str:
    try:
        return str(exc.request.url)
    except RuntimeError:  # an exception raised outside a request has none
        return ""
