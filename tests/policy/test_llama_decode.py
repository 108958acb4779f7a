"""The lean Llama decoder against transformers' own forward: same tokens, same logprobs, fresh weights."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy, sample_batch
from trialground.policy.backends.hf.llama_decode import LlamaDecoder, packing_reason, unsupported_reason
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig


def _sample_both(model: LlamaForCausalLM, prompts: list[list[int]], temperature: float, seed: int) -> tuple:
    kw = dict(max_new_tokens=24, temperature=temperature, eos_ids=[1], pad_id=0)
    ref = sample_batch(model, prompts, generator=torch.Generator().manual_seed(seed), **kw)
    lean = sample_batch(
        model, prompts, generator=torch.Generator().manual_seed(seed), decoder=LlamaDecoder(model), **kw
    )
    return ref, lean


def _assert_same(ref, lean) -> None:  # type: ignore[no-untyped-def]
    assert lean.token_ids == ref.token_ids
    assert lean.finished_by_eos == ref.finished_by_eos
    for a, b in zip(lean.logprobs, ref.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def _gqa_model(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rope_theta=500.0,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
    )
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_tiny_model_lean_decoder_matches_transformers(tiny: HFPolicy, temperature: float) -> None:
    tasks = generate_codegen_tasks(12, seed=3, split="eval")
    prompts = [tiny.encode_chat([{"role": "user", "content": t.prompt}]) for t in tasks]
    prompts[0] = prompts[0][-5:]  # very different lengths: heavy left padding
    prompts = prompts[:4] * 4 + prompts[4:]  # repeated prompts, as k samples of a task: prefix sharing
    ref, lean = _sample_both(tiny.model, prompts, temperature, seed=9)
    _assert_same(ref, lean)
    assert sum(len(t) for t in ref.token_ids) > 24 * 3  # it really generated
    lengths = {len(t) for t in ref.token_ids}
    assert len(lengths) > 3  # rows finished at different steps: the lean decoder dropped rows


@pytest.mark.parametrize("temperature", [0.0, 1.3])
def test_grouped_query_attention_and_untied_head_match(temperature: float) -> None:
    model = _gqa_model(0)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 97, (n,), generator=gen).tolist() for n in (3, 17, 9, 1)]
    ref, lean = _sample_both(model, prompts, temperature, seed=4)
    _assert_same(ref, lean)


def test_weights_changed_in_place_are_picked_up() -> None:
    model = _gqa_model(1)
    decoder = LlamaDecoder(model)
    prompts = [[5, 6, 7, 8], [9, 10]]
    kw = dict(max_new_tokens=10, temperature=0.0, eos_ids=[1], pad_id=0)
    before = sample_batch(model, prompts, decoder=decoder, **kw)
    with torch.no_grad():  # what an optimiser step does: in-place updates of every projection
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    after_lean = sample_batch(model, prompts, decoder=decoder, **kw)
    after_ref = sample_batch(model, prompts, **kw)
    _assert_same(after_ref, after_lean)
    assert after_lean.token_ids != before.token_ids


def test_models_it_cannot_run_exactly_are_refused() -> None:
    model = _gqa_model(2)
    assert unsupported_reason(model) is None
    model.config.hidden_act = "gelu"
    assert "activation" in (unsupported_reason(model) or "")
    with pytest.raises(ValueError, match="activation"):
        LlamaDecoder(model)
    assert "is not one of" in (unsupported_reason(torch.nn.Linear(2, 2)) or "")


async def test_policy_falls_back_to_transformers_under_lora() -> None:
    from peft import LoraConfig, get_peft_model

    policy = HFPolicy(PolicyConfig(model="tiny"))
    prompts = [
        policy.encode_chat([{"role": "user", "content": t.prompt}])
        for t in generate_codegen_tasks(3, seed=1, split="eval")
    ]
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    assert policy._lean_decoder(64) is not None
    plain = await policy.generate(prompts, params)
    # LoRA injected in place (what the trainer does): B starts at zero, so the function is unchanged
    get_peft_model(policy.model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))  # type: ignore[arg-type]
    assert "LoRA" in (unsupported_reason(policy.model) or "")
    assert policy._lean_decoder(64) is None
    wrapped = await policy.generate(prompts, params)
    assert [g.token_ids for g in wrapped] == [g.token_ids for g in plain]


def test_transformers_decode_can_be_chosen(tiny: HFPolicy) -> None:
    policy = HFPolicy(PolicyConfig(model="tiny", decode="transformers"))
    assert policy._lean_decoder(64) is None
    assert tiny._lean_decoder(64) is not None


def test_bf16_weights_on_cpu_keep_an_fp32_residual_stream_and_cache() -> None:
    """16-bit weights on CPU: the matmuls run in bf16, the residual stream, KV cache, attention and logits in
    fp32; greedy tokens and logprobs stay within bf16 rounding of the fp32 model with the same weights."""
    full = _gqa_model(seed=5)
    half = _gqa_model(seed=5).to(torch.bfloat16)
    rounded = _gqa_model(seed=5)
    rounded.load_state_dict({k: v.float() for k, v in half.state_dict().items()})  # fp32, bf16's values
    decoder = LlamaDecoder(half)
    keys, values = decoder.new_cache(2, 16)
    assert keys.dtype == values.dtype == torch.float32
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    logits = decoder.forward(
        ids, torch.arange(4).expand(2, 4), torch.ones(2, 16, dtype=torch.bool), (keys, values), 0
    )
    assert logits.dtype == torch.float32
    with torch.no_grad():
        want = rounded(ids).logits[:, -1]
    assert torch.allclose(logits, want, atol=0.05), (logits - want).abs().max()
    assert not torch.allclose(logits, full(ids).logits[:, -1].detach(), atol=1e-6)  # it did run in bf16
    kw = dict(max_new_tokens=12, temperature=0.0, eos_ids=[1], pad_id=0)
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    lean = sample_batch(half, prompts, generator=torch.Generator().manual_seed(0), decoder=decoder, **kw)
    ref = sample_batch(
        rounded, prompts, generator=torch.Generator().manual_seed(0), decoder=LlamaDecoder(rounded), **kw
    )
    assert lean.token_ids == ref.token_ids
    for a, b in zip(lean.logprobs, ref.logprobs, strict=True):
        assert a == pytest.approx(b, abs=0.02)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prepacked_weights_give_the_dense_weights_logits(dtype: torch.dtype) -> None:
    """On a CPU oneDNN supports, the decoder prepacks its weights (the output layer included); the logits of
    a prefill and of decode steps equal those of the same decoder on plain dense weights."""
    model = _gqa_model(seed=6).to(dtype)
    reason = packing_reason(next(model.parameters()))
    if reason is not None:
        pytest.skip(f"no oneDNN prepacking here: {reason}")
    packed, dense = LlamaDecoder(model), LlamaDecoder(model)
    assert packed.dense_reason is not None and "hidden size 64" in packed.dense_reason  # too small to pay
    packed.dense_reason = None  # before the first forward, which builds the fused weights
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = torch.ones(2, 16, dtype=torch.bool)
    outs = []
    for decoder in (packed, dense):
        cache = decoder.new_cache(2, 16)
        first = decoder.forward(ids, torch.arange(4).expand(2, 4), mask, cache, 0)
        step = decoder.forward(first.argmax(-1, keepdim=True), torch.full((2, 1), 4), mask, cache, 4)
        outs.append((first, step))
    layer = packed._current()[0]
    assert packed._head is not None
    assert layer.w_qkv.layout == layer.w_down.layout == packed._head.layout == torch._mkldnn
    assert dense._current()[0].w_qkv.layout == torch.strided and dense._head is None
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for a, b in zip(outs[0], outs[1], strict=True):
        assert torch.allclose(a, b, atol=tol), (a - b).abs().max()


def test_weights_stay_dense_where_onednn_cannot_take_them() -> None:
    assert "hidden size 128" in (packing_reason(torch.zeros(2), 128) or "")
    assert "dtype" in (packing_reason(torch.zeros(2, dtype=torch.float16)) or "")
    assert packing_reason(torch.zeros(2, device="meta")) == "weights on meta"


def test_a_prepacking_failure_leaves_the_decoder_dense_and_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _gqa_model(seed=7)
    if packing_reason(next(model.parameters())) is not None:
        pytest.skip("no oneDNN prepacking here")
    want = LlamaDecoder(model)
    want.dense_reason = "dense on purpose"
    decoder = LlamaDecoder(model)
    decoder.dense_reason = None

    def refuse(*_a: object) -> None:
        raise RuntimeError("no such layout")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    kw = dict(max_new_tokens=8, temperature=0.0, eos_ids=[1], pad_id=0)
    got = sample_batch(model, [[5, 6, 7], [8, 9]], decoder=decoder, **kw)
    assert decoder.dense_reason == "oneDNN prepacking failed: no such layout"
    assert got.token_ids == sample_batch(model, [[5, 6, 7], [8, 9]], decoder=want, **kw).token_ids


def test_a_shared_prompt_prefix_attends_like_the_per_row_cache() -> None:
    """Decode attention over a shared prefix (each prompt's keys read once for its rows) equals attention
    over the cache with the prompt copied into every row, for uneven groups and after rows left."""
    from trialground.policy.backends.hf.llama_decode import (
        SharedPrefix,
        _decode_attention,
        _shared_decode_attention,
    )

    gen = torch.Generator().manual_seed(0)
    layers, prompts, kv_heads, heads, width, own, dim = 2, 3, 2, 6, 7, 4, 8
    keys, values = (torch.randn(layers, prompts, kv_heads, width, dim, generator=gen) for _ in range(2))
    mask = torch.ones(prompts, width, dtype=torch.bool)
    mask[0, :3] = False  # left padding of a short prompt
    mask[2, :1] = False
    owner = torch.tensor([0, 2, 0, 1, 2, 0, 2])  # uneven groups, not in prompt order
    prefix = SharedPrefix(keys.clone(), values.clone(), mask)
    prefix.regroup(owner)
    rows = len(owner)
    k_own, v_own = (torch.randn(rows, kv_heads, own, dim, generator=gen) for _ in range(2))
    own_mask = torch.ones(rows, own, dtype=torch.bool)
    q = torch.randn(rows, heads, 1, dim, generator=gen)

    def per_row(layer: int, owner: torch.Tensor, q, k_own, v_own, own_mask):  # type: ignore[no-untyped-def]
        k = torch.cat([keys[layer][owner], k_own], dim=2)
        v = torch.cat([values[layer][owner], v_own], dim=2)
        return _decode_attention(q, k, v, torch.cat([mask[owner], own_mask], dim=1))

    for layer in range(layers):
        got = _shared_decode_attention(q, prefix, layer, k_own, v_own, prefix.hidden(own_mask))
        torch.testing.assert_close(
            got, per_row(layer, owner, q, k_own, v_own, own_mask), rtol=1e-5, atol=1e-6
        )
    assert not prefix.in_order
    # rows in prompt order, as many per prompt: the grid is the batch itself (no gathers)
    grouped = torch.tensor([0, 0, 1, 1, 2, 2])
    in_order = SharedPrefix(keys.clone(), values.clone(), mask)
    in_order.regroup(grouped)
    assert in_order.in_order
    got = _shared_decode_attention(q[:6], in_order, 0, k_own[:6], v_own[:6], in_order.hidden(own_mask[:6]))
    torch.testing.assert_close(
        got, per_row(0, grouped, q[:6], k_own[:6], v_own[:6], own_mask[:6]), rtol=1e-5, atol=1e-6
    )
    # rows leave (every row of prompt 1 among them): its cache is dropped and the rest still agree
    keep = torch.tensor([4, 0, 6])
    prefix.regroup(prefix.owner[keep])
    assert prefix.keys.shape[1] == 2 and prefix.per_prompt == 2
    got = _shared_decode_attention(
        q[keep], prefix, 1, k_own[keep], v_own[keep], prefix.hidden(own_mask[keep])
    )
    want = per_row(1, owner[keep], q[keep], k_own[keep], v_own[keep], own_mask[keep])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_repeated_prompts_decode_over_one_prefix_per_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """k samples of a prompt: the lean decoder keeps one prompt cache per distinct prompt (not one per row)
    and samples what transformers samples."""
    from trialground.policy.backends.hf import hf

    model = _gqa_model(2)
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(2, 97, (n,), generator=gen).tolist() for n in (11, 4)]
    built: list[tuple] = []
    real_init = hf._LeanSteps.__init__

    def record(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        real_init(self, *args, **kwargs)
        built.append((tuple(self.prefix.keys.shape), tuple(self.cache[0].shape)))

    monkeypatch.setattr(hf._LeanSteps, "__init__", record)
    ref, lean = _sample_both(model, prompts * 5, 1.0, seed=2)
    _assert_same(ref, lean)
    # [layers, prompts, kv heads, slots, head dim]: two prompts padded to the longer; the ten rows' own
    # caches hold the new tokens only
    assert built == [((3, 2, 2, 11, 16), (3, 10, 2, 24, 16))]


def test_a_mostly_distinct_batch_copies_its_prompts_and_samples_the_same() -> None:
    """One prompt repeated among many distinct ones would make the shared grid mostly padding: the prompts
    are copied into the rows' caches instead, with the same tokens as transformers."""
    from trialground.policy.backends.hf import hf

    model = _gqa_model(3)
    gen = torch.Generator().manual_seed(6)
    distinct = [torch.randint(2, 97, (n,), generator=gen).tolist() for n in (5, 9, 3, 12, 7)]
    prompts = [distinct[0]] * 6 + distinct[1:]  # 5 prompts, grid 5 x 6 = 30 places for 10 rows
    ref, lean = _sample_both(model, prompts, 1.0, seed=3)
    _assert_same(ref, lean)
    decoder = LlamaDecoder(model)
    ids, mask = hf.left_pad(distinct, 0, torch.device("cpu"))
    owner = torch.tensor([0] * 6 + [1, 2, 3, 4])
    steps = hf._LeanSteps(decoder, mask, 4, owner=owner)
    steps.prefill(ids, (mask.cumsum(-1) - 1).clamp(min=0))
    assert steps.prefix is None and steps.filled == 12 and steps.cache[0].shape[3] == 12 + 4


def test_rows_leaving_unevenly_switch_to_copied_prompts_with_the_same_logits() -> None:
    """After rows leave, a grid over twice the rows left is given up for copied prompts; the next decode
    step's logits equal those of a decoder that copied the prompts from the start."""
    from trialground.policy.backends.hf import hf

    model = _gqa_model(4)
    gen = torch.Generator().manual_seed(7)
    distinct = [torch.randint(2, 97, (n,), generator=gen).tolist() for n in (6, 10, 4)]
    ids, mask = hf.left_pad(distinct, 0, torch.device("cpu"))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    owner = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2])  # a grid of 3 x 6 for 12 rows: shared

    def run(shared: bool) -> tuple[hf._LeanSteps, torch.Tensor]:
        steps = hf._LeanSteps(
            LlamaDecoder(model), mask[owner] if not shared else mask, 6, owner=owner if shared else None
        )
        if shared:
            steps.prefill(ids, positions)
            assert steps.prefix is not None  # 3 x 6 places for 12 rows: shared
        else:
            steps.prefill(ids[owner], positions[owner])
        nxt = positions[owner, -1] + 1
        tok = torch.randint(2, 97, (12,), generator=torch.Generator().manual_seed(8))
        steps.step(tok, nxt.unsqueeze(-1))
        keep = torch.tensor([0, 1, 2, 3, 4, 5, 6, 9])  # 6, 1 and 1 rows: a grid of 3 x 6 > 2 x 8
        steps.keep(keep)
        tok2 = torch.randint(2, 97, (8,), generator=torch.Generator().manual_seed(9))
        return steps, steps.step(tok2, (nxt[keep] + 1).unsqueeze(-1))

    shared, got = run(True)
    assert shared.prefix is None  # switched to copied prompts at `keep`
    _, want = run(False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
