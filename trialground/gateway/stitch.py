"""An episode's gateway calls as one token-exact trajectory, or several segments.

Calls are taken in the order they were answered. A call continues the current segment when its prompt ids
begin with the segment's ids so far -- the previous call's prompt plus the ids sampled for one of its
choices -- matched on ids only, never by re-tokenising text; the ids in between (tool results, the next
user turn, the template's markers) are an `env` turn (masked out of the loss), its sampled ids a `policy`
turn with their logprobs. A call that does not continue it (the program truncated or edited its history,
or the template re-rendered earlier turns) starts a new segment: a `prompt` turn with its whole prompt,
counted in `rewrites`. With `n` > 1 the choice a later call continued is the one kept; otherwise the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trialground.policy.base import Generation
from trialground.rollout.trajectory import Turn


@dataclass(frozen=True)
class CallRecord:
    """What the gateway records of one call: the prompt ids it sampled from and every choice it returned
    (sampled ids, logprobs, the policy version that produced them)."""

    prompt_ids: tuple[int, ...]
    choices: tuple[Generation, ...]
    seconds: float = 0.0
    route: str = "chat"


@dataclass(frozen=True)
class Stitched:
    turns: tuple[Turn, ...]
    segments: int
    rewrites: int
    versions: tuple[int, ...]
    dropped_choices: int


def _extends(prefix: Sequence[int], ids: Sequence[int]) -> bool:
    return len(ids) >= len(prefix) and tuple(ids[: len(prefix)]) == tuple(prefix)


def stitch(calls: Sequence[CallRecord]) -> Stitched:
    turns: list[Turn] = []
    context: list[int] = []
    segments = rewrites = dropped = 0
    versions: list[int] = []
    for i, call in enumerate(calls):
        if not call.choices:
            continue
        nxt = calls[i + 1].prompt_ids if i + 1 < len(calls) else None
        chosen = call.choices[0]
        if nxt is not None:
            for choice in call.choices:
                if _extends([*call.prompt_ids, *choice.token_ids], nxt):
                    chosen = choice
                    break
        dropped += len(call.choices) - 1
        if segments and _extends(context, call.prompt_ids):
            extra = call.prompt_ids[len(context) :]
            if extra:
                turns.append(Turn(role="env", token_ids=tuple(extra)))
        else:
            rewrites += 1 if segments else 0
            segments += 1
            turns.append(Turn(role="prompt", token_ids=tuple(call.prompt_ids)))
        turns.append(
            Turn(
                role="policy",
                token_ids=chosen.token_ids,
                logprobs=chosen.logprobs,
                text=chosen.text,
                seconds=call.seconds,
                version=chosen.version,
            )
        )
        versions.append(chosen.version)
        context = [*call.prompt_ids, *chosen.token_ids]
    return Stitched(tuple(turns), segments, rewrites, tuple(versions), dropped)
