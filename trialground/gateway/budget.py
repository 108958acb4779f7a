"""What one gateway session may draw from the trainer, and the work it may put on the trainer's event loop.

A harness episode's program holds its session's key, and the program is code the model wrote or drives:
it must not be able to take more of the trainer than an episode of the tool loop could. Each harness
session therefore has a `SessionBudget` derived from the run's config (`for_episode`):

- calls: `env.max_turns` model calls (a tool episode makes one per turn);
- `n` per call at most `env.harness_max_n`, and generations in all (calls x n) at most
  `max_turns x harness_max_n`;
- generated tokens in all at most `generations x policy.max_new_tokens`, never overshot: before a call
  generates, its `max_tokens` is cut to what is left of the budget shared by its rows (`reserve_tokens`)
  and that much is reserved; what the rows did not use is given back when they return;
- requests in flight at once at most `env.harness_max_inflight`, counted from before the body is read, so
  at most that many of the session's bodies are read, parsed and rendered at once;
- a request body at most `env.harness_max_body_mb` (413 past it);
- connections open at once at most `env.harness_max_connections`, on the session's own listener
  (`listeners.py`): the training process holds at most that many descriptors for it, plus the listener's.

A call over a budget is answered 429 (`budget_exhausted`) and ends the episode, and so does a connection
past the connection budget (closed at once, before anything is read): the session remembers why,
`Session.ended` is set, the harness environment stops the program and grades the workspace as at any
other limit (`finish_reason` ``budget_exhausted``), so the episode keeps its reward. Too many requests in
flight at once is a 429 that does not end it (the `openai` SDK waits and retries).

Work per request on the trainer's process is bounded too: the body's JSON is parsed, and the prompt
rendered and tokenised, in a worker thread, not as a step of the event loop; and a text that cannot fit
the context budget is refused before it is tokenised: a token decodes to at most
`max_token_chars(tokenizer)` characters (its longest vocabulary entry that is not an added token: message
text is encoded as plain text), so a text longer than `max_context_tokens x max_token_chars` characters
needs more tokens than the budget holds. What one request can make the process tokenise is therefore
bounded by its context budget, whatever the body holds (64 MiB at most).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SessionBudget:
    """Limits of one session (an episode); see the module docstring."""

    calls: int
    max_n: int
    generations: int
    tokens: int
    inflight: int = 2
    connections: int = 8
    body_bytes: int = 4 << 20

    @classmethod
    def for_episode(
        cls,
        max_turns: int,
        max_n: int,
        max_new_tokens: int,
        inflight: int,
        *,
        connections: int = 8,
        body_mb: int = 4,
    ) -> SessionBudget:
        generations = max_turns * max_n
        return cls(
            calls=max_turns,
            max_n=max_n,
            generations=generations,
            tokens=generations * max_new_tokens,
            inflight=inflight,
            connections=connections,
            body_bytes=body_mb << 20,
        )

    @property
    def descriptors(self) -> int:
        """Descriptors of the training process this session can hold: its connections and its listener."""
        return self.connections + 1


@dataclass
class Spent:
    """What a session has drawn so far; `exhausted` says which budget ended it (None: none yet). `tokens`
    counts the tokens generated and those reserved by calls still generating."""

    calls: int = 0
    generations: int = 0
    tokens: int = 0
    inflight: int = 0
    exhausted: str | None = None


@functools.lru_cache(maxsize=16)
def max_token_chars(tokenizer: Any) -> int:
    """The most characters one token of `tokenizer` decodes to (its vocabulary's longest entry: byte-level
    and sentencepiece entries are at least as long as the text they decode to)."""
    try:
        vocab = tokenizer.get_vocab()
        added = tokenizer.get_added_vocab()
    except Exception:  # a tokenizer without a vocabulary listing: no bound from it
        return 1 << 30
    return max((len(str(piece)) for piece in vocab if piece not in added), default=1) or 1


def spent_refusal(spent: Spent) -> tuple[int, str, bool] | None:
    """The refusal of any request of a session whose budget is spent (None while it is not)."""
    if spent.exhausted is not None:
        return 429, f"this episode's model budget is spent ({spent.exhausted}): no more calls", True
    return None


def entry_refusal(budget: SessionBudget, spent: Spent) -> tuple[int, str, bool] | None:
    """Why a request may not even be read: the session is spent, or has its most requests in flight."""
    if spent.exhausted is not None:
        return spent_refusal(spent)
    if spent.inflight >= budget.inflight:
        return 429, f"at most {budget.inflight} requests of this episode in flight at once", False
    return None


def reserve_tokens(budget: SessionBudget, spent: Spent, rows: int, max_new_tokens: int) -> int:
    """Reserve tokens for `rows` generations of at most `max_new_tokens` each, cut so that the total never
    passes the budget: returns the tokens per row reserved (0: not even one token per row is left)."""
    per_row = min(max_new_tokens, (budget.tokens - spent.tokens) // max(rows, 1))
    if per_row < 1:
        return 0
    spent.tokens += per_row * rows
    return per_row


def connections_message(budget: SessionBudget) -> str:
    return f"more than {budget.connections} connections open at once, the episode's limit"


def refusal(budget: SessionBudget, spent: Spent, rows: int, n: int) -> tuple[int, str, bool] | None:
    """Why a call of `rows` prompts x `n` choices may not start: (HTTP status, message, whether it ends the
    episode); None when it may. (Requests in flight are counted before the body is read: `entry_refusal`.)"""
    if spent.exhausted is not None:
        return spent_refusal(spent)
    if n > budget.max_n:
        return 400, f"n: at most {budget.max_n} choices per call in this episode (env.harness_max_n)", False
    if spent.calls + 1 > budget.calls:
        return 429, f"{budget.calls} model calls made, the episode's limit (env.max_turns)", True
    if spent.generations + rows * n > budget.generations:
        return 429, f"{budget.generations} generations drawn, the episode's limit (max_turns x max_n)", True
    if spent.tokens >= budget.tokens:
        return 429, f"{budget.tokens} tokens generated, the episode's limit", True
    return None
