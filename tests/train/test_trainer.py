"""The trainer on a tiny random Llama: batch building, ratios, accumulation, failures, LoRA, KL."""

from __future__ import annotations

import copy

import pytest
import torch
from train_helpers import PAD, sequence_logprobs, tiny_llama, traj

from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Sample, Trainer, build_samples, forward_tokens, micro_batch_order


def _on_policy(
    model: torch.nn.Module, specs: list[tuple[list[int], list[int], float]], temperature: float = 1.0
):
    """Trajectories whose recorded logprobs are the model's own at `temperature`."""
    out = []
    for i, (prompt, completion, reward) in enumerate(specs):
        lp = sequence_logprobs(model, prompt + completion, len(prompt), temperature)  # type: ignore[arg-type]
        out.append(traj(prompt, [("policy", completion, lp)], reward=reward, group="g", index=i))
    return out


SPECS = [
    ([1, 2, 3], [4, 5, 6, 7], 1.0),
    ([1, 2, 3], [8, 9], 0.0),
    ([5, 6], [10, 11, 12], 0.0),
    ([5, 6, 7, 8], [13], 1.0),
]
ADV = [1.0, -1.0, -0.5, 0.5]


def test_build_samples_aligns_targets() -> None:
    t = traj(
        [1, 2, 3],
        [("policy", [4, 5], [-0.1, -0.2]), ("env", [6, 7], []), ("policy", [8], [-0.3])],
    )
    (s,) = build_samples(with_advantages([t], [0.5]))
    assert s.ids == [1, 2, 3, 4, 5, 6, 7, 8]
    # target j is ids[j + 1]: the policy tokens 4, 5 and 8 are trained, nothing else
    assert s.mask == [0, 0, 1, 1, 0, 0, 1]
    assert s.old_logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3]
    trained = [s.ids[j + 1] for j, m in enumerate(s.mask) if m]
    assert trained == [4, 5, 8]
    assert s.advantage == 0.5


def test_build_samples_skips_failures_and_missing_logprobs_marked() -> None:
    ok = traj([1], [("policy", [2], [])])
    failed = traj([1], [("policy", [2], [-0.1])], error=True)
    only_env = traj([1], [("env", [2], [])])
    samples = build_samples(with_advantages([ok, failed, only_env], [1.0, 1.0, 1.0]))
    assert len(samples) == 1 and samples[0].old_logprobs is None
    with pytest.raises(ValueError):
        build_samples(with_advantages([ok], []))


def test_on_policy_first_step_has_ratio_one_and_moves_logprobs() -> None:
    model = tiny_llama()
    trainer = Trainer(model, TrainerConfig(lr=1e-2, micro_batch_size=2), PAD)
    batch = _on_policy(model, SPECS)
    before = [sum(sequence_logprobs(model, p + c, len(p))) for p, c, _ in SPECS]
    m = trainer.step(with_advantages(batch, ADV))
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert m["train/clip_frac"] == 0.0
    assert m["train/tokens"] == 10.0 and m["train/sequences"] == 4.0
    assert m["train/grad_norm"] > 0 and m["train/entropy"] > 0
    assert trainer.version == 1 and m["train/version"] == 1.0
    after = [sum(sequence_logprobs(model, p + c, len(p))) for p, c, _ in SPECS]
    # the trained module is the one passed in (shared in-process): positive advantages went up
    assert after[0] > before[0] and after[3] > before[3]
    assert after[1] < before[1] and after[2] < before[2]


def test_temperature_matches_sampling_temperature() -> None:
    model = tiny_llama()
    batch = _on_policy(model, SPECS, temperature=2.0)
    m = Trainer(model, TrainerConfig(), PAD, temperature=2.0).step(with_advantages(batch, ADV))
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    model2 = tiny_llama()
    m_wrong = Trainer(model2, TrainerConfig(), PAD, temperature=1.0).step(with_advantages(batch, ADV))
    assert abs(m_wrong["train/ratio_mean"] - 1.0) > 1e-3
    with pytest.raises(ValueError, match="temperature"):
        Trainer(tiny_llama(), TrainerConfig(), PAD, temperature=0.0)


def test_gradient_accumulation_equals_full_batch() -> None:
    """Accumulating micro-batches gives the full batch's gradient. Compared before the optimizer step:
    Adam divides by sqrt(v), so float noise in a near-zero gradient component becomes a full lr-sized
    step in either direction, and the weights after a step need not agree even when the gradients do."""
    grads = []
    for mbs in (1, 3, 4):
        model = tiny_llama()
        batch = _on_policy(model, SPECS)
        trainer = Trainer(model, TrainerConfig(lr=1e-2, micro_batch_size=mbs), PAD)
        trainer.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.optimizer.zero_grad = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.step(with_advantages(batch, ADV))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    scale = float(grads[0].abs().max())
    assert scale > 0
    # float32 sums of a few dozen terms in a different order: each component may differ by some units of
    # eps (1.2e-7) times the largest term it sums; 1e-5 of the largest component is ample and still far
    # below any real difference (a micro-batch counted twice or dropped changes components by ~1/4).
    for other in grads[1:]:
        assert torch.allclose(grads[0], other, rtol=1e-4, atol=1e-5 * scale), (grads[0] - other).abs().max()


@pytest.mark.parametrize(
    ("loss_agg", "micro_batch"), [("token", 16), ("sequence", 16), ("token", 2), ("token", 1)]
)
def test_shared_prompt_forward_gives_the_same_loss_and_gradients(loss_agg: str, micro_batch: int) -> None:
    """k samples of one prompt run the prompt once; loss, metrics and gradients equal full sequences (also
    when micro-batches of 2 keep a prompt's samples together, `micro_batch_order`, and in micro-batches of
    one, where a one-token completion runs its prompt alone)."""
    specs = [([1, 2, 3], [4, 5, 6, 7], 1.0), ([1, 2, 3], [8, 9], 0.0), ([1, 2, 3], [10], 0.0), *SPECS[2:]]
    advantages = [1.0, -0.5, -0.5, -0.5, 0.5]
    grads, metrics = [], []
    for share in (False, True):
        model = tiny_llama()
        batch = _on_policy(model, specs)
        config = TrainerConfig(share_prompt=share, loss_agg=loss_agg, micro_batch_size=micro_batch)  # type: ignore[arg-type]
        trainer = Trainer(model, config, PAD)
        trainer.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.optimizer.zero_grad = lambda *a, **k: None  # type: ignore[method-assign]
        metrics.append(trainer.step(with_advantages(batch, advantages)))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-7)
    for key in ("train/loss", "train/ratio_mean", "train/entropy", "train/tokens"):
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-5, abs=1e-7)


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_infra_failures_change_nothing() -> None:
    runs = []
    for with_failure in (False, True):
        model = tiny_llama()
        batch: list[Trajectory] = _on_policy(model, SPECS)
        adv: list[float | None] = list(ADV)
        if with_failure:
            bad = traj([1, 2], [("policy", [30, 31, 32], [-1.0, -1.0, -1.0])], reward=None, error=True)
            batch.insert(1, bad)
            adv.insert(1, None)
        m = Trainer(model, TrainerConfig(lr=1e-2), PAD).step(with_advantages(batch, adv))
        runs.append((_params(model), m["train/tokens"]))
    assert runs[0][1] == runs[1][1]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][0], runs[1][0], strict=True))


def test_skip_zero_advantage_gives_the_same_update() -> None:
    runs = []
    for skip in (False, True):
        model = tiny_llama()
        batch = _on_policy(model, SPECS)
        Trainer(model, TrainerConfig(lr=1e-2, skip_zero_advantage=skip), PAD).step(
            with_advantages(batch, [1.0, 0.0, 0.0, -1.0])
        )
        runs.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(runs[0], runs[1], atol=1e-7)


def test_recompute_old_logprobs_and_epochs() -> None:
    model = tiny_llama()
    batch = []
    for t in _on_policy(model, SPECS):
        turns = tuple(
            u.model_copy(update={"logprobs": tuple(x + 0.1 for x in u.logprobs)}) if u.role == "policy" else u
            for u in t.turns
        )
        batch.append(t.model_copy(update={"turns": turns}))
    m = Trainer(model, TrainerConfig(old_logprobs="recompute", epochs=3, lr=1e-2), PAD).step(
        with_advantages(batch, ADV)
    )
    assert m["train/sampler_logprob_diff"] == pytest.approx(0.1, abs=1e-5)
    # averaged over 3 epochs: ratio 1 in the first, drifting after the updates
    assert m["train/ratio_mean"] != pytest.approx(1.0, abs=1e-6)
    # trajectories without recorded logprobs are recomputed in "sampling" mode too
    bare = [traj(p, [("policy", c, [])], reward=r) for p, c, r in SPECS]
    m2 = Trainer(tiny_llama(), TrainerConfig(), PAD).step(with_advantages(bare, ADV))
    assert m2["train/ratio_mean"] == pytest.approx(1.0, abs=1e-6)


def test_nothing_trainable_is_a_skipped_step() -> None:
    trainer = Trainer(tiny_llama(), TrainerConfig(), PAD)
    m = trainer.step(with_advantages([traj([1], [("policy", [2], [0.0])], error=True)], [None]))
    assert m["train/skipped"] == 1.0 and trainer.version == 0


def test_lora_trains_adapters_and_merged_weights_match() -> None:
    model = tiny_llama()
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(model, TrainerConfig(lora_rank=4, lora_alpha=8, lr=5e-2), PAD)
    batch = _on_policy(model, SPECS)
    for _ in range(2):
        trainer.step(with_advantages(batch, ADV))
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    merged = trainer.state_dict()
    assert set(merged) == set(frozen)  # plain HF names, LoRA folded in
    changed = [k for k in merged if not torch.equal(merged[k], frozen[k])]
    assert changed and all(k.endswith(".weight") for k in changed)
    fresh = tiny_llama(seed=123)
    fresh.load_state_dict(merged)
    x = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.allclose(fresh(input_ids=x).logits, trainer.model(input_ids=x).logits, atol=1e-5)
        # the caller's module samples with the adapters too (peft injects into it)
        assert torch.allclose(model(input_ids=x).logits, trainer.model(input_ids=x).logits)


def test_kl_to_reference() -> None:
    model = tiny_llama()
    ref = copy.deepcopy(model)
    trainer = Trainer(model, TrainerConfig(kl_coef=0.1, lr=5e-2), PAD)
    batch = _on_policy(ref, SPECS)
    m1 = trainer.step(with_advantages(batch, ADV))
    assert m1["train/kl"] == pytest.approx(0.0, abs=1e-7)
    m2 = trainer.step(with_advantages(batch, ADV))
    assert m2["train/kl"] > 1e-6
    # LoRA: the reference is the base model with adapters disabled
    lora = Trainer(tiny_llama(), TrainerConfig(kl_coef=0.1, lora_rank=2, lr=5e-2), PAD)
    assert lora.step(with_advantages(batch, ADV))["train/kl"] == pytest.approx(0.0, abs=1e-7)
    assert lora.step(with_advantages(batch, ADV))["train/kl"] > 0.0


def test_lora_init_is_seeded_and_leaves_the_global_rng_alone() -> None:
    model = tiny_llama()
    torch.manual_seed(42)
    expected_next = torch.rand(1)
    torch.manual_seed(42)
    a = Trainer(model, TrainerConfig(lora_rank=2, seed=3), PAD)
    assert torch.equal(torch.rand(1), expected_next)
    b = Trainer(tiny_llama(), TrainerConfig(lora_rank=2, seed=3), PAD)
    c = Trainer(tiny_llama(), TrainerConfig(lora_rank=2, seed=4), PAD)

    def lora_a(t: Trainer) -> list[torch.Tensor]:
        return [p.detach() for n, p in t.model.named_parameters() if "lora_A" in n]

    assert all(torch.equal(x, y) for x, y in zip(lora_a(a), lora_a(b), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(lora_a(a), lora_a(c), strict=True))


def test_the_optimiser_is_fused_adamw_on_cpu_and_updates_as_the_default_one_does() -> None:
    """The trainer's AdamW runs PyTorch's fused kernel on CPU; its update matches the default AdamW's."""
    models = [tiny_llama(), tiny_llama()]
    models[1].load_state_dict(models[0].state_dict())
    fused = Trainer(models[0], TrainerConfig(lr=1e-2, weight_decay=0.1), PAD)
    default = Trainer(models[1], TrainerConfig(lr=1e-2, weight_decay=0.1), PAD)
    assert fused.optimizer.defaults["fused"] is True
    default.optimizer = torch.optim.AdamW(
        [p for p in models[1].parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1
    )
    for trainer, model in ((fused, models[0]), (default, models[1])):
        for _ in range(2):
            trainer.step(with_advantages(_on_policy(model, SPECS), ADV))
    moved = 0.0
    for a, b, start in zip(
        models[0].parameters(), models[1].parameters(), tiny_llama().parameters(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
        moved = max(moved, float((a - start).abs().max()))
    assert moved > 1e-3  # the two steps changed the weights


def test_a_sampler_sharing_the_module_samples_with_the_updated_weights() -> None:
    """The lean decoder keeps fused copies of the weights and rebuilds them when a parameter's version
    counter moved; the fused AdamW kernel does not move it, so the trainer does. Without that the decoder
    would keep sampling from the weights before the update."""
    from trialground.policy.backends.hf.llama_decode import LlamaDecoder

    model = tiny_llama()
    decoder = LlamaDecoder(model)
    trainer = Trainer(model, TrainerConfig(lr=1e-2), PAD)
    ids = torch.tensor([[1, 2, 3, 4]])
    mask = torch.ones(1, 8, dtype=torch.bool)

    def lean_logits() -> torch.Tensor:
        return decoder.forward(ids, torch.arange(4).unsqueeze(0), mask, decoder.new_cache(1, 8), 0)

    first = lean_logits()
    trainer.step(with_advantages(_on_policy(model, SPECS), ADV))
    with torch.no_grad():
        want = model(ids).logits[:, -1]
    assert not torch.allclose(first, want, atol=1e-4)  # the step changed the model's logits
    assert torch.allclose(lean_logits(), want, atol=1e-5)


def _sample(prompt: list[int], completion: int) -> Sample:
    ids = prompt + [9] * completion
    return Sample(
        ids=ids, mask=[1] * (len(ids) - 1), old_logprobs=None, advantage=1.0, prompt_len=len(prompt)
    )


def test_micro_batches_keep_a_prompts_samples_together_only_when_that_runs_fewer_tokens() -> None:
    a, b = [1] * 10, [2] * 10
    long_prompts = [_sample(a, 5), _sample(b, 5), _sample(a, 4), _sample(b, 4)]
    # longest first: [a5, b5] [a4, b4] runs both prompts twice: 2 x 10 + 2 x 4, then 2 x 10 + 2 x 3 (a
    # completion's last token predicts nothing that is trained and is not run)
    assert forward_tokens(sorted(long_prompts, key=lambda s: -len(s.ids)), 2, True) == 54
    order, positions = micro_batch_order(long_prompts, 2, share_prompt=True)
    assert [s.ids[0] for s in order] == [1, 1, 2, 2]  # [a5, a4] [b5, b4]: 10 + 2 x 4, then 10 + 2 x 4
    assert positions == forward_tokens(order, 2, True) == 36
    # without prompt sharing, or when completions differ far more than prompts cost, longest first wins
    order, positions = micro_batch_order(long_prompts, 2, share_prompt=False)
    assert [len(s.ids) for s in order] == [15, 15, 14, 14] and positions == 2 * 14 + 2 * 13
    c, d = [3], [4]
    short_prompts = [_sample(c, 20), _sample(c, 1), _sample(d, 19), _sample(d, 2)]
    order, positions = micro_batch_order(short_prompts, 2, share_prompt=True)
    assert [len(s.ids) - 1 for s in order] == [20, 19, 2, 1]
    assert positions == 44  # 2 + 2 x 19, then 2 + 2 x 1; grouped would run 1 + 2 x 19, then 1 + 2 x 18: 76


def test_the_step_reports_the_token_positions_it_ran() -> None:
    model = tiny_llama()
    specs = [([1, 2, 3], [4, 5, 6, 7], 1.0), ([5, 6], [10, 11, 12], 0.0), ([1, 2, 3], [8, 9], 0.0)]
    m = Trainer(model, TrainerConfig(micro_batch_size=2), PAD).step(
        with_advantages(_on_policy(model, specs), [1.0, -1.0, -0.5])
    )
    # [1,2,3]+4 with [1,2,3]+2 (3 + 2 x 3), then [5,6]+3 (2 + 2): 13; longest first would pair [1,2,3]+4 with
    # [5,6]+3 (prompts left-padded: 2 x 3 + 2 x 3), then [1,2,3]+2 (3 + 1): 16
    assert m["train/forward_tokens"] == 13.0
