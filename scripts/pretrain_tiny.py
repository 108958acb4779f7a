"""Pre-train the bundled tiny model on the codegen family and save it to trialground/policy/tiny_model/.

    .venv/bin/python scripts/pretrain_tiny.py            # ~5-10 min on 2 CPU cores

Recipe: fit the tokenizer (trialground.policy.tiny) on generated train-split prompts and solutions, then
train a small Llama on (prompt -> solution<|end|>) pairs with the loss on the solution tokens only. A
fraction `--noise` of the targets has one digit corrupted, so the model is never sure of its constants.
Pre-training deliberately stops early: every `--eval-every` steps the greedy pass@1 on held-out
(eval-split) instances is measured by running the generated code against the hidden cases in a separate
Python process, and training stops at the first checkpoint at or above `--target` pass@1, where sampling
at temperature 1 still finds answers that greedy decoding misses — the room RL has to improve.
The selection instances come from a different seed than the quickstart's eval tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from trialground.families.codegen.source import Instance, sample_instances
from trialground.policy.backends.hf.hf import sample_batch
from trialground.policy.tiny import build_tokenizer, tiny_llama_config, tiny_model_dir

# Runs each candidate on its cases in a child process; a bad candidate (loop, crash) fails alone.
CHECKER = r"""
import json, signal, sys
def alarm(*_): raise TimeoutError()
signal.signal(signal.SIGALRM, alarm)
out = []
for code, cases in json.load(sys.stdin):
    ok = True
    try:
        signal.alarm(1)
        ns = {}
        exec(code, ns)
        ok = all(ns["f"](x) == y for x, y in cases)
    except BaseException:
        ok = False
    finally:
        signal.alarm(0)
    out.append(ok)
print(json.dumps(out))
"""


def local_check(codes: list[str], instances: list[Instance]) -> list[bool]:
    """Whether each code passes its instance's hidden cases (a fast stand-in for the sandboxed grader)."""
    payload = json.dumps(
        [[c, [list(case) for case in inst.cases]] for c, inst in zip(codes, instances, strict=True)]
    )
    res = subprocess.run(
        [sys.executable, "-I", "-c", CHECKER], input=payload, capture_output=True, text=True, timeout=600
    )
    return json.loads(res.stdout)


def corrupt(solution: str, rng: random.Random) -> str:
    """One digit of the solution replaced by another: label noise."""
    spots = [i for i, ch in enumerate(solution) if ch.isdigit()]
    if not spots:
        return solution
    i = rng.choice(spots)
    return solution[:i] + rng.choice([d for d in "123456789" if d != solution[i]]) + solution[i + 1 :]


def encode_pairs(tok, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    out = []
    for prompt, solution in pairs:
        msgs = [{"role": "user", "content": prompt}]
        p = list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False))
        out.append((p, [*tok.encode(solution, add_special_tokens=False), tok.eos_token_id]))
    return out


def batch_tensors(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(c) for p, c in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)  # loss on the solution only
    for i, (p, c) in enumerate(examples):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
    return ids, labels


def pass_rates(model, tok, encoded, instances, *, samples: int, seed: int) -> dict[str, float]:
    """Greedy pass@1, and with `samples` > 0 sampled pass@1 and pass@k (k = samples) at temperature 1."""
    model.eval()
    prompts = [p for p, _ in encoded]
    kw = {"max_new_tokens": 48, "eos_ids": [tok.eos_token_id], "pad_id": tok.pad_token_id}
    greedy = sample_batch(model, prompts, temperature=0.0, **kw)
    texts = [tok.decode(ids, skip_special_tokens=True) for ids in greedy.token_ids]
    result = {"greedy_pass@1": sum(local_check(texts, instances)) / len(instances)}
    if samples:
        gen = torch.Generator().manual_seed(seed)
        rep_prompts = [p for p in prompts for _ in range(samples)]
        sampled = sample_batch(model, rep_prompts, temperature=1.0, generator=gen, **kw)
        texts = [tok.decode(ids, skip_special_tokens=True) for ids in sampled.token_ids]
        ok = local_check(texts, [inst for inst in instances for _ in range(samples)])
        per_task = [ok[i * samples : (i + 1) * samples] for i in range(len(instances))]
        result["sampled_pass@1"] = sum(ok) / len(ok)
        result[f"pass@{samples}"] = sum(any(r) for r in per_task) / len(instances)
    model.train()
    return result


def evaluate(model_dir: str, n: int, samples: int, seed: int) -> None:
    """Pass rates of a saved model on the eval split, graded by the real sandboxed grader."""
    import asyncio

    from trialground.families.codegen.source import generate_codegen_tasks
    from trialground.monitor.quality import measure_pass_rates
    from trialground.policy.backends.hf.hf import HFPolicy
    from trialground.policy.config import PolicyConfig
    from trialground.sandbox.base import SandboxConfig
    from trialground.verify.grader import make_grader

    policy = HFPolicy(PolicyConfig(model=model_dir))
    tasks = generate_codegen_tasks(n, seed=seed, split="eval")

    async def run() -> None:
        grader = make_grader(SandboxConfig())
        try:
            t0 = time.time()
            rates = await measure_pass_rates(policy, tasks, grader, samples=samples, seed=seed)
            print(json.dumps({**vars(rates), "eval_seed": seed, "seconds": round(time.time() - t0, 1)}))
        finally:
            await grader.close()

    asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=tiny_model_dir())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-instances", type=int, default=12000)
    ap.add_argument("--vocab", type=int, default=384)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--noise", type=float, default=0.1, help="fraction of targets with one corrupted digit")
    ap.add_argument("--max-steps", type=int, default=3000)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-n", type=int, default=192, help="held-out instances used to decide when to stop")
    ap.add_argument("--target", type=float, default=0.33, help="stop at the first greedy pass@1 >= this")
    ap.add_argument(
        "--fine-from", type=float, default=0.08, help="evaluate every --fine-every steps from here"
    )
    ap.add_argument("--fine-every", type=int, default=5)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core box)"
    )
    ap.add_argument("--evaluate", metavar="MODEL", help="only grade MODEL ('tiny' or a dir) on eval tasks")
    ap.add_argument("--eval-tasks", type=int, default=128, help="--evaluate: eval-split tasks (seed --seed)")
    ap.add_argument("--samples", type=int, default=8, help="--evaluate: draws per task at temperature 1")
    args = ap.parse_args()
    os.nice(10)  # the CPU is shared
    torch.set_num_threads(args.threads)
    if args.evaluate:
        evaluate(args.evaluate, args.eval_tasks, args.samples, args.seed)
        return
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.time()

    train = sample_instances(args.train_instances, seed=1000 + args.seed, split="train")
    held = sample_instances(args.eval_n, seed=777, split="eval")
    tok = build_tokenizer((s for inst in train for s in (inst.prompt, inst.solution)), args.vocab)
    pairs = [(i.prompt, corrupt(i.solution, rng) if rng.random() < args.noise else i.solution) for i in train]
    data = encode_pairs(tok, pairs)
    held_enc = encode_pairs(tok, [(i.prompt, i.solution) for i in held])
    lens = [len(c) for _, c in data]
    mean_prompt = sum(len(p) for p, _ in data) / len(data)
    print(
        f"data {time.time() - t0:.0f}s: {len(data)} pairs, prompt ~{mean_prompt:.0f} tokens, "
        f"solution ~{sum(lens) / len(lens):.0f} (max {max(lens)})",
        flush=True,
    )

    config = tiny_llama_config(len(tok), hidden=args.hidden, layers=args.layers)
    config.eos_token_id = tok.eos_token_id
    config.pad_token_id = tok.pad_token_id
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
    model.train()
    order: list[int] = []
    step = 0
    stats: dict[str, float] = {}
    prev: tuple[int, dict[str, torch.Tensor], float] | None = None  # (step, weights, greedy pass@1)
    for step in range(1, args.max_steps + 1):
        if len(order) < args.batch:
            order = list(range(len(data)))
            rng.shuffle(order)
        ids, labels = batch_tensors([data[order.pop()] for _ in range(args.batch)], tok.pad_token_id)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)
        every = args.eval_every if stats.get("greedy_pass@1", 0.0) < args.fine_from else args.fine_every
        if step % every == 0:
            stats = pass_rates(model, tok, held_enc, held, samples=0, seed=0)
            print(f"step {step} loss {loss.item():.3f} {stats} {time.time() - t0:.0f}s", flush=True)
            score = stats["greedy_pass@1"]
            if score >= args.target:
                # the climb is steep: keep whichever of this and the previous checkpoint is closer to target
                if prev is not None and args.target - prev[2] < score - args.target:
                    step, state, _ = prev
                    model.load_state_dict(state)
                    print(f"using the step-{step} checkpoint, closer to the target", flush=True)
                break
            prev = (step, {k: v.clone() for k, v in model.state_dict().items()}, score)
    stats = pass_rates(model, tok, held_enc, held, samples=8, seed=1)
    print(f"final step {step}: {stats}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    meta = {
        "steps": step,
        "params": n_params,
        "seconds": round(time.time() - t0, 1),
        "args": {
            k: str(v) for k, v in vars(args).items() if k not in ("out", "evaluate", "eval_tasks", "samples")
        },
        **stats,
    }
    (args.out / "pretrain_stats.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"saved to {args.out} in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
