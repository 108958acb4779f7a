"""Keeping an episode's turns on one inference server, so its prefix cache serves every turn.

An episode's next prompt is its previous prompt, the tokens sampled for it and the environment's answer:
it extends the context the previous request left. `PrefixAffinity` remembers each context (prompt +
sampled ids) with the server that produced it; `lookup(prompt)` names the server of the longest
remembered context the prompt starts with, or None (a first turn: the caller picks the least loaded).
Contexts are keyed by a rolling hash of their tokens, one pass over the prompt per lookup whatever the
number of remembered contexts; a hash collision can only send a request to another server, never change
what is sampled. The oldest contexts are forgotten beyond `capacity`; `forget_server` drops a dead
server's, so its episodes move to a live one (which recomputes their prefix once).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

_MOD = (1 << 61) - 1
_BASE = 1_000_003


def prefix_hashes(tokens: Sequence[int]) -> list[int]:
    """`out[n]` is the hash of `tokens[:n]` (out[0] for the empty prefix)."""
    out = [0]
    h = 0
    for t in tokens:
        h = (h * _BASE + int(t) + 1) % _MOD
        out.append(h)
    return out


class PrefixAffinity:
    def __init__(self, capacity: int = 65536) -> None:
        self.capacity = capacity
        self._contexts: OrderedDict[tuple[int, int], int] = OrderedDict()  # (length, hash) -> server
        self._lengths: dict[int, int] = {}  # length -> how many remembered contexts have it

    def lookup(self, prompt: Sequence[int]) -> int | None:
        hashes = prefix_hashes(prompt)
        for length in sorted((n for n in self._lengths if n <= len(prompt)), reverse=True):
            server = self._contexts.get((length, hashes[length]))
            if server is not None:
                self._contexts.move_to_end((length, hashes[length]))
                return server
        return None

    def remember(self, context: Sequence[int], server: int) -> None:
        key = (len(context), prefix_hashes(context)[-1])
        if key not in self._contexts:
            self._lengths[key[0]] = self._lengths.get(key[0], 0) + 1
        self._contexts[key] = server
        self._contexts.move_to_end(key)
        while len(self._contexts) > self.capacity:
            self._drop(next(iter(self._contexts)))

    def forget_server(self, server: int) -> None:
        for key in [k for k, s in self._contexts.items() if s == server]:
            self._drop(key)

    def __len__(self) -> int:
        return len(self._contexts)

    def _drop(self, key: tuple[int, int]) -> None:
        del self._contexts[key]
        self._lengths[key[0]] -= 1
        if not self._lengths[key[0]]:
            del self._lengths[key[0]]
