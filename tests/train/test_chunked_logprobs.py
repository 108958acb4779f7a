"""Chunked log-probabilities (train.chunked_logprobs): the same logprobs, entropies and gradients as the
full logits, with no logits tensor larger than one chunk in the forward or the backward pass."""

from __future__ import annotations

import pytest
import torch
from script_helpers import load_script
from train_helpers import PAD, VOCAB, sequence_logprobs, tiny_llama, traj

from trialground.tensors import final_hidden
from trialground.train.advantages import with_advantages
from trialground.train.chunked_logprobs import check_head, token_logprobs
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer

VocabWatch = load_script("benchmarks/long_sequence.py").VocabWatch

SPECS = [([1, 2, 3], [4, 5, 6, 7], 1.0), ([1, 2, 3], [8, 9], -1.0), ([5, 6], [10, 11, 12], 0.5)]


def test_chunks_give_the_full_logits_values_and_gradients() -> None:
    model = tiny_llama()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]])  # [2, 7]
    t = 0.7
    logits = model(input_ids=ids[:, :-1]).logits.float() / t
    full = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # [2, 6]
    probs = torch.softmax(logits, -1)
    full_ent = -(probs * torch.log_softmax(logits, -1)).sum(-1)
    full.sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad()
    hidden, _ = final_hidden(model, input_ids=ids[:, :-1])
    with VocabWatch(VOCAB, 32) as watch:
        logp, ent = token_logprobs(model, hidden, ids[:, 1:], temperature=t, entropy=True, chunk=5)
        logp.sum().backward()
    assert watch.largest == 5 * VOCAB  # 12 positions in chunks of at most 5, forward and backward
    torch.testing.assert_close(logp, full, rtol=0, atol=1e-6)
    torch.testing.assert_close(ent, full_ent, rtol=0, atol=1e-5)
    for p, g in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("share_prompt", [False, True])
def test_a_step_in_chunks_equals_one_chunk(share_prompt: bool) -> None:
    grads, metrics = [], []
    for chunk in (1 << 20, 3):
        model = tiny_llama()
        batch = [
            traj(p, [("policy", c, sequence_logprobs(model, p + c, len(p)))], group="g", index=i)
            for i, (p, c, _) in enumerate(SPECS)
        ]
        config = TrainerConfig(share_prompt=share_prompt, logit_chunk_tokens=chunk)
        trainer = Trainer(model, config, PAD)
        trainer.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.optimizer.zero_grad = lambda *a, **k: None  # type: ignore[method-assign]
        with VocabWatch(VOCAB, 32) as watch:
            metrics.append(trainer.step(with_advantages(batch, [s[2] for s in SPECS])))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))  # type: ignore[union-attr]
        if chunk == 3:
            assert watch.largest == 3 * VOCAB
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
    for key in ("train/loss", "train/entropy", "train/ratio_mean"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-5, abs=1e-7)


def test_a_model_whose_logits_are_scaled_after_the_head_is_refused() -> None:
    model = tiny_llama()
    forward = model.forward

    def scaled(*args: object, **kwargs: object) -> object:
        out = forward(*args, **kwargs)  # type: ignore[arg-type]
        out.logits = out.logits * 2.0
        return out

    model.forward = scaled  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="not its output layer"):
        check_head(model)
