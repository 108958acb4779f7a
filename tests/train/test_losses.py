"""The PPO-clip loss against hand-computed values: both clip bounds, aggregation, KL, metrics."""

from __future__ import annotations

import math

import pytest
import torch

from trialground.train.losses import finalize_metrics
from trialground.train.losses.ppo_clip import k3_kl, ppo_clip_loss


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def test_high_clip_caps_positive_advantage() -> None:
    new = _t([[math.log(1.5), 0.0]]).requires_grad_(True)
    out = ppo_clip_loss(
        new, _t([[0.0, 0.0]]), torch.tensor([1.0]), _t([[1.0, 1.0]]), clip_low=0.2, clip_high=0.28
    )
    # token 1: ratio 1.5 clipped to 1.28 -> -1.28; token 2: ratio 1 -> -1; token mean -1.14
    assert out.loss.item() == pytest.approx(-1.14)
    m = finalize_metrics(out.sums, out.tokens)
    assert (
        m["train/clip_frac"] == 0.5 and m["train/clip_high_frac"] == 0.5 and m["train/clip_low_frac"] == 0.0
    )
    assert m["train/ratio_mean"] == pytest.approx(1.25)
    out.loss.backward()
    assert new.grad is not None
    # clipped token: no gradient; unclipped: d(-A * ratio / 2)/dlogp = -0.5
    assert new.grad[0].tolist() == pytest.approx([0.0, -0.5])


def test_low_clip_caps_negative_advantage() -> None:
    new = _t([[math.log(0.5)]]).requires_grad_(True)
    out = ppo_clip_loss(new, _t([[0.0]]), torch.tensor([-2.0]), _t([[1.0]]), clip_low=0.2, clip_high=0.28)
    # max(2 * 0.5, 2 * 0.8) = 1.6
    assert out.loss.item() == pytest.approx(1.6)
    m = finalize_metrics(out.sums, out.tokens)
    assert m["train/clip_low_frac"] == 1.0 and m["train/clip_high_frac"] == 0.0
    out.loss.backward()
    assert new.grad is not None and new.grad.item() == 0.0


def test_no_clip_on_the_side_that_moves_back() -> None:
    # A > 0 and ratio below 1 - clip_low: the unclipped term wins, gradient flows
    new = _t([[math.log(0.5)]]).requires_grad_(True)
    out = ppo_clip_loss(new, _t([[0.0]]), torch.tensor([1.0]), _t([[1.0]]), clip_low=0.2, clip_high=0.28)
    assert out.loss.item() == pytest.approx(-0.5)
    assert finalize_metrics(out.sums, out.tokens)["train/clip_frac"] == 0.0
    out.loss.backward()
    assert new.grad is not None and new.grad.item() == pytest.approx(-0.5)
    # A < 0 and ratio above 1 + clip_high: unclipped wins too
    new2 = _t([[math.log(2.0)]])
    out2 = ppo_clip_loss(new2, _t([[0.0]]), torch.tensor([-1.0]), _t([[1.0]]), clip_low=0.2, clip_high=0.28)
    assert out2.loss.item() == pytest.approx(2.0)


def test_asymmetric_bounds_are_separate() -> None:
    # ratio 1.25 is inside clip_high=0.28 but outside a symmetric 0.2
    new = _t([[math.log(1.25)]])
    a = ppo_clip_loss(new, _t([[0.0]]), torch.tensor([1.0]), _t([[1.0]]), clip_low=0.2, clip_high=0.28)
    b = ppo_clip_loss(new, _t([[0.0]]), torch.tensor([1.0]), _t([[1.0]]), clip_low=0.2, clip_high=0.2)
    assert a.loss.item() == pytest.approx(-1.25)
    assert b.loss.item() == pytest.approx(-1.2)


def test_token_vs_sequence_aggregation() -> None:
    # seq 0: one token with per-token loss -1; seq 1: three tokens with loss +1/3 each (A = -1/3, ratio 1)
    new = _t([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = _t([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -1 / 3], dtype=torch.float64)
    tok = ppo_clip_loss(new, new, adv, mask, clip_low=0.2, clip_high=0.2, agg="token")
    seq = ppo_clip_loss(new, new, adv, mask, clip_low=0.2, clip_high=0.2, agg="sequence")
    assert tok.loss.item() == pytest.approx((-1 + 1) / 4)
    assert seq.loss.item() == pytest.approx((-1 + 1 / 3) / 2)


def test_padding_is_ignored_even_with_wild_values() -> None:
    new = _t([[0.0, 50.0]])
    old = _t([[0.0, -50.0]])
    out = ppo_clip_loss(new, old, torch.tensor([1.0]), _t([[1.0, 0.0]]), clip_low=0.2, clip_high=0.2)
    assert out.loss.item() == pytest.approx(-1.0)
    assert out.tokens == 1


def test_normalizer_makes_micro_batches_sum_to_the_full_batch() -> None:
    g = torch.Generator().manual_seed(0)
    new = torch.randn(4, 5, generator=g, dtype=torch.float64) * 0.3
    old = torch.randn(4, 5, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    mask = (torch.rand(4, 5, generator=g) > 0.3).double()
    for agg in ("token", "sequence"):
        full = ppo_clip_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.3, agg=agg)  # type: ignore[arg-type]
        norm = mask.sum().item() if agg == "token" else 4.0
        parts = sum(
            ppo_clip_loss(
                new[i : i + 2],
                old[i : i + 2],
                adv[i : i + 2],
                mask[i : i + 2],
                clip_low=0.2,
                clip_high=0.3,
                agg=agg,
                normalizer=norm,  # type: ignore[arg-type]
            ).loss.item()
            for i in (0, 2)
        )
        assert parts == pytest.approx(full.loss.item())


def test_k3_kl_hand_value_and_penalty() -> None:
    # ref - new = log 2: exp(log 2) - log 2 - 1 = 1 - log 2
    assert k3_kl(_t([[0.0]]), _t([[math.log(2.0)]])).item() == pytest.approx(1 - math.log(2))
    assert k3_kl(_t([[0.3]]), _t([[0.3]])).item() == 0.0
    new = _t([[0.0, 0.0]])
    ref = _t([[math.log(2.0), 0.0]])
    out = ppo_clip_loss(
        new,
        new,
        torch.tensor([0.0]),
        _t([[1.0, 1.0]]),
        clip_low=0.2,
        clip_high=0.2,
        ref_logprobs=ref,
        kl_coef=0.5,
    )
    assert out.loss.item() == pytest.approx(0.5 * (1 - math.log(2)) / 2)
    assert finalize_metrics(out.sums, out.tokens)["train/kl"] == pytest.approx((1 - math.log(2)) / 2)
    # kl_coef 0 still reports the KL but does not pay it
    off = ppo_clip_loss(
        new, new, torch.tensor([0.0]), _t([[1.0, 1.0]]), clip_low=0.2, clip_high=0.2, ref_logprobs=ref
    )
    assert off.loss.item() == 0.0 and off.sums["kl"] > 0


def test_entropy_metric_and_unknown_agg() -> None:
    new = _t([[0.0, 0.0]])
    out = ppo_clip_loss(
        new, new, torch.tensor([1.0]), _t([[1.0, 0.0]]), clip_low=0.2, clip_high=0.2, entropy=_t([[2.0, 9.0]])
    )
    assert finalize_metrics(out.sums, out.tokens)["train/entropy"] == 2.0
    with pytest.raises(ValueError, match="aggregation"):
        ppo_clip_loss(new, new, torch.tensor([1.0]), _t([[1.0, 0.0]]), clip_low=0.2, clip_high=0.2, agg="x")  # type: ignore[arg-type]
