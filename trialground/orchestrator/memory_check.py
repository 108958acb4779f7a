"""The trainer's memory before a run: the per-rank estimate of `trialground.train.memory_model` for a run
config, printed in one line when a run starts, and a problem for `preflight` when it cannot fit the device.

The model's shape comes from its directory (`config.json`, safetensors headers), never from loading it; a
model with no readable shape here (a packaged or GGUF model not yet converted, a Hub name) gets no
estimate. The device's memory is `trainer.device_memory_gib`, else the CUDA device's total when the run
trains on CUDA and CUDA is present; without either (a CPU run) nothing is refused. An in-process engine
that takes `policy.gpu_memory_utilization` of the device (vLLM) leaves the trainer the rest, unless it sleeps
through the update (`policy.vllm_sleep` in a sync loop: weights offloaded, KV cache freed).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from trialground.orchestrator.run_config import RunConfig
from trialground.policy.backends import BACKENDS as POLICY_BACKENDS
from trialground.train.memory_model import GIB, RESERVE_BYTES, Estimate, ModelShape, TrainSetup, estimate

_TRAINED = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float32"}  # train.precision's rule


def world_size(config: RunConfig) -> int:
    """Training ranks: torchrun's WORLD_SIZE, else `trainer.data_parallel` (Ray), else 1."""
    launched = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return max(launched, config.trainer.data_parallel if config.cluster == "ray" else 1)


def model_shape(model: str) -> ModelShape | None:
    """The shape of `policy.model` from its directory, or None where none is readable without loading."""
    from trialground.policy.tiny import BUNDLED, tiny_model_dir

    path = tiny_model_dir(model) if model in BUNDLED else Path(model).expanduser()
    if not (path / "config.json").is_file():
        return None
    try:
        return ModelShape.from_model_dir(path)
    except (OSError, ValueError):
        return None


def train_setup(config: RunConfig, world: int | None = None) -> TrainSetup:
    """What of `config` decides the trainer's memory on rank 0 (the rank that holds the most)."""
    t, policy = config.trainer, config.policy
    world = world_size(config) if world is None else world
    dtype = _TRAINED[policy.dtype]
    caps = POLICY_BACKENDS.lookup(policy.backend).capabilities
    sharded = t.parallel == "fsdp" and world > 1
    own_copy = sharded or config.loop.mode == "async" or dtype != policy.dtype
    samples = config.loop.batch_tasks * config.loop.samples_per_task
    return TrainSetup(
        parallel=t.parallel,
        world=world,
        dtype=dtype,
        mixed_precision=t.mixed_precision == "bf16",
        cpu_offload=t.cpu_offload,
        lora_rank=t.lora_rank,
        micro_batch_size=t.micro_batch_size,
        seq_tokens=policy.max_context_tokens,
        micro_batches=math.ceil(math.ceil(samples / world) / t.micro_batch_size),
        checkpointing=t.gradient_checkpointing,
        logit_chunk=t.logit_chunk_tokens,
        sampler_dtype=policy.dtype if caps.shares_module and own_copy else None,
        reference=t.kl_coef > 0 and t.lora_rank == 0,
    )


def run_estimate(config: RunConfig) -> Estimate | None:
    """The per-rank estimate of `config`'s trainer, or None when the model's shape is not readable here."""
    shape = model_shape(config.policy.model)
    return None if shape is None else estimate(shape, train_setup(config))


def device_budget(config: RunConfig) -> tuple[int, str] | None:
    """(bytes the trainer may use on one device, where that figure comes from), or None: no check."""
    policy = config.policy
    if config.trainer.device_memory_gib is not None:
        total, source = int(config.trainer.device_memory_gib * GIB), "trainer.device_memory_gib"
    elif policy.device.startswith("cuda"):
        try:
            import torch
        except ImportError:
            return None
        if not torch.cuda.is_available():
            return None
        index = torch.device(policy.device).index or 0
        total, source = (
            torch.cuda.get_device_properties(index).total_memory,
            torch.cuda.get_device_name(index),
        )
    else:
        return None
    sleeps = policy.vllm_sleep and config.loop.mode == "sync"  # the engine frees its share for the update
    if POLICY_BACKENDS.lookup(policy.backend).capabilities.engine_memory and not sleeps:
        engine = policy.gpu_memory_utilization
        return int(total * (1.0 - engine)), f"{source}, less policy.gpu_memory_utilization={engine:g}"
    return total, source


def memory_problems(config: RunConfig) -> list[str]:
    """The run's estimate against its device: one problem when it cannot fit (with the ways out)."""
    budget = device_budget(config)
    if budget is None:
        return []
    est = run_estimate(config)
    if est is None:
        return []
    room, source = budget
    need = est.device + RESERVE_BYTES
    if need <= room:
        return []
    return [
        f"trainer memory: {est.line()}, plus {RESERVE_BYTES / GIB:.0f} GiB kept free, does not fit the "
        f"{room / GIB:.1f} GiB of one device ({source}). Ways out (docs/memory.md): trainer.parallel: fsdp "
        "over more ranks, trainer.cpu_offload, trainer.lora_rank, trainer.gradient_checkpointing, a smaller "
        "trainer.micro_batch_size or policy.max_context_tokens" + "".join(f"; {note}" for note in est.notes)
    ]


# The most resident memory has exceeded the estimate by in docs/memory.md's CPU measurements: a run within
# that margin of its device may still run out, and is told so (not refused)
MEASURED_OVER = 1.6


def memory_cautions(config: RunConfig) -> list[str]:
    """A run that fits by the estimate but not by the margin the measurements leave: one caution."""
    budget = device_budget(config)
    est = None if budget is None else run_estimate(config)
    if budget is None or est is None:
        return []
    room, source = budget
    if est.device + RESERVE_BYTES <= room < est.device * MEASURED_OVER + RESERVE_BYTES:
        return [
            f"trainer memory: the estimate ({est.device / GIB:.1f} GiB a rank) fits the {room / GIB:.1f} GiB "
            f"of one device ({source}), but measured peaks have run up to {MEASURED_OVER:g}x the estimate "
            "(docs/memory.md): the run may still run out of memory"
        ]
    return []


def estimate_line(config: RunConfig) -> str | None:
    """The one line a run prints at its start, or None when there is no estimate."""
    est = run_estimate(config)
    if est is None:
        return None
    setup = train_setup(config)
    mode = f"{setup.parallel} x{setup.world}" if setup.world > 1 else "one process"
    return f"{est.line()}; {mode}, {setup.micro_batch_size} x {setup.seq_tokens} tokens a micro-batch"
