"""Generation speed of HFPolicy's sampling loop vs transformers' `generate()`, side by side.

    .venv/bin/python benchmarks/generation.py [--batch 32] [--tokens 30] [--reps 5] [--threads 1]
        [--model DIR]

GRPO shapes on a ~100M model (8 prompts x 8 samples x 64 tokens; benchmarks/make_model.py makes one):

    .venv/bin/python benchmarks/generation.py --model /tmp/bench-llama --batch 64 --group 8 --tokens 64 \
        --reps 3 --threads 1

Three ways to sample a model (default: the bundled tiny one) at temperature 1 from the same left-padded
codegen prompts, each for exactly `--tokens` new tokens (eos ignored by generate via min_new_tokens, and
by our loop because its eos set is emptied), alternating rep by rep so a busy machine slows all alike:
- `lean`: `sample_batch` through the lean decoder of the model's family (`LlamaDecoder`, `Gemma3Decoder`:
  what `HFPolicy` uses by default, `decode="auto"`);
- `loop`: `sample_batch` through the model's own forward and cache (`decode="transformers"`);
- `generate`: `model.generate()`, asked for its scores too, as a policy needs per-token logprobs.

`--dtype bfloat16` loads the weights in bf16 for all three (tokens are then no longer comparable).
`--device cuda` runs all three on the GPU (timed between synchronisations; the peak GPU memory of each is
reported). `lean` and `loop` draw from the same seeds rep by rep, so their tokens are compared: the line
`tokens lean vs loop` says how many rows of the first timed rep differ (0: exact).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy, sample_batch
from trialground.policy.backends.hf.lean_decoders import decoder_class, refusals
from trialground.policy.backends.hf.llama_decode import LlamaDecoder
from trialground.policy.config import PolicyConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=30, help="new tokens (the most, with --eos)")
    ap.add_argument("--group", type=int, default=1, help="samples per prompt (GRPO's k); 1: all distinct")
    ap.add_argument("--eos", action="store_true", help="rows stop at the model's eos, as in training")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--model", default="tiny", help="'tiny', 'gemma-3-270m', a local HF model directory or a .gguf file"
    )
    ap.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="the weights' dtype for all three (bfloat16: the lean decoder keeps fp32 activations on CPU)",
    )
    ap.add_argument("--device", default="cpu", help="torch device for all three (cpu, cuda, cuda:N)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    policy = HFPolicy(
        PolicyConfig(model=args.model, cpu_threads=args.threads, dtype=args.dtype, device=args.device)
    )
    device = policy.device
    cuda = device.type == "cuda"
    print(f"{type(policy.model).__name__}: {sum(p.numel() for p in policy.model.parameters()) / 1e6:.1f}M")
    tok, model = policy.tokenizer, policy.model
    tasks = generate_codegen_tasks(args.batch // args.group, seed=0, split="eval")
    prompts = [
        policy.encode_chat([{"role": "user", "content": t.prompt}]) for t in tasks for _ in range(args.group)
    ]
    enc = tok.pad({"input_ids": prompts}, return_tensors="pt", padding_side="left").to(device)
    eos_ids = policy.eos_ids if args.eos else [-1]
    kind = decoder_class(model)
    if kind is None:
        raise SystemExit(f"no lean decoder runs {type(model).__name__}: {'; '.join(refusals(model))}")
    decoder = kind(model)
    generated: dict[str, list[int]] = {}
    first_tokens: dict[str, list[list[int]]] = {}  # each way's tokens in its first timed rep

    def ours(name: str, dec: LlamaDecoder | None) -> None:
        rep = len(generated.setdefault(name, []))
        raw = sample_batch(
            model,
            prompts,
            max_new_tokens=args.tokens,
            temperature=1.0,
            eos_ids=eos_ids,
            pad_id=0,
            decoder=dec,
            generator=torch.Generator(device=device).manual_seed(rep),
        )
        generated[name].append(sum(len(t) for t in raw.token_ids))
        if rep == 1:
            first_tokens[name] = [list(t) for t in raw.token_ids]

    def hf_generate() -> None:
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                max_new_tokens=args.tokens,
                min_new_tokens=0 if args.eos else args.tokens,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=tok.pad_token_id,
                eos_token_id=policy.eos_ids if args.eos else None,
            )
        new = out.sequences[:, enc["input_ids"].shape[1] :]
        generated.setdefault("generate", []).append(int((new != tok.pad_token_id).sum()))

    runs = {
        "lean": lambda: ours("lean", decoder),
        "loop": lambda: ours("loop", None),
        "generate": hf_generate,
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    peak_mb: dict[str, float] = {}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(args.reps):
        for name, fn in runs.items():
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize(device)
                peak_mb[name] = max(peak_mb.get(name, 0.0), torch.cuda.max_memory_allocated(device) / 2**20)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    lean_rows, loop_rows = first_tokens.get("lean", []), first_tokens.get("loop", [])
    differing = sum(a != b for a, b in zip(lean_rows, loop_rows, strict=True))
    print(f"{len(prompts)} rows ({len(tasks)} prompts x {args.group}), up to {args.tokens} new tokens")
    for name, sec in med.items():
        mean_tokens = statistics.mean(generated[name][1:])
        print(
            f"{name:9s} median {sec * 1000:7.1f} ms per batch  {mean_tokens:6.0f} tokens per batch  "
            f"{med['generate'] / sec:.2f}x generate()"
            + (f"  peak {peak_mb[name]:,.0f} MiB" if name in peak_mb else "")
        )
    print(f"tokens lean vs loop: {differing} of {len(lean_rows)} rows differ (first timed rep, same seed)")
    if args.json:
        params = sum(p.numel() for p in policy.model.parameters())
        out = {
            "model": args.model,
            "dtype": args.dtype,
            "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if cuda else None,
            "peak_mib": peak_mb,
            "rows_differing_lean_vs_loop": differing,
            "architecture": type(policy.model).__name__,
            "parameters": params,
            "rows": len(prompts),
            "prompts": len(tasks),
            "group": args.group,
            "tokens": args.tokens,
            "eos": args.eos,
            "reps": args.reps,
            "median_s": med,
            "tokens_per_batch": {k: statistics.mean(v[1:]) for k, v in generated.items()},
        }
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
