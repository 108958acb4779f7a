"""Sampler/trainer mismatch: measured every step (`mismatch/*`), and `trainer.is_correction` weights the
policy-gradient term with truncated or masked importance ratios (token or sequence level)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from pydantic import ValidationError
from train_helpers import PAD, sequence_logprobs, tiny_llama, traj

from trialground.train.advantages import with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.is_correction import is_weights
from trialground.train.trainer import Trainer

SPECS = [([1, 2, 3], [4, 5, 6, 7]), ([1, 2, 3], [8, 9]), ([5, 6], [10, 11, 12]), ([5, 6, 7, 8], [13])]
ADV = [1.0, -1.0, -0.5, 0.5]
SHIFT = 0.5  # the sampler gave every token 0.5 nats less than the trainer does: ratio exp(0.5) = 1.6487


def _batch(model: torch.nn.Module, shift: float = SHIFT) -> list:
    out = []
    for i, (prompt, completion) in enumerate(SPECS):
        lp = sequence_logprobs(model, prompt + completion, len(prompt))  # type: ignore[arg-type]
        out.append(traj(prompt, [("policy", completion, [x - shift for x in lp])], group="g", index=i))
    return with_advantages(out, ADV)


def _step(model: torch.nn.Module, **config: object) -> dict[str, float]:
    cfg = TrainerConfig(lr=1e-2, micro_batch_size=2, **config)  # type: ignore[arg-type]
    return Trainer(model, cfg, PAD).step(_batch(model))


def test_weights_of_each_mode() -> None:
    trainer = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    sampler = torch.tensor([[-1.0, 0.0, 2.0], [-0.1, -0.1, 0.0]])  # ratios e, 1, e^-2 | e^0.1, e^0.1, pad
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w, flagged = is_weights("token_truncate", trainer, sampler, mask, 2.0)
    assert w[0].tolist() == pytest.approx([2.0, 1.0, math.exp(-2)])
    assert flagged[0].tolist() == [True, False, False]
    w, flagged = is_weights("token_mask", trainer, sampler, mask, 2.0)
    assert w[0].tolist() == pytest.approx([0.0, 1.0, 0.0]) and flagged.sum() == 2
    w, flagged = is_weights("sequence_truncate", trainer, sampler, mask, 2.0)
    assert w[0].tolist() == pytest.approx([math.exp(-1)] * 3)  # e^(1 + 0 - 2)
    assert w[1, :2].tolist() == pytest.approx([math.exp(0.2)] * 2) and w[1, 2] == 1.0  # padding: 1
    w, flagged = is_weights("sequence_mask", trainer, sampler, mask, 1.3)
    assert w[0].tolist() == [0.0, 0.0, 0.0] and w[1, :2].tolist() == pytest.approx([math.exp(0.2)] * 2)
    assert flagged.sum() == 3
    with pytest.raises(ValidationError):
        TrainerConfig(is_correction="tis")  # type: ignore[arg-type]


def test_the_mismatch_is_reported_without_a_correction() -> None:
    m = _step(tiny_llama())
    k3 = math.exp(SHIFT) - SHIFT - 1.0
    assert m["mismatch/kl_k3"] == pytest.approx(k3, abs=1e-4)
    for q in ("ratio_p05", "ratio_p50", "ratio_p95", "ratio_max", "ratio_mean"):
        assert m[f"mismatch/{q}"] == pytest.approx(math.exp(SHIFT), abs=1e-4)
    assert m["mismatch/flagged_frac"] == 0.0 and m["mismatch/tokens"] == 10.0
    model = tiny_llama()
    on_policy = Trainer(model, TrainerConfig(), PAD).step(_batch_on_policy(model))
    assert on_policy["mismatch/kl_k3"] == pytest.approx(0.0, abs=1e-6)


def _batch_on_policy(model: torch.nn.Module) -> list:
    return _batch(model, shift=0.0)


def test_the_correction_weights_the_loss() -> None:
    base = tiny_llama()
    # anchor on the trainer's recomputed logprobs: ratio 1 in the only epoch, loss = -sum(A) / tokens
    models = [copy.deepcopy(base) for _ in range(2)]
    plain = _step(models[0], old_logprobs="recompute")
    plain_loss = -sum(a * len(c) for a, (_, c) in zip(ADV, SPECS, strict=True)) / 10
    assert plain["train/loss"] == pytest.approx(plain_loss, abs=1e-6)
    # TIS: every token's weight is min(1.6487, 1.2) = 1.2
    tis = _step(models[1], is_correction="token_truncate", is_cap=1.2)
    assert tis["train/loss"] == pytest.approx(1.2 * plain_loss, abs=1e-5)
    assert tis["mismatch/flagged_frac"] == 1.0
    assert tis["mismatch/ratio_p50"] == pytest.approx(1.6487, abs=1e-3)
    # MIS: a sequence's ratio is exp(0.5 * its tokens); only the 1-token sequence stays inside [1/2, 2]
    mis = _step(copy.deepcopy(base), is_correction="sequence_mask", is_cap=2.0)
    assert mis["train/loss"] == pytest.approx(-0.5 * math.exp(SHIFT) / 10, abs=1e-5)
    assert mis["mismatch/flagged_frac"] == pytest.approx(9 / 10)
    # and the update differs: the weights reached the gradient
    flat = [torch.cat([p.detach().flatten() for p in m.parameters()]) for m in models]
    assert not torch.allclose(flat[0], flat[1])
