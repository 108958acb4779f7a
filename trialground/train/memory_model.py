"""How many bytes one training rank holds: a model of the trainer's memory, from the model's shape and the
run's settings, with no torch and no weights loaded (so `config validate` can answer before a run).

Bytes per parameter, full fine-tuning, per rank (W ranks; `state_per_param`):

| mode | weights | gradients | optimiser | communication | total |
|---|---|---|---|---|---|
| DDP fp32 | 4 | 4 | 8 (AdamW moments) | 4 (DDP's gradient buckets) | 20 |
| DDP bf16 weights | 2 | 4 (fp32, the masters'; 2 while accumulating) | 12 (fp32 master + moments) | 2 | 20 |
| FSDP2 (fp32 shards, bf16 compute) | 4/W | 4/W | 8/W | -- | 16/W |
| FSDP2 + CPU offload | 0 on the device (16/W in host memory) | | | | 0 |
| LoRA (frozen base) | 2 or 4 per base parameter; 20 per adapter parameter (fp32 adapters) | | | | |

DDP bf16 is no smaller than fp32 in state (the masters and moments are fp32 either way): what it saves is
the sampler's copy in the embedded default (the policy samples with the trainer's bf16 module) and half
the activations. Sharding is what divides the state.

On top of the state, per rank (`estimate`):
- FSDP2 gathers a layer's full weights (in the compute dtype) before it runs and frees them after;
  with prefetching two layers are gathered at once, and the root group (embeddings, final norm, output
  head) stays gathered from the forward through the backward. A layer's unsharded gradient (compute dtype,
  then fp32 for the reduce-scatter) exists until it is reduced.
- FSDP2 with more than one micro-batch per step keeps the unsharded gradients of every layer between
  micro-batches (they are reduced only at the last one), accumulated in fp32: 4 bytes per trained
  parameter, unsharded. That is often the largest term; fewer, larger micro-batches avoid it.
- Activations of one micro-batch (`micro_batch_size x max_context_tokens` tokens, every row padded to the
  longest): what a Llama/Qwen-style decoder layer keeps for its backward pass, per token
  `b(2H + 3Q + 2K + 4I) + 2(4 + b)H` bytes (H hidden, Q query width, K key/value width, I MLP width, b the
  compute dtype's bytes; the two RMSNorms keep fp32 copies). LoRA over a 16-bit base adds `4(5H + Q + I)`:
  peft casts the input of every adapted linear to the fp32 adapters' dtype. Activation checkpointing keeps
  `bH` per layer and token, plus one layer's activations while it is recomputed.
- Log-probabilities: 16 bytes per position and vocabulary entry (the fp32 logits kept for the backward
  pass, their gradient, the softmax, the compute-dtype output), for every position at once, or for
  `logit_chunk` positions at a time where the trainer computes them in chunks.
- A sampler's own copy of the weights (in its dtype) on rank 0, when the embedded policy cannot share the
  trainer's module (FSDP, asynchronous sampling, another dtype).

Not counted: AdamW's step counters (4 bytes a tensor), the CUDA context and allocator fragmentation (a few
GiB on a GPU: `RESERVE_BYTES` is kept free for them), a vLLM engine's share (`policy.gpu_memory_utilization`:
the check subtracts it from the device).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1 << 30
RESERVE_BYTES = 2 * GIB  # CUDA context, kernels' workspaces, allocator slack: not modelled, kept free
LOGIT_BYTES = 16  # per position x vocabulary entry in flight (see the module docstring)
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}
_ST_BYTES |= {"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer the memory model needs."""

    params: int  # every parameter, tied ones once
    layers: int
    hidden: int  # H
    intermediate: int  # I, the MLP's inner width
    q_width: int  # Q = heads x head_dim
    kv_width: int  # K = key/value heads x head_dim
    vocab: int
    tied: bool  # the output head is the input embedding

    @property
    def embedding(self) -> int:
        """Parameters outside the decoder layers: embeddings (and an untied output head), final norm."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def layer_params(self) -> int:
        """One decoder layer's parameters (the part of `params` outside `embedding`, evenly)."""
        return max(self.params - self.embedding, 0) // max(self.layers, 1)

    def lora_params(self, rank: int) -> int:
        """Adapter parameters of LoRA `rank` on every linear layer of the decoder (`all-linear`): r x (in +
        out) for q, k, v, o, gate, up and down."""
        h, q, k, i = self.hidden, self.q_width, self.kv_width, self.intermediate
        per_layer = (h + q) + 2 * (h + k) + (q + h) + 2 * (h + i) + (i + h)
        return rank * per_layer * self.layers

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], params: int | None = None) -> ModelShape:
        """From a Hugging Face `config.json` (a multimodal config's `text_config`); `params` counted from
        the shapes (Llama/Qwen layout, q/k/v biases where `attention_bias` or Qwen2) when not given."""
        cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
        try:
            h = int(cfg["hidden_size"])
            heads = int(cfg["num_attention_heads"])
            shape = cls(
                params=0,
                layers=int(cfg["num_hidden_layers"]),
                hidden=h,
                intermediate=int(cfg["intermediate_size"]),
                q_width=heads * int(cfg.get("head_dim") or h // heads),
                kv_width=int(cfg.get("num_key_value_heads") or heads)
                * int(cfg.get("head_dim") or h // heads),
                vocab=int(cfg["vocab_size"]),
                tied=bool(cfg.get("tie_word_embeddings", True)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"config.json lacks a decoder's sizes ({exc!r})") from None
        if params is None:
            h, q, k, i = shape.hidden, shape.q_width, shape.kv_width, shape.intermediate
            bias = q + 2 * k if cfg.get("attention_bias") or cfg.get("model_type") == "qwen2" else 0
            per_layer = h * q + 2 * h * k + q * h + bias + 3 * h * i + 2 * h
            params = shape.embedding + shape.layers * per_layer
        return cls(**{**shape.__dict__, "params": params})

    @classmethod
    def from_model_dir(cls, path: Path) -> ModelShape:
        """From a model directory: its `config.json`, and the exact parameter count from the safetensors
        headers (read without loading a weight) where there are any."""
        cfg = json.loads((path / "config.json").read_text())
        files = sorted(path.glob("*.safetensors"))
        return cls.from_hf_config(cfg, sum(_safetensors_params(f) for f in files) if files else None)


def _safetensors_params(path: Path) -> int:
    """Elements of the floating-point tensors of one safetensors file, from its JSON header."""
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > 100 << 20:
            raise ValueError(f"{path}: a safetensors header of {size} bytes")
        header = json.loads(f.read(size))
    return sum(
        math.prod(t["shape"])
        for k, t in header.items()
        if k != "__metadata__" and t.get("dtype", "").startswith(("F", "BF"))
    )


@dataclass(frozen=True)
class TrainSetup:
    """What of a run decides its trainer's memory."""

    parallel: str = "ddp"  # ddp | fsdp
    world: int = 1
    dtype: str = "float32"  # the trainer's weights (train.precision.trainer_dtype of policy.dtype)
    mixed_precision: bool = False  # bf16 autocast over fp32 weights
    cpu_offload: bool = False
    lora_rank: int = 0
    micro_batch_size: int = 1
    seq_tokens: int = 2048  # the longest row of a micro-batch
    micro_batches: int = 1  # per rank per step
    checkpointing: bool = False
    logit_chunk: int | None = None  # positions whose logits exist at once; None: all of them
    sampler_dtype: str | None = None  # rank 0 holds a sampler copy of the weights in this dtype
    reference: bool = False  # a frozen reference copy (kl_coef > 0 without LoRA)

    @property
    def sharded(self) -> bool:
        """FSDP across ranks (one process trains unsharded whatever `parallel` says)."""
        return self.parallel == "fsdp" and self.world > 1

    @property
    def compute_bytes(self) -> int:
        return 2 if self.mixed_precision or self.dtype != "float32" else 4

    @property
    def weight_bytes(self) -> int:
        return _DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Estimate:
    """Bytes one rank holds at its fullest, by part (`device` sums what lives on the accelerator)."""

    weights: int
    grads: int
    optimizer: int
    comm: int  # DDP's gradient buckets, FSDP's gathered layers and unsharded gradients
    activations: int
    logits: int
    sampler: int  # rank 0's sampler copy and a reference model
    host: int  # offloaded to host memory (FSDP CPU offload)
    notes: tuple[str, ...] = field(default=())

    @property
    def state(self) -> int:
        """Weights + gradients + optimiser state: what the run prints after its first step."""
        return self.weights + self.grads + self.optimizer

    @property
    def device(self) -> int:
        return self.state + self.comm + self.activations + self.logits + self.sampler

    def line(self) -> str:
        """One line for a run's start: the total and its parts, in GiB."""

        g = size_text
        host = f"; host memory {g(self.host)}" if self.host else ""
        return (
            f"memory estimate per rank: {g(self.device)} (weights {g(self.weights)} + grads "
            f"{g(self.grads)} + optimiser {g(self.optimizer)} + communication {g(self.comm)} + activations "
            f"{g(self.activations)} + logits {g(self.logits)} + sampler/reference {g(self.sampler)}){host}"
        )


def size_text(n: int) -> str:
    """Bytes as GiB (one decimal over 10 GiB, two under) or, under 1 GiB, MiB."""
    if n >= GIB:
        return f"{n / GIB:.1f} GiB" if n >= 10 * GIB else f"{n / GIB:.2f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


def state_per_param(setup: TrainSetup) -> dict[str, float]:
    """Bytes per trained parameter on one rank: weights, gradients, optimiser state, communication (the
    table of the module docstring)."""
    w = setup.weight_bytes
    if setup.sharded:  # fp32 shards, whatever the load dtype (train.fsdp casts as it shards)
        share = 0.0 if setup.cpu_offload else 1.0 / setup.world
        return {"weights": 4 * share, "grads": 4 * share, "optimizer": 8 * share, "comm": 0.0}
    master = 4 if w != 4 else 0
    comm = float(w) if setup.world > 1 else 0.0  # DDP buckets hold a second copy of the gradients
    return {"weights": float(w), "grads": 4.0, "optimizer": float(8 + master), "comm": comm}


def activation_bytes(shape: ModelShape, setup: TrainSetup) -> int:
    """What one micro-batch's forward keeps for its backward pass (see the module docstring)."""
    tokens = setup.micro_batch_size * setup.seq_tokens
    b, h = setup.compute_bytes, shape.hidden
    per_layer = b * (2 * h + 3 * shape.q_width + 2 * shape.kv_width + 4 * shape.intermediate)
    per_layer += 2 * (4 + b) * h
    if setup.lora_rank > 0 and b != 4:  # peft casts each adapted linear's input to its fp32 adapters
        per_layer += 4 * (5 * h + shape.q_width + shape.intermediate)
    if setup.checkpointing:
        return tokens * (shape.layers * b * h + per_layer)
    return tokens * shape.layers * per_layer


def logit_bytes(shape: ModelShape, setup: TrainSetup) -> int:
    rows = setup.micro_batch_size * setup.seq_tokens
    positions = rows if setup.logit_chunk is None else min(setup.logit_chunk, rows)
    return positions * shape.vocab * LOGIT_BYTES


def estimate(shape: ModelShape, setup: TrainSetup) -> Estimate:
    """The per-rank bytes of training a model of `shape` with `setup` (rank 0, which holds the most)."""
    notes: list[str] = []
    lora = setup.lora_rank > 0
    trained = shape.lora_params(setup.lora_rank) if lora else shape.params
    per = state_per_param(setup)
    fsdp = setup.sharded
    weights, grads, optimizer = (int(trained * per[k]) for k in ("weights", "grads", "optimizer"))
    comm = int(trained * per["comm"])
    host = 0
    if lora:  # the frozen base: no gradients, no optimiser state; adapters are fp32 (peft)
        base = shape.params
        adapter = state_per_param(TrainSetup(**{**setup.__dict__, "dtype": "float32"}))
        weights, grads, optimizer = (int(trained * adapter[k]) for k in ("weights", "grads", "optimizer"))
        comm = int(trained * adapter["comm"])
        weights += base * 4 // setup.world if fsdp else base * setup.weight_bytes
    if fsdp:
        if setup.cpu_offload:
            host = int(16 * trained / setup.world) + (4 * shape.params // setup.world if lora else 0)
            weights = grads = optimizer = 0
        c = setup.compute_bytes
        root = shape.params - shape.layers * shape.layer_params
        comm = c * (root + 2 * shape.layer_params) + (c + 4) * shape.layer_params
        if setup.micro_batches > 1 and setup.world > 1:
            comm += 4 * trained  # unsharded fp32 gradients accumulated until the last micro-batch
            notes.append(
                f"{setup.micro_batches} micro-batches a step: FSDP keeps every unsharded gradient between "
                "them (fewer, larger micro-batches avoid it)"
            )
    sampler = 0
    if setup.sampler_dtype is not None:
        sampler += shape.params * _DTYPE_BYTES[setup.sampler_dtype]
    if setup.reference:
        sampler += shape.params * setup.weight_bytes
    return Estimate(
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        comm=comm,
        activations=activation_bytes(shape, setup),
        logits=logit_bytes(shape, setup),
        sampler=sampler,
        host=host,
        notes=tuple(notes),
    )
