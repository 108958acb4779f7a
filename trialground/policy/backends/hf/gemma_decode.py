"""The lean decoder for Gemma 3 (`Gemma3ForCausalLM`, e.g. `policy.model: gemma-3-270m`).

The same preallocated KV cache, fused and prepacked projections, shared prompt caches and row dropping as
`LlamaDecoder` (`policy/backends/hf/llama_decode.py`), with Gemma 3's layer:

- the embedding scaled by sqrt(hidden size) (the model's own embedding module does it);
- RMS norms that scale by (1 + weight), computed in float32: before attention, after it (on the
  attention's output, before the residual add), before the MLP and after it;
- per-head RMS norms of q and k before the rotary embedding;
- attention scores scaled by `query_pre_attn_scalar ** -0.5`;
- two kinds of layers (`config.layer_types`): sliding-window layers, where a token sees the `sliding_window`
  tokens up to itself (keys at most window - 1 positions back) and the rotary base is the local one, and
  global layers with their own rotary base;
- a gelu (tanh approximation) gated MLP; the output layer tied to the embedding.

Covered exactly while there is no logit soft-capping, no bidirectional attention, the rotary embeddings
are unscaled and the projections are plain linear layers (not LoRA-wrapped); `gemma_refusal` says why
otherwise, and the caller falls back to transformers' forward. Tests compare its tokens and logprobs with
transformers' on a random small Gemma 3 (`tests/policy/test_gemma_decode.py`) and on the truncated real model
(`tests/models/test_gemma.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from trialground.policy.backends.hf.llama_decode import (
    LlamaDecoder,
    SharedPrefix,
    _decode_attention,
    _mm,
    _pack,
    _rotate_half,
    _shared_decode_attention,
    activation_dtype,
)

_ACTIVATIONS = ("gelu_pytorch_tanh",)


def gemma_refusal(model: nn.Module, length: int | None = None) -> str | None:
    """Why `Gemma3Decoder` cannot run `model` exactly (any length: the window is computed), or None."""
    name = type(model).__name__
    if name != "Gemma3ForCausalLM":
        return f"{name} is not Gemma3ForCausalLM"
    cfg: Any = model.config  # type: ignore[union-attr]
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(cfg, key, None) is not None:
            return f"{key} {getattr(cfg, key)}"
    if getattr(cfg, "use_bidirectional_attention", False):
        return "bidirectional attention"
    if getattr(cfg, "hidden_activation", None) not in _ACTIVATIONS:
        return f"activation {getattr(cfg, 'hidden_activation', None)!r}"
    layer_types = list(getattr(cfg, "layer_types", None) or [])
    rope = getattr(cfg, "rope_parameters", None) or {}
    for kind in set(layer_types):
        if kind not in ("sliding_attention", "full_attention"):
            return f"layer type {kind!r}"
        params = rope.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            return f"rope type {params.get('rope_type')!r} in {kind} layers"
    for layer in model.model.layers:  # type: ignore[union-attr]
        if type(layer.self_attn).__name__ != "Gemma3Attention":
            return f"attention module {type(layer.self_attn).__name__}"
        a, m = layer.self_attn, layer.mlp
        for proj in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj):
            if type(proj) is not nn.Linear or proj.bias is not None:
                return f"projection of type {type(proj).__name__} (e.g. LoRA) or with a bias"
    return None


@dataclass
class _GemmaLayer:
    sliding: bool
    theta: float
    norm_in: torch.Tensor  # [d] 1 + weight, float32
    w_qkv: torch.Tensor  # [d, (H + 2 Hk) D]
    q_norm: torch.Tensor  # [D]
    k_norm: torch.Tensor  # [D]
    w_o: torch.Tensor  # [H D, d]
    norm_post_attn: torch.Tensor
    norm_pre_mlp: torch.Tensor
    w_gate_up: torch.Tensor  # [d, 2 I]
    w_down: torch.Tensor  # [I, d]
    norm_post_mlp: torch.Tensor


class Gemma3Decoder(LlamaDecoder):
    """`LlamaDecoder`'s cache and batching with Gemma 3's layer (see the module docstring)."""

    refusal = staticmethod(gemma_refusal)

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        cfg: Any = self.model.config
        self.scale = float(cfg.query_pre_attn_scalar) ** -0.5
        self.window = int(cfg.sliding_window)
        rope = getattr(cfg, "rope_parameters", None) or {}
        self.thetas = {kind: float(rope[kind]["rope_theta"]) for kind in set(cfg.layer_types)}
        self.final_norm: torch.Tensor | None = None

    @torch.no_grad()
    def _fuse_weights(self, packed: bool) -> list[Any]:
        cfg: Any = self.model.config

        def plus_one(norm: Any) -> torch.Tensor:
            return 1.0 + norm.weight.float()  # what Gemma3RMSNorm multiplies by

        self._head = _pack(self.model.lm_head.weight.t(), packed) if packed else None
        self.final_norm = plus_one(self.model.model.norm)
        out: list[Any] = []
        for kind, layer in zip(cfg.layer_types, self.model.model.layers, strict=True):
            a, m = layer.self_attn, layer.mlp
            out.append(
                _GemmaLayer(
                    sliding=kind == "sliding_attention",
                    theta=self.thetas[kind],
                    norm_in=plus_one(layer.input_layernorm),
                    w_qkv=_pack(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).t(), packed),
                    q_norm=plus_one(a.q_norm),
                    k_norm=plus_one(a.k_norm),
                    w_o=_pack(a.o_proj.weight.t(), packed),
                    norm_post_attn=plus_one(layer.post_attention_layernorm),
                    norm_pre_mlp=plus_one(layer.pre_feedforward_layernorm),
                    w_gate_up=_pack(torch.cat([m.gate_proj.weight, m.up_proj.weight]).t(), packed),
                    w_down=_pack(m.down_proj.weight.t(), packed),
                    norm_post_mlp=plus_one(layer.post_feedforward_layernorm),
                )
            )
        return out

    def _norm(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """Gemma's RMS norm: in float32, times (1 + weight) (`scale`), back in x's dtype."""
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * scale).to(x.dtype)

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
        """As `LlamaDecoder.forward`. The sliding window is measured in cache slots, which for a row's real
        tokens differ as their positions do (left padding shifts both); with a shared prefix a row's own
        slot t follows the prompt's slots (slot W + t)."""
        if prefix is not None and ids.shape[1] != 1:
            raise ValueError("a shared prefix is read by one-token decode steps only")
        layers = cast(list[_GemmaLayer], self._current())  # what `_fuse_weights` below builds
        bsz, seq = ids.shape
        end = start + seq
        embed = self.model.model.embed_tokens
        h = embed(ids).to(activation_dtype(embed.weight))  # [B, S, d], scaled by sqrt(d) in the module
        rotary = {theta: self._rotary(positions, h.dtype, theta) for theta in set(self.thetas.values())}
        offset = 0 if prefix is None else prefix.mask.shape[1]  # slots before the rows' own cache
        key_slots = torch.arange(offset + end, device=ids.device)  # [W + end] virtual slots
        query_slots = key_slots[offset + start : offset + end]  # [S]
        near = key_slots.unsqueeze(0) > query_slots.unsqueeze(1) - self.window  # [S, W + end]
        hidden = None if prefix is None else prefix.hidden(key_mask[:, :end])  # [A, 1, 1, W + end]
        hidden_near = None if hidden is None else hidden | ~near[None, None]
        if seq == 1:
            full_mask = key_mask[:, None, None, :end]
            near_mask = full_mask & near[:, -end:][None, None]
        else:
            slots = key_slots[:end]
            causal = slots.unsqueeze(0) <= slots[start:end].unsqueeze(1)  # [S, end]
            own = slots.unsqueeze(0) == slots[start:end].unsqueeze(1)
            full_mask = ((causal.unsqueeze(0) & key_mask[:, None, :end]) | own.unsqueeze(0)).unsqueeze(1)
            near_mask = full_mask & near[None, None]
        keys, values = cache
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv
        for i, w in enumerate(layers):
            cos, sin = rotary[w.theta]
            x = self._norm(h, w.norm_in)
            q, k, v = _mm(x, w.w_qkv).view(bsz, seq, -1, hd).split([nh, nkv, nkv], dim=2)
            q, k = self._norm(q, w.q_norm), self._norm(k, w.k_norm)
            q = (q * cos + _rotate_half(q) * sin).transpose(1, 2)  # [B, H, S, D]
            keys[i, :, :, start:end] = (k * cos + _rotate_half(k) * sin).transpose(1, 2)
            values[i, :, :, start:end] = v.transpose(1, 2)
            k_all, v_all = keys[i, :, :, :end], values[i, :, :, :end]
            if prefix is not None and hidden is not None and hidden_near is not None:
                seen = hidden_near if w.sliding else hidden
                attn = _shared_decode_attention(q, prefix, i, k_all, v_all, seen, self.scale)
            elif seq == 1 and q.device.type == "cpu":
                mask = (near_mask if w.sliding else full_mask)[:, 0, 0]
                attn = _decode_attention(q, k_all, v_all, mask, self.scale)
            else:
                mask = near_mask if w.sliding else full_mask
                attn = F.scaled_dot_product_attention(
                    q, k_all, v_all, attn_mask=mask, scale=self.scale, enable_gqa=nh != nkv
                )
            out = _mm(attn.transpose(1, 2).reshape(bsz, seq, nh * hd), w.w_o)
            h = h + self._norm(out, w.norm_post_attn)
            gate, up = _mm(self._norm(h, w.norm_pre_mlp), w.w_gate_up).chunk(2, dim=-1)
            down = _mm(F.gelu(gate, approximate="tanh") * up, w.w_down)
            h = h + self._norm(down, w.norm_post_mlp)
        assert self.final_norm is not None
        last = self._norm(h[:, -1], self.final_norm)
        if self._head is not None:
            return _mm(last, self._head)
        head = self.model.lm_head
        return head(last.to(head.weight.dtype)).to(h.dtype)  # type: ignore[no-any-return]
