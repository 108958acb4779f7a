"""The trainer's samples: each trainable sequence of a batch with its mask, old logprobs and advantages
(`build_samples`), and the order in which they are cut into micro-batches (`micro_batch_order`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Scored
from trialground.train.pack_layout import pack_rows


@dataclass
class Sample:
    """One trainable sequence. `mask`/`old_logprobs` are aligned on targets: len == len(ids) - 1."""

    ids: list[int]
    mask: list[int]
    old_logprobs: list[float] | None
    advantage: float
    prompt_len: int = 1  # ids[:prompt_len] is the prompt: targets before prompt_len - 1 are all masked
    # Per-target advantages aligned with `mask` (turn-level estimators), or None: `advantage` everywhere.
    token_advantages: list[float] | None = None
    sampler_logprobs: list[float] | None = None  # aligned like old_logprobs; set by `Trainer.step`

    @property
    def inert(self) -> bool:
        """Every advantage is 0: the policy-gradient term is exactly zero."""
        if self.token_advantages is None:
            return self.advantage == 0.0
        return not any(a for a, m in zip(self.token_advantages, self.mask, strict=True) if m)

    @property
    def first_target(self) -> int:
        """Index into `mask`/`old_logprobs` of the first completion target."""
        return self.prompt_len - 1


def build_samples(batch: Sequence[Scored]) -> list[Sample]:
    """Trainable samples: the records marked trainable that have a prompt and at least one policy token."""
    samples = []
    for rec in batch:
        traj, adv = rec.trajectory, rec.advantage
        if not rec.trainable or adv is None or traj.error is not None:
            continue
        have_logps = all(len(t.logprobs) == len(t.token_ids) for t in traj.turns if t.role == "policy")
        segments = traj.segments()
        # Turn-level advantages (the tree estimator) cover a whole episode: one segment.
        token_adv = None
        if rec.turn_advantages is not None and len(segments) == 1:
            token_adv = _token_advantages(traj, rec.turn_advantages)
        # One sample per segment (a gateway episode whose program rewrote its history has several), each
        # with the episode's advantage.
        for seg in segments:
            prompt, ids, mask, logps = seg.prompt, seg.ids, seg.mask, seg.logprobs
            if not prompt or sum(mask) == 0:
                continue
            # Target t+1 is predicted at position t: prompt targets masked, completion targets kept.
            pad = [0] * (len(prompt) - 1)
            samples.append(
                Sample(
                    ids=prompt + ids,
                    mask=pad + mask,
                    old_logprobs=[0.0] * len(pad) + logps if have_logps else None,
                    advantage=float(adv),
                    prompt_len=len(prompt),
                    token_advantages=[0.0] * len(pad) + token_adv if token_adv is not None else None,
                )
            )
    return samples


def _token_advantages(traj: Trajectory, turn_advantages: Sequence[float]) -> list[float]:
    """Each completion token gets its policy turn's advantage (observation tokens 0: they are masked)."""
    own = [t for t in traj.turns if t.role != "prompt"]
    n_policy = sum(t.role == "policy" for t in own)
    if n_policy != len(turn_advantages):
        raise ValueError(f"{len(turn_advantages)} turn advantages for {n_policy} policy turns")
    out: list[float] = []
    values = iter(turn_advantages)
    for turn in own:
        a = float(next(values)) if turn.role == "policy" else 0.0
        out.extend([a] * len(turn.token_ids))
    return out


def forward_tokens(
    order: Sequence[Sample], size: int, share_prompt: bool, packing: bool = False, one_row: bool = False
) -> int:
    """Token positions one pass over `order`, cut into micro-batches of `size`, runs through the model,
    padding included: with `share_prompt` each distinct prompt of a micro-batch once (left-padded to the
    longest of them) and every completion but its last token (right-padded to the longest); else every
    sequence but its last token, padded to the longest of its micro-batch (a last token predicts nothing
    that is trained, so it is not run); with `packing` (and no `share_prompt`) the packed rows (`one_row`:
    every target once, as one row)."""
    total = 0
    for chunk in chunks(list(order), size):
        if packing and not share_prompt:  # rows as long as the longest (train.packing)
            lengths = [len(s.ids) - 1 for s in chunk]
            total += sum(lengths) if one_row else len(pack_rows(lengths)) * max(lengths)
        elif share_prompt:
            prompts = {tuple(s.ids[: s.prompt_len]) for s in chunk}
            total += len(prompts) * max(map(len, prompts))
            total += len(chunk) * (max(len(s.ids) - s.prompt_len for s in chunk) - 1)
        else:
            total += len(chunk) * (max(len(s.ids) for s in chunk) - 1)
    return total


def micro_batch_order(
    samples: Sequence[Sample], size: int, share_prompt: bool, packing: bool = False, one_row: bool = False
) -> tuple[list[Sample], int]:
    """The order in which samples are cut into micro-batches, and the token positions one pass over it
    runs (`forward_tokens`): longest first (the least padding) or, with `share_prompt`, the samples of a
    prompt kept together (groups longest first), whichever runs fewer positions (longest first on a tie).
    Each distinct prompt of a micro-batch runs once, so a prompt whose samples are spread over several
    micro-batches runs in each of them. Both orders are fixed, so runs stay bit-reproducible."""
    by_length = sorted(samples, key=lambda s: len(s.ids), reverse=True)
    candidates = [by_length]
    if share_prompt:
        groups: dict[tuple[int, ...], list[Sample]] = {}
        for s in by_length:
            groups.setdefault(tuple(s.ids[: s.prompt_len]), []).append(s)
        ranked = sorted(groups.values(), key=lambda g: len(g[0].ids), reverse=True)
        candidates.append([s for g in ranked for s in g])
    return min(
        ((order, forward_tokens(order, size, share_prompt, packing, one_row)) for order in candidates),
        key=lambda c: c[1],
    )


def chunks(items: list[Sample], size: int) -> Iterator[list[Sample]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
