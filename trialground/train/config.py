"""Configuration of the trainer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trialground.plugin import FrozenParams, Params, check_name, check_section

ISCorrection = Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


# How ranks split the model: the names `trainer.parallel` takes (trialground.train.distributed does each)
PARALLEL = ("ddp", "fsdp")


class TrainerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    algorithm: str = Field(
        "grpo",
        description="Group advantage estimator (trialground.train.estimators): grpo, dr_grpo, rloo, or a "
        "plugin's 'package.module:NAME'",
    )
    advantage: Literal["trajectory", "tree"] = Field(
        "trajectory",
        description="trajectory: one advantage per trajectory from `algorithm`; tree: one per policy turn, "
        "from the values of the prefixes siblings share (train.tree_advantages; most useful with "
        "loop.branch)",
    )
    loss: str = Field(
        "ppo_clip",
        description="Policy loss (trialground.train.losses): ppo_clip (its settings are clip_low, clip_high, "
        "loss_agg and kl_coef below), or a plugin's 'package.module:NAME'",
    )
    loss_params: Params = Field(
        default_factory=FrozenParams, description="The loss's own settings, validated against its model"
    )
    adv_eps: float = Field(1e-6, gt=0.0, le=1.0, description="GRPO: added to the group std before dividing")
    lr: float = Field(1e-4, gt=0.0, le=1.0, description="Learning rate")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="AdamW decoupled weight decay")
    adam_betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")
    clip_low: float = Field(0.2, ge=0.0, le=1.0, description="PPO clip range below 1")
    clip_high: float = Field(0.28, ge=0.0, le=10.0, description="PPO clip range above 1 (DAPO clip-higher)")
    kl_coef: float = Field(
        0.0, ge=0.0, le=100.0, description="KL penalty (k3) to the reference policy (0 = off)"
    )
    loss_agg: Literal["token", "sequence"] = Field(
        "token", description="token: mean over all policy tokens of the batch (DAPO); sequence: mean of means"
    )
    epochs: int = Field(1, ge=1, le=16, description="Optimisation passes over each batch")
    micro_batch_size: int = Field(
        16, ge=1, le=4096, description="Sequences per forward/backward (grad accumulation)"
    )
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping norm")
    old_logprobs: Literal["sampling", "recompute"] = Field(
        "sampling",
        description="Ratio denominator: the sampler's logprobs (behaviour policy; corrects staleness) or a "
        "no-grad forward pass before the first epoch (sampler numerics differ: vLLM kernels, top_p < 1)",
    )
    is_correction: ISCorrection = Field(
        "none",
        description="Importance-sampling correction of the sampler/trainer mismatch (train.is_correction): "
        "none; token_truncate (TIS: each token's weight min(pi_trainer/pi_sampler, is_cap)); token_mask "
        "(tokens whose ratio leaves [1/is_cap, is_cap] leave the gradient); sequence_truncate and "
        "sequence_mask (MIS) on the sequence's ratio. Recomputes the old logprobs (as old_logprobs: "
        "recompute) and keeps the sampler's for the weights",
    )
    is_cap: float = Field(
        2.0,
        gt=1.0,
        le=1e6,
        description="is_correction: the truncation cap, and the mask's upper bound (its lower is 1/is_cap)",
    )
    skip_zero_advantage: bool = Field(
        True,
        description="Skip the forward pass of sequences with advantage 0 when kl_coef = 0 (same gradient)",
    )
    share_prompt: bool = Field(
        True,
        description="Run each distinct prompt of a micro-batch once and attend its completions to that "
        "cache (same loss and gradients; ~1.7x faster fwd+bwd with k samples per prompt)",
    )
    logit_chunk_tokens: int = Field(
        512,
        ge=1,
        le=1 << 20,
        description="Positions whose fp32 logits exist at once (train.chunked_logprobs): logprobs and "
        "entropy go through the output layer this many positions at a time, forward and backward "
        "(0.5 GiB of logits at 512 positions and a 262k vocabulary)",
    )
    packing: bool = Field(
        False,
        description="Run each micro-batch's sequences as one row with no padding, position ids starting "
        "again per sequence and attention kept within each (train.packing; refused for a model whose "
        "attention does not); replaces the shared-prompt pass",
    )
    compute_entropy: bool = Field(
        True, description="Log train/entropy (one extra softmax over the vocabulary)"
    )
    lora_rank: int = Field(0, ge=0, le=1024, description="LoRA rank via peft (0 = full fine-tuning)")
    lora_alpha: int = Field(16, gt=0, le=65536, description="LoRA scaling numerator (scale = alpha / rank)")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout (0 keeps the ratio exact)")
    lora_targets: str = Field(
        "all-linear", min_length=1, description="'all-linear' or comma-separated module names for LoRA"
    )
    seed: int = Field(0, description="Seed of the trainer's own random initialisation (LoRA adapters)")
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each decoder layer's activations in the backward pass instead of keeping "
        "them (less memory, ~1 extra forward); composes with share_prompt (train.shared_prompt)",
    )
    mixed_precision: Literal["off", "bf16"] = Field(
        "off",
        description="bf16: forward passes under torch.autocast(bfloat16) (matmuls in bf16 over weights in "
        "their own dtype). The weights' dtype is policy.dtype's: bfloat16 trains bf16 weights through fp32 "
        "master copies in the optimiser state (train.precision)",
    )
    data_parallel: int = Field(
        1,
        ge=1,
        le=4096,
        description="Training ranks started through Ray when cluster: ray (rank 0 is this process); "
        "under torchrun the launcher's WORLD_SIZE decides instead (docs/distributed.md)",
    )
    parallel: str = Field(
        "ddp",
        description="How ranks split the model (docs/distributed.md): ddp, a full replica per rank with "
        "gradients all-reduced; fsdp, torch FSDP2 (fully_shard) with parameters, gradients and optimiser "
        "state sharded across ranks. One process trains unsharded either way",
    )
    cpu_offload: bool = Field(
        False,
        description="fsdp: keep parameter shards, gradients and optimiser state in CPU memory "
        "(CPUOffloadPolicy), copying each layer to the device when it runs",
    )
    dist_backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto", description="torch.distributed backend of the gradient all-reduce (auto: nccl on CUDA)"
    )
    dist_timeout_s: float = Field(
        6 * 3600.0,
        gt=0.0,
        description="How long a rank waits in a collective; other ranks wait through rank 0's rollouts "
        "and evaluations, so this bounds the longest of those",
    )

    device_memory_gib: float | None = Field(
        None,
        gt=0.0,
        le=1 << 20,
        description="Memory of one training device in GiB, for the check before a run (docs/memory.md): a "
        "run whose per-rank estimate does not fit is refused. Unset: the CUDA device's own total when "
        "policy.device is cuda and CUDA is present, else no check",
    )

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, value: str) -> str:
        from trialground.train.estimators import ESTIMATORS

        return check_name(ESTIMATORS, value)

    @field_validator("loss")
    @classmethod
    def _known_loss(cls, value: str) -> str:
        from trialground.train.losses import LOSSES

        return check_name(LOSSES, value)

    @model_validator(mode="after")
    def _loss_settings(self) -> TrainerConfig:
        from trialground.train.losses import LOSSES

        check_section(LOSSES, self.loss, self.loss_params, "trainer.loss_", self)
        return self

    @field_validator("adam_betas")
    @classmethod
    def _betas_in_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in v):
            raise ValueError(f"each AdamW beta must be in [0, 1), got {v}")
        return v

    @field_validator("parallel")
    @classmethod
    def _known_parallel(cls, v: str) -> str:
        if v not in PARALLEL:
            raise ValueError(f"trainer.parallel {v!r}: expected one of {', '.join(PARALLEL)}")
        return v

    @model_validator(mode="after")
    def _offload_needs_fsdp(self) -> TrainerConfig:
        if self.cpu_offload and self.parallel != "fsdp":
            raise ValueError("trainer.cpu_offload needs trainer.parallel: fsdp (it offloads FSDP shards)")
        return self
