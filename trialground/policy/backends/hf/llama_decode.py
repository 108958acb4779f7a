"""A lean incremental forward pass for Llama-family models, used by `HFPolicy` to sample.

Covered exactly: `LlamaForCausalLM`, `MistralForCausalLM` (while the sequence fits its sliding window),
`Qwen2ForCausalLM` (q/k/v biases) and `Qwen3ForCausalLM` (per-head q/k RMS norms); tests compare each
against transformers' own forward. Anything else (Gemma, Phi, GPT-2, ...) samples through transformers.

Why: for small models the transformers forward is dominated by Python and dispatch overhead (cache
objects, mask construction, hooks, per-projection matmuls), not arithmetic. On the bundled 0.9M model a
decode step of 32 rows costs ~6.7 ms through `LlamaForCausalLM.forward` and ~2.4 ms here, with logits
equal to transformers' (tests compare them). Larger models on a GPU gain less, but nothing is lost.

What it does differently: q/k/v and gate/up projections are fused into one matmul each; on CPU, from a
hidden size of 512, those weights and the output layer's are prepacked once for oneDNN (`_pack`) instead of
being reordered by every matmul; the KV cache is one preallocated tensor per layer written in place; rotary
tables are computed once per batch; the attention mask is built from a boolean key mask without a 4-D
float mask per layer. Rows that continue the same prompt (GRPO's k samples of a task) share one copy of its
KV cache (`SharedPrefix`): each decode step reads a prompt's keys and values once for all of its rows, with
their queries stacked, rather than once per row.

The fused weights are copies, so they are rebuilt whenever a parameter changed: every in-place update
(optimiser steps, `load_weights`) bumps a tensor's version counter, and `LlamaDecoder` compares the
counters before each batch. Models it does not cover exactly (other architectures, LoRA-wrapped
projections, rope scaling, a sliding window shorter than the sequence, activations other than SiLU) are
refused by `unsupported_reason`, and the caller falls back to the transformers forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# Causal-LM classes covered, and the attention module each must hold (a subclass may change the maths).
_COVERED = {
    "LlamaForCausalLM": "LlamaAttention",
    "MistralForCausalLM": "MistralAttention",
    "Qwen2ForCausalLM": "Qwen2Attention",
    "Qwen3ForCausalLM": "Qwen3Attention",
}


def unsupported_reason(model: nn.Module, length: int | None = None) -> str | None:
    """Why `LlamaDecoder` cannot run `model` exactly for sequences of up to `length` tokens (None: any
    length), or None when it can."""
    name = type(model).__name__
    if name not in _COVERED:
        return f"{name} is not one of {sorted(_COVERED)}"
    cfg: Any = model.config  # type: ignore[union-attr]
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return f"rope type {rope.get('rope_type')!r}"
    if float(getattr(cfg, "partial_rotary_factor", 1.0) or 1.0) != 1.0:
        return "partial rotary embeddings"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r}"
    window = getattr(cfg, "sliding_window", None)
    if window and (length is None or length > int(window)):
        return f"sliding-window attention (window {window}) over {length or 'any number of'} tokens"
    if getattr(cfg, "pretraining_tp", 1) not in (None, 1):
        return "pretraining_tp > 1"
    for layer in model.model.layers:  # type: ignore[union-attr]
        attn = type(layer.self_attn).__name__
        if attn != _COVERED[name]:
            return f"attention module {attn}"
        for proj in (*_attn_projs(layer), *_mlp_projs(layer)):
            if type(proj) is not nn.Linear:
                return f"projection of type {type(proj).__name__} (e.g. LoRA)"
    return None


def _attn_projs(layer: Any) -> tuple[Any, ...]:
    a = layer.self_attn
    return (a.q_proj, a.k_proj, a.v_proj, a.o_proj)


def _mlp_projs(layer: Any) -> tuple[Any, ...]:
    return (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)


@dataclass
class _Layer:
    norm1: torch.Tensor  # [d]
    w_qkv: torch.Tensor  # [d, (H + 2 Hk) D]: q, k, v
    b_qkv: torch.Tensor | None  # [(H + 2 Hk) D], the biases in the same layout (Qwen2)
    w_o: torch.Tensor  # [H D, d]
    b_o: torch.Tensor | None
    norm2: torch.Tensor  # [d]
    w_gate_up: torch.Tensor  # [d, 2 I]
    b_gate_up: torch.Tensor | None
    w_down: torch.Tensor  # [I, d]
    b_down: torch.Tensor | None
    # Qwen3's per-head RMS norms of q and k (before rotary)
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotary's rotate_half of each head [..., D]: (-x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _add(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x if bias is None else x + bias


def _mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w in the weights' dtype, the result in the activations' dtype (see `activation_dtype`). `w` is
    [K, N], or oneDNN's prepacked [N, K] from `_pack`."""
    if w.layout == torch._mkldnn:  # type: ignore[attr-defined]
        return torch.ops.mkldnn._linear_pointwise(x.to(w.dtype), w, None, "none", [], "").to(x.dtype)
    return x @ w if x.dtype == w.dtype else (x.to(w.dtype) @ w).to(x.dtype)


# The row count oneDNN blocks a prepacked weight for; any row count runs (GRPO's 8 x 8 decode rows here).
_PACK_ROWS = 64
# Below this hidden size a prepacked call costs more than it saves: oneDNN's ~10-20 us per call outweighs
# the reorder a plain matmul does (1 thread: at hidden 128, 64 rows, 70-95 us either way or worse packed; at
# 256 and above packed is as fast or faster for 8 rows and more, at 512 and above for one row in bf16 and
# within 6 % in fp32).
PACK_MIN_HIDDEN = 512


def packing_reason(weight: torch.Tensor, hidden_size: int = PACK_MIN_HIDDEN) -> str | None:
    """Why `_pack` leaves the weights of a model like this (its first parameter and hidden size) dense, or
    None when it prepacks them."""
    if hidden_size < PACK_MIN_HIDDEN:
        return f"hidden size {hidden_size} < {PACK_MIN_HIDDEN}: plain matmuls are as fast at this size"
    if weight.device.type != "cpu":
        return f"weights on {weight.device.type}"
    if not torch.backends.mkldnn.is_available():
        return "PyTorch was built without oneDNN"
    if weight.dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "this CPU has no bf16 support in oneDNN"
    if weight.dtype not in (torch.float32, torch.bfloat16):
        return f"dtype {weight.dtype}"
    return None


def _pack(w_t: torch.Tensor, packed: bool) -> torch.Tensor:
    """`w_t` [K, N] as oneDNN's prepacked linear weight when `packed`, else a contiguous copy of it.

    A plain CPU matmul reorders its weight into oneDNN's blocked layout on every call; at decode shapes that
    is a large share of the call (64 rows of a 106M Llama, 1 thread: 64 new tokens took 10.0-10.2 s
    prepacked against 11.0-11.4 s in bf16, 14.3-15.2 s against 17.5 s in fp32, the same tokens)."""
    if not packed:
        return w_t.contiguous()
    return torch.ops.mkldnn._reorder_linear_weight(w_t.t().contiguous(), _PACK_ROWS)


def activation_dtype(weights: torch.Tensor) -> torch.dtype:
    """The dtype of the residual stream, the KV cache and attention. On CPU with 16-bit weights: float32,
    with only the matrix products in the weights' dtype (a cast of one activation row block per matmul).
    PyTorch's CPU attention is slower in bf16 than in fp32 (64 decode rows of a 106M Llama, 1 thread: 3.1 ms
    a call against 1.1 ms); the matmuls are where bf16 pays. Elsewhere the weights' dtype."""
    if weights.device.type == "cpu" and weights.dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return weights.dtype


def _decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """One query per row [B, H, 1, D] over the cache [B, Hk, L, D] (query head j reads key-value head
    j // (H / Hk)), `key_mask` [B, L]. Two batched matmuls and a softmax: on CPU 1.65x faster than
    `scaled_dot_product_attention` at one query (64 rows, 9 heads, 110 slots: 1.07 ms against 1.77 ms), the
    same values up to float rounding. `scale` multiplies the scores (default: dim ** -0.5)."""
    bsz, heads, _, dim = q.shape
    kv_heads = k.shape[1]
    scale = dim**-0.5 if scale is None else scale
    scores = torch.matmul(q.reshape(bsz, kv_heads, heads // kv_heads, dim), k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v).reshape(bsz, heads, 1, dim)


@dataclass
class SharedPrefix:
    """The KV cache of prompts that several decoded rows continue (the k samples of a task): keys and values
    [layers, U, Hk, W, D] from prefilling the U distinct prompts, `mask` [U, W] their real slots. Decode
    attention reads each prompt's keys and values once for all of its rows (`_shared_decode_attention`)
    instead of once per row; at GRPO shapes the prompt is most of what a decode step reads.
    `regroup(owner)` says which prompt each row continues (`owner` [A]), again whenever rows leave."""

    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    owner: torch.Tensor = field(init=False)
    row_mask: torch.Tensor = field(init=False)  # [A, W] each row's prompt slots
    per_prompt: int = field(init=False)  # R: rows of the prompt with the most
    slot: torch.Tensor = field(init=False)  # [A] each row's place in the [U, R] grid of queries
    take: torch.Tensor = field(init=False)  # [U R] the row at each place (row 0 where a prompt has < R rows)
    in_order: bool = field(init=False)  # rows are the grid's places in order (take = slot = 0..A-1)

    def regroup(self, owner: torch.Tensor) -> None:
        used, owner = torch.unique(owner, return_inverse=True)
        if len(used) < self.mask.shape[0]:  # prompts no row continues any more: drop their caches
            self.keys, self.values, self.mask = self.keys[:, used], self.values[:, used], self.mask[used]
        counts = torch.bincount(owner, minlength=len(used))
        per_prompt = int(counts.max())
        order = torch.argsort(owner, stable=True)
        rank = torch.empty_like(owner)
        rank[order] = (
            torch.arange(len(owner), device=owner.device) - (counts.cumsum(0) - counts)[owner[order]]
        )
        self.owner, self.row_mask, self.per_prompt = owner, self.mask[owner], per_prompt
        self.slot = owner * per_prompt + rank
        self.take = torch.zeros(len(used) * per_prompt, dtype=torch.long, device=owner.device)
        self.take[self.slot] = torch.arange(len(owner), device=owner.device)
        self.in_order = len(owner) == len(self.take) and bool(
            (self.slot == torch.arange(len(owner), device=owner.device)).all()
        )

    def hidden(self, key_mask: torch.Tensor) -> torch.Tensor:
        """[A, 1, 1, W + t]: True for the slots each row must not see, its prompt's then its own
        (`key_mask` [A, t])."""
        return ~torch.cat([self.row_mask, key_mask], dim=-1)[:, None, None, :]


def _shared_decode_attention(
    q: torch.Tensor,
    prefix: SharedPrefix,
    layer: int,
    k: torch.Tensor,
    v: torch.Tensor,
    hidden: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """`_decode_attention` over a shared prompt and each row's own slots: q [A, H, 1, D], the prefix's
    layer `layer`, the rows' own keys and values [A, Hk, t, D]; `hidden` [A, 1, 1, W + t] is True for the
    slots a row must not see (`SharedPrefix.hidden`). One softmax over both parts. For
    the prompt part each prompt's rows' queries are stacked ([U, Hk, R G, D]), so its keys and values are
    read once per prompt; the grid's padding places compute values nobody reads."""
    rows, heads, _, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    prompts, per, width = prefix.mask.shape[0], prefix.per_prompt, prefix.mask.shape[1]

    def to_grid(x: torch.Tensor) -> torch.Tensor:  # [A, Hk, G, n] -> [U, Hk, R G, n]
        x = x if prefix.in_order else x[prefix.take]
        n = x.shape[-1]
        return (
            x.view(prompts, per, kv_heads, group, n)
            .transpose(1, 2)
            .reshape(prompts, kv_heads, per * group, n)
        )

    def from_grid(x: torch.Tensor) -> torch.Tensor:  # [U, Hk, R G, n] -> [A, Hk, G, n]
        n = x.shape[-1]
        x = (
            x.view(prompts, kv_heads, per, group, n)
            .transpose(1, 2)
            .reshape(prompts * per, kv_heads, group, n)
        )
        return x if prefix.in_order else x[prefix.slot]

    qg = q.reshape(rows, kv_heads, group, dim)
    shared = from_grid(torch.matmul(to_grid(qg), prefix.keys[layer].transpose(-1, -2)))  # [A, Hk, G, W]
    own = torch.matmul(qg, k.transpose(-1, -2))  # [A, Hk, G, t]
    scale = dim**-0.5 if scale is None else scale
    scores = torch.cat([shared, own], dim=-1).mul_(scale).masked_fill_(hidden, float("-inf"))
    p_shared, p_own = torch.softmax(scores, dim=-1).split([width, k.shape[2]], dim=-1)
    out = from_grid(torch.matmul(to_grid(p_shared), prefix.values[layer])).add_(torch.matmul(p_own, v))
    return out.reshape(rows, heads, 1, dim)


class LlamaDecoder:
    """Prefill and one-token decode steps over a preallocated KV cache (see the module docstring)."""

    @staticmethod
    def refusal(model: nn.Module, length: int | None = None) -> str | None:
        """Why this decoder cannot run `model` exactly for sequences of up to `length` tokens, or None."""
        return unsupported_reason(model, length)

    def __init__(self, model: nn.Module) -> None:
        # a sliding window is checked per batch by the caller (`refusal(model, length)`)
        reason = self.refusal(model, 1)
        if reason is not None:
            raise ValueError(f"{type(self).__name__} cannot run this model: {reason}")
        self.model: Any = model
        cfg: Any = self.model.config
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads)
        self.eps = float(cfg.rms_norm_eps)
        rope = getattr(cfg, "rope_parameters", None) or {}
        self.rope_theta = float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
        self._params = list(self.model.parameters())
        self._versions: list[int] = []
        self._layers: list[_Layer] = []
        self._tables: dict[float, tuple[torch.Tensor, torch.Tensor]] = {}  # rope theta -> cos, sin [P, D]
        self.head_eps: float | None = None
        self._head: torch.Tensor | None = None  # the output layer's weight prepacked (see `_pack`), or None
        # Why the weights stay dense (None: they are prepacked for oneDNN)
        self.dense_reason = packing_reason(self._params[0], int(cfg.hidden_size))

    # ------------------------------------------------------------------ weights

    def _current(self) -> list[_Layer]:
        versions = [p._version for p in self._params]
        if versions != self._versions:
            self._layers = self._fuse()
            self._versions = versions
        return self._layers

    @torch.no_grad()
    def _fuse(self) -> list[_Layer]:
        if self.dense_reason is None:
            try:
                return self._fuse_weights(packed=True)
            except (RuntimeError, AttributeError) as e:  # oneDNN's private ops refused: stay dense
                self.dense_reason = f"oneDNN prepacking failed: {e}"
        return self._fuse_weights(packed=False)

    def _fuse_weights(self, packed: bool) -> list[_Layer]:
        self._head = _pack(self.model.lm_head.weight.t(), packed) if packed else None
        out = []
        for layer in self.model.model.layers:
            q, k, v, o = _attn_projs(layer)
            gate, up, down = _mlp_projs(layer)
            q_t, k_t = q.weight.t(), k.weight.t()
            b_qkv = None
            if any(p.bias is not None for p in (q, k, v)):
                b_q, b_k, b_v = (
                    p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0]) for p in (q, k, v)
                )
                b_qkv = torch.cat([b_q, b_k, b_v]).contiguous()
            b_gate_up = None
            if gate.bias is not None or up.bias is not None:
                b_gate_up = torch.cat(
                    [
                        p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0])
                        for p in (gate, up)
                    ]
                )
            attn = layer.self_attn
            norms = {}
            for key in ("q_norm", "k_norm"):
                module = getattr(attn, key, None)
                if module is not None:
                    norms[key] = module.weight
            out.append(
                _Layer(
                    norm1=layer.input_layernorm.weight,
                    w_qkv=_pack(torch.cat([q_t, k_t, v.weight.t()], dim=1), packed),
                    b_qkv=b_qkv,
                    w_o=_pack(o.weight.t(), packed),
                    b_o=o.bias,
                    norm2=layer.post_attention_layernorm.weight,
                    w_gate_up=_pack(torch.cat([gate.weight, up.weight]).t(), packed),
                    b_gate_up=b_gate_up,
                    w_down=_pack(down.weight.t(), packed),
                    b_down=down.bias,
                    **norms,
                )
            )
            if self.head_eps is None and norms:
                self.head_eps = float(getattr(attn.q_norm, "variance_epsilon", self.eps))
        return out

    def _head_norm(self, x: torch.Tensor, norm: torch.Tensor | None) -> torch.Tensor:
        """RMS-normalise each head of `x` [B, S, heads, D] (Qwen3), or nothing without a norm."""
        if norm is None:
            return x
        x32 = x.float()
        scale = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + (self.head_eps or self.eps))
        return norm * (x32 * scale).to(x.dtype)

    # ------------------------------------------------------------------ forward

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def _rotary(
        self, positions: torch.Tensor, dtype: torch.dtype, theta: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, S, 1, D] for integer positions [B, S] and rope base `theta` (default: the model's),
        from a table computed in float32 (as transformers computes them) and grown on demand."""
        theta = self.rope_theta if theta is None else theta
        need = int(positions.max()) + 1
        cos, sin = self._tables.get(theta, (torch.empty(0), torch.empty(0)))
        if cos.shape[0] < need or cos.dtype != dtype or cos.device != positions.device:
            d, size = self.head_dim, max(need, 256)
            exponents = torch.arange(0, d, 2, dtype=torch.int64, device=positions.device).float() / d
            inv_freq = 1.0 / (theta**exponents)
            freqs = torch.arange(size, device=positions.device).float().unsqueeze(-1) * inv_freq
            emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
            cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
            self._tables[theta] = (cos, sin)
        return cos[positions].unsqueeze(2), sin[positions].unsqueeze(2)

    def new_cache(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed key and value caches [layers, B, Hk, length, D]."""
        p = self._params[0]
        shape = (len(self.model.model.layers), batch, self.n_kv, length, self.head_dim)
        keys = torch.zeros(shape, dtype=activation_dtype(p), device=p.device)
        return keys, torch.zeros_like(keys)

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        key_mask: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor],
        start: int,
        prefix: SharedPrefix | None = None,
    ) -> torch.Tensor:
        """Logits [B, V] of the last of `ids` [B, S], whose tokens sit at cache slots start..start+S.

        `positions` [B, S] are rotary positions (left padding shifts them), `key_mask` [B, >= start+S] is
        True for slots holding real tokens. Every query may attend to itself, so a padding row stays
        finite; real rows never see padding slots. With `prefix` (one new token per row) each row also
        attends to its prompt's slots there, before its own: `cache` then holds only the rows' own tokens.
        """
        if prefix is not None and ids.shape[1] != 1:
            raise ValueError("a shared prefix is read by one-token decode steps only")
        layers = self._current()
        bsz, seq = ids.shape
        end = start + seq
        embed = self.model.model.embed_tokens
        h = embed(ids).to(activation_dtype(embed.weight))  # [B, S, d]
        cos, sin = self._rotary(positions, h.dtype)
        hidden = None if prefix is None else prefix.hidden(key_mask[:, :end])  # True: not to be seen
        if seq == 1:  # one new token per row: it is real and may see every real slot before it
            mask = key_mask[:, None, None, :end]
        else:
            slots = torch.arange(end, device=ids.device)
            causal = slots.unsqueeze(0) <= slots[start:end].unsqueeze(1)  # [S, end]
            own = slots.unsqueeze(0) == slots[start:end].unsqueeze(1)
            mask = ((causal.unsqueeze(0) & key_mask[:, None, :end]) | own.unsqueeze(0)).unsqueeze(1)
        keys, values = cache
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv
        for i, w in enumerate(layers):
            x = self._rms(h, w.norm1)
            qkv = _add(_mm(x, w.w_qkv), w.b_qkv).view(bsz, seq, -1, hd)
            q, k, v = qkv.split([nh, nkv, nkv], dim=2)
            q, k = self._head_norm(q, w.q_norm), self._head_norm(k, w.k_norm)
            q = (q * cos + _rotate_half(q) * sin).transpose(1, 2)  # [B, H, S, D]
            keys[i, :, :, start:end] = (k * cos + _rotate_half(k) * sin).transpose(1, 2)
            values[i, :, :, start:end] = v.transpose(1, 2)
            if prefix is not None and hidden is not None:
                attn = _shared_decode_attention(
                    q, prefix, i, keys[i, :, :, :end], values[i, :, :, :end], hidden
                )
            elif seq == 1 and q.device.type == "cpu":
                attn = _decode_attention(q, keys[i, :, :, :end], values[i, :, :, :end], key_mask[:, :end])
            else:
                attn = F.scaled_dot_product_attention(
                    q, keys[i, :, :, :end], values[i, :, :, :end], attn_mask=mask, enable_gqa=nh != nkv
                )
            h = h + _add(_mm(attn.transpose(1, 2).reshape(bsz, seq, nh * hd), w.w_o), w.b_o)
            x = self._rms(h, w.norm2)
            gate, up = _add(_mm(x, w.w_gate_up), w.b_gate_up).chunk(2, dim=-1)
            h = h + _add(_mm(F.silu(gate) * up, w.w_down), w.b_down)
        last = self._rms(h[:, -1], self.model.model.norm.weight)
        head = self.model.lm_head
        if self._head is not None:
            return _add(_mm(last, self._head), head.bias)
        return head(last.to(head.weight.dtype)).to(h.dtype)  # type: ignore[no-any-return]
