"""Padding-free packing (train.packing): the sequences of a micro-batch as one row give the per-token
logprobs, loss and gradients of padded micro-batches, and run no padding position."""

from __future__ import annotations

import pytest
import torch
from train_helpers import PAD, sequence_logprobs, tiny_llama, traj

from trialground.train.advantages import with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.packing import Packed, check_packing, pack_rows
from trialground.train.trainer import Sample, Trainer, build_samples

SPECS = [
    ([1, 2, 3], [4, 5, 6, 7], 1.0),
    ([1, 2, 3], [8, 9], -1.0),
    ([5, 6], [10, 11, 12, 13, 14, 15, 16, 17], 0.5),
    ([5, 6, 7, 8], [13], -0.5),
]


def _batch(model: torch.nn.Module) -> list:  # type: ignore[type-arg]
    return [
        traj(p, [("policy", c, sequence_logprobs(model, p + c, len(p)))], group="g", index=i)  # type: ignore[arg-type]
        for i, (p, c, _) in enumerate(SPECS)
    ]


def test_packed_logprobs_equal_padded_ones() -> None:
    model = tiny_llama()
    samples = build_samples(with_advantages(_batch(model), [s[2] for s in SPECS]))
    out = []
    for packing in (False, True):
        trainer = Trainer(model, TrainerConfig(share_prompt=False, packing=packing), PAD)
        with torch.no_grad():
            out.append(trainer.chunk_logprobs(model, samples, entropy=True))
    (padded, padded_ent), (packed, packed_ent) = out
    mask = torch.zeros_like(padded)
    for i, s in enumerate(samples):
        mask[i, : len(s.ids) - 1] = 1
    assert packed.shape == padded.shape
    torch.testing.assert_close(packed * mask, padded * mask, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed_ent * mask, padded_ent * mask, rtol=0, atol=1e-5)  # type: ignore[operator]


@pytest.mark.parametrize("one_row", [False, True])
def test_a_packed_step_gives_the_padded_gradients_on_fewer_positions(one_row: bool) -> None:
    """Rows as long as the longest sequence; or, as under flash attention, the micro-batch in one row."""
    grads, metrics = [], []
    for packing in (False, True):
        model = tiny_llama()
        config = TrainerConfig(share_prompt=False, packing=packing, micro_batch_size=4)
        trainer = Trainer(model, config, PAD)
        trainer.one_row = one_row and packing
        trainer.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.optimizer.zero_grad = lambda *a, **k: None  # type: ignore[method-assign]
        metrics.append(trainer.step(with_advantages(_batch(model), [s[2] for s in SPECS])))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))  # type: ignore[union-attr]
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
    for key in ("train/loss", "train/entropy", "train/ratio_mean"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-5, abs=1e-7)
    # targets [9, 6, 4, 4]: padded 4 rows of 9; packed in rows of 9: [9], [6], [4, 4]; or one row of 23
    assert metrics[0]["train/forward_tokens"] == 4 * 9
    assert metrics[1]["train/forward_tokens"] == (23 if one_row else 3 * 9)


def test_rows_are_filled_first_fit_longest_first_and_unpack_in_sample_order() -> None:
    assert pack_rows([3, 9, 4, 5, 2]) == [[1], [3, 2], [0, 4]]
    ids = [[1, 2, 3, 4], [5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]  # 3, 6 and 2 targets
    chunk = [Sample(ids=x, mask=[1] * (len(x) - 1), old_logprobs=None, advantage=0.0) for x in ids]
    packed = Packed(chunk, torch.device("cpu"))
    assert packed.ids.tolist() == [[5, 6, 7, 8, 9, 10], [1, 2, 3, 12, 13, 0]]
    assert packed.positions.tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 0]]
    back = packed.unpack(packed.targets)
    assert back.tolist() == [[2, 3, 4, 0, 0, 0], [6, 7, 8, 9, 10, 11], [13, 14, 0, 0, 0, 0]]
    single = Packed(chunk, torch.device("cpu"), single=True)
    assert single.positions.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1]]
    assert single.unpack(single.targets).tolist() == back.tolist()


def test_a_model_whose_attention_crosses_packed_sequences_is_refused() -> None:
    model = tiny_llama()
    forward = model.forward

    def no_positions(*args: object, **kwargs: object) -> object:
        kwargs.pop("position_ids", None)  # one causal sequence: the second attends to the first
        return forward(*args, **kwargs)  # type: ignore[arg-type]

    model.forward = no_positions  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="packed sequences do not keep to themselves"):
        check_packing(model)
    with pytest.raises(ValueError, match="packed sequences do not keep to themselves"):
        Trainer(model, TrainerConfig(share_prompt=False, packing=True), PAD)
