"""One GRPO update step of `Trainer` on a model, full fine-tuning or LoRA, fp32 or bf16, side by side.

    .venv/bin/python benchmarks/update_step.py --model gemma-3-270m --tasks 8 --k 8 --prompt 120 \
        --completion 8 --reps 2 --ways full-fp32 lora-fp32 full-bf16

A GRPO batch of `--tasks` prompts x `--k` completions (prompt and completion token ids drawn at random
from the vocabulary's first 20,000 ids, or all of a smaller one; half the group at advantage +1 and half at
-1, so every sequence enters the loss), given to `Trainer.step` as the loop gives it: trajectories with
their sampler logprobs, scored. Each way builds its own trainer on a freshly loaded policy model (LoRA wraps
it with peft; bf16 loads the weights in bf16 and trains them through fp32 masters under bf16 autocast, what
`policy.dtype: bfloat16` with `trainer.mixed_precision: bf16` builds), runs one warm-up step, then `--reps`
timed steps; the ways alternate rep by rep so a busy machine slows all alike. Reported: the median seconds
per step and the trainer's own timings (`train/*_s`) of the last rep.

Run outside the `trialground` command, set `OMP_WAIT_POLICY=PASSIVE` yourself on a shared machine (the
command sets it; the tiny model's step measured 0.02 s with it against 8-11 s spinning at load 14-44).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.config import PolicyConfig
from trialground.rollout.trajectory import Trajectory, Turn
from trialground.train.advantages import Scored
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer

WAYS: dict[str, dict[str, Any]] = {
    "full-fp32": {"dtype": "float32", "lora_rank": 0, "mixed_precision": "off"},
    "lora-fp32": {"dtype": "float32", "lora_rank": 16, "mixed_precision": "off"},
    "full-bf16": {"dtype": "bfloat16", "lora_rank": 0, "mixed_precision": "bf16"},
    "lora-bf16": {"dtype": "bfloat16", "lora_rank": 16, "mixed_precision": "bf16"},
}


def batch(tasks: int, k: int, prompt: int, completion: int, vocab: int, seed: int) -> list[Scored]:
    gen = torch.Generator().manual_seed(seed)
    top = min(vocab, 20_000)
    out = []
    for t in range(tasks):
        prompt_ids = tuple(torch.randint(2, top, (prompt,), generator=gen).tolist())
        for i in range(k):
            ids = tuple(torch.randint(2, top, (completion,), generator=gen).tolist())
            traj = Trajectory(
                task_id=f"t{t}",
                group_id=f"g{t}",
                sample_index=i,
                policy_version=0,
                turns=(
                    Turn(role="prompt", token_ids=prompt_ids),
                    Turn(role="policy", token_ids=ids, logprobs=(-9.0,) * completion, version=0),
                ),
            )
            advantage = 1.0 if i % 2 == 0 else -1.0
            out.append(Scored(trajectory=traj, reward=float(i % 2 == 0), advantage=advantage))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=120, help="prompt tokens")
    ap.add_argument("--completion", type=int, default=8, help="completion tokens")
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ways", nargs="+", default=["full-fp32", "lora-fp32"], choices=sorted(WAYS))
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    trainers: dict[str, Trainer] = {}
    scored: list[Scored] = []
    for way in args.ways:
        spec = WAYS[way]
        policy = HFPolicy(PolicyConfig(model=args.model, dtype=spec["dtype"], cpu_threads=args.threads))
        if not scored:  # the same batch for every way
            vocab = policy.model.get_input_embeddings().weight.shape[0]
            scored = batch(args.tasks, args.k, args.prompt, args.completion, vocab, seed=0)
        trainers[way] = Trainer(
            policy.model,
            TrainerConfig(
                lr=1e-6,
                lora_rank=spec["lora_rank"],
                lora_alpha=2 * max(spec["lora_rank"], 1),
                mixed_precision=spec["mixed_precision"],
                micro_batch_size=args.micro_batch,
            ),
            policy.tokenizer.pad_token_id,
            temperature=1.0,
        )
        trainers[way].step(scored)  # warm-up: allocations, optimiser state
    times: dict[str, list[float]] = {way: [] for way in args.ways}
    phases: dict[str, dict[str, float]] = {}
    for _ in range(args.reps):
        for way, trainer in trainers.items():
            t0 = time.perf_counter()
            metrics = trainer.step(scored)
            times[way].append(time.perf_counter() - t0)
            phases[way] = {k: round(v, 3) for k, v in metrics.items() if k.endswith("_s")}
    n_seq = args.tasks * args.k
    print(f"{n_seq} sequences ({args.tasks} prompts x {args.k}), {args.prompt} + {args.completion} tokens")
    for way in args.ways:
        med = statistics.median(times[way])
        print(f"{way:10s} median {med:7.2f} s per step  {phases[way]}")
    if args.json:
        out = {
            "model": args.model,
            "shape": vars(args) | {"json": None},
            "median_s": {w: statistics.median(v) for w, v in times.items()},
            "times_s": times,
            "phases": phases,
        }
        args.json.write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
