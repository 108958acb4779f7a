"""Training steps of the trainer on its own: tokens/s per GPU, peak memory against the memory model's
estimate (docs/memory.md), and MFU. What scripts/gpu_smoke.sh measures for FSDP2 and for long context.

    python benchmarks/train_step.py --device cuda --fsdp --seq 4096 --rows 4        # FSDP2, bf16
    python benchmarks/train_step.py --device cuda --seq 16384 --rows 1 --checkpointing  # long context

The model is `--model` (a local directory) or random weights in `--shape` (qwen2.5-0.5b: Qwen2.5-0.5B's
whole shape, its 151,936-token vocabulary included, so the output layer costs what it does; tiny: the bundled
model's, for a rehearsal on the CPU). Every step trains `--rows` sequences of `--seq` tokens (one prompt
token, the rest the policy's, advantages +1/-1). `--fsdp` shards the model with FSDP2 (`fully_shard`,
trialground.train.fsdp) over a process group of this one process (nccl on CUDA, gloo on the CPU): every
layer's weights are gathered and freed as in a sharded run, gradients reduced in fp32, with nothing to
divide among ranks. The first step (AdamW makes its state) is not timed; the peak is that of the timed
steps: torch.cuda.max_memory_allocated on CUDA, the process's peak resident memory above its start on CPU.
MFU is model FLOPs (6 per parameter of every matrix product and per token, plus causal attention's
6 x layers x query width x sequence; activation checkpointing's recomputation not counted) over the
device's dense bf16 peak (`--peak-tflops`, else a table of known GPUs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                     "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 32768},
    "tiny": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 384,
             "tie_word_embeddings": True, "max_position_embeddings": 4096},
}  # fmt: skip
# dense bf16 tensor-core peak, TFLOP/s, by a substring of torch.cuda.get_device_name
PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4, "H800": 989.4, "A100": 312.0, "A800": 312.0, "L40S": 362.1}


def model_flops_per_token(config: dict[str, Any], seq: int) -> float:
    """6 per matrix-product parameter (the decoder layers and the output layer) plus causal attention."""
    from trialground.train.memory_model import ModelShape

    shape = ModelShape.from_hf_config(config)
    matmul = shape.layers * shape.layer_params + shape.vocab * shape.hidden  # the output layer, tied or not
    return 6.0 * matmul + 6.0 * shape.layers * shape.q_width * seq


def peak_tflops(device_name: str, given: float | None) -> float | None:
    if given is not None:
        return given
    return next((v for k, v in PEAK_TFLOPS.items() if k in device_name), None)


def _rss(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _batch(rows: int, seq: int, vocab: int) -> list[Any]:
    from trialground.rollout.trajectory import Trajectory, Turn
    from trialground.train.advantages import with_advantages
    from trialground.verify.reward.model import Reward

    trajs = []
    for i in range(rows):
        ids = [(7 * i + 13 * j) % (vocab - 3) + 3 for j in range(seq)]
        turns = (
            Turn(role="prompt", token_ids=(ids[0],)),
            Turn(role="policy", token_ids=tuple(ids[1:]), logprobs=tuple([-3.0] * (seq - 1))),
        )
        trajs.append(
            Trajectory(task_id="t", group_id=f"g{i // 2}", sample_index=i % 2, policy_version=0, turns=turns,
                       reward=Reward(outcome=float(i % 2), gated=False))
        )  # fmt: skip
    return with_advantages(trajs, [1.0 if i % 2 == 0 else -1.0 for i in range(rows)])


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    from trialground.orchestrator.wiring import cast_parameters
    from trialground.train.config import TrainerConfig
    from trialground.train.fsdp import shard_model
    from trialground.train.memory_model import ModelShape, TrainSetup, estimate, size_text
    from trialground.train.trainer import Trainer

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = getattr(torch, args.dtype)
    start_rss = _rss("VmRSS")
    if args.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    else:
        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(**SHAPES[args.shape])
        model = transformers.AutoModelForCausalLM.from_config(config)
    config_dict = model.config.to_dict()
    params = sum(p.numel() for p in model.parameters())
    model = cast_parameters(model, dtype).to(device).eval()
    cfg = TrainerConfig(
        lr=1e-6,
        micro_batch_size=args.rows,
        compute_entropy=False,
        gradient_checkpointing=args.checkpointing,
        share_prompt=False,
        parallel="fsdp" if args.fsdp else "ddp",
    )
    shard = None
    if args.fsdp:
        import torch.distributed as dist

        if not dist.is_initialized():  # a group of this one process
            dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)
        shard = lambda m: shard_model(m, cfg, torch.bfloat16 if dtype != torch.float32 else dtype)  # noqa: E731
    trainer = Trainer(model, cfg, pad_id=0, shard=shard)
    batch = _batch(args.rows, args.seq, int(config_dict["vocab_size"]))

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    trainer.step(batch)  # AdamW's state is made here: not timed
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        trainer.step(batch)
    sync()
    elapsed = time.perf_counter() - t0
    tokens = args.rows * args.seq * args.steps
    per_s = tokens / elapsed
    peak = torch.cuda.max_memory_allocated(device) if cuda else _rss("VmHWM") - start_rss
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    tflops = peak_tflops(name, args.peak_tflops) if cuda else args.peak_tflops
    flops = model_flops_per_token(config_dict, args.seq) * per_s
    shape = ModelShape.from_hf_config(config_dict, params)
    predicted = estimate(
        shape,
        TrainSetup(dtype=args.dtype, micro_batch_size=args.rows, seq_tokens=args.seq - 1,
                   checkpointing=args.checkpointing),
    ).device  # fmt: skip
    out = {
        "label": args.label,
        "device": name,
        "fsdp": args.fsdp,
        "params": params,
        "rows": args.rows,
        "seq": args.seq,
        "tokens_per_s_per_gpu": per_s,
        "peak_bytes": peak,
        "estimate_bytes": predicted,
        "model_tflops": flops / 1e12,
        "mfu": None if tflops is None else flops / (tflops * 1e12),
    }
    mfu = "n/a (no peak known)" if out["mfu"] is None else f"{100 * out['mfu']:.1f} % of {tflops:g} TFLOP/s"
    print(
        f"{args.label}: {args.rows} x {args.seq} tokens, {params / 1e6:.0f}M parameters, {args.dtype}"
        f"{', FSDP2' if args.fsdp else ''}{', checkpointing' if args.checkpointing else ''} on {name}: "
        f"{per_s:,.0f} tokens/s/GPU, peak {size_text(peak)} (estimate {size_text(predicted)}), MFU {mfu}",
        flush=True,
    )
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", help="a local model directory (default: random weights in --shape)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--seq", type=int, default=4096, help="tokens of every sequence")
    ap.add_argument("--rows", type=int, default=1, help="sequences a step (one micro-batch)")
    ap.add_argument("--steps", type=int, default=2, help="timed steps, after one untimed")
    ap.add_argument("--fsdp", action="store_true", help="shard with FSDP2 over this one process")
    ap.add_argument("--checkpointing", action="store_true", help="activation checkpointing per layer")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak")
    ap.add_argument("--label", default="train_step")
    ap.add_argument("--json", type=Path, help="append the result here as one JSON line")
    return ap


def main() -> None:
    args = parser().parse_args()
    out = run(args)
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
