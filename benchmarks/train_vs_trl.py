"""Our trainer vs TRL's GRPOTrainer, side by side in one run, on the same problem.

Same: the bundled tiny model (both start from its weights), the codegen task family (the same tasks in the
same order: step s uses tasks[s*T:(s+1)*T]), batch shape (T tasks x k samples), max completion length,
temperature, learning rate, clip range (0.2 / 0.28), token-level loss, no KL, and the same sandboxed
reward: our `Grader` grading every completion in a fresh bubblewrap sandbox (passed to TRL through
`trialground.integrations.trl.reward_function`, which grades the batch concurrently just as our rollouts
do). TRL gets its best CPU settings: bf16=False (True with --bf16), use_cpu=True,
gradient_checkpointing=False (TRL's default is on), no reference model (beta=0), one generation per
optimiser step. Both run on one torch thread (the policy's `cpu_threads: 1`, process-wide; `--threads`).
`--micro-batch M` cuts each step's batch into micro-batches of M sequences in both systems (ours:
`trainer.micro_batch_size`; TRL: `per_device_train_batch_size` M with `gradient_accumulation_steps` and
`steps_per_generation` T*k/M, so it still generates the step's batch in one call and steps once).

Reported: samples/s over the N training steps (generation + grading + update), the mean training reward
over the last third of the steps, and held-out greedy pass@1 of both final models (same evaluator).

    .venv/bin/python benchmarks/train_vs_trl.py --steps 20 --tasks 4 --k 8

At a realistic size (`--model`: a ~100M model from benchmarks/make_model.py; GRPO shapes 8 prompts x 8
samples x 64 tokens). A randomly initialised model solves nothing, so every advantage is 0: `--full-batch`
makes our trainer run the forward and backward of every sequence anyway, as TRL does (by default it skips
sequences whose gradient is exactly zero):

    .venv/bin/python benchmarks/train_vs_trl.py --model /tmp/bench-llama --steps 3 --tasks 8 --k 8 \
        --max-new-tokens 64 --eval-tasks 8 --full-batch
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from trialground.envs.base import EpisodeEnd
from trialground.envs.single_turn import SingleTurnEnv
from trialground.envs.text import extract_code
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.hugepages import heap_pages, reexec_with_hugepages
from trialground.integrations.trl import reward_function
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.tiny import resolve_model_dir
from trialground.rollout.agent import rollout_group
from trialground.rollout.generation_batcher import GroupBatcher
from trialground.rollout.scoring import score_all, score_end
from trialground.sandbox.base import Limits, SandboxConfig
from trialground.tasks.model import Task
from trialground.train.advantages import compute_advantages, with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader, make_grader
from trialground.verify.reward.rubric import Rubric

RUBRIC = Rubric.from_config(RewardConfig())
SANDBOX = SandboxConfig(limits=Limits(wall_s=5, cpu_s=5, memory_mb=256, pids=32))


async def grade_all(grader: Grader, tasks: list[Task], completions: list[str]) -> list[float]:
    """The shared reward: each completion's extracted program against its task's hidden tests."""
    results = await asyncio.gather(
        *(grader.grade(t, extract_code(c)) for t, c in zip(tasks, completions, strict=True))
    )
    return [
        score_end(RUBRIC, EpisodeEnd(finish_reason="submitted", graded=g)).total  # type: ignore[union-attr]
        if g.verdict.error is None
        else 0.0
        for g in results
    ]


async def ours(args: argparse.Namespace, tasks: list[Task]) -> tuple[torch.nn.Module, dict[str, Any]]:
    # --bf16: the trainer updates the sampler's own bf16 weights through fp32 masters, under bf16 autocast
    # (what a run with `policy.dtype: bfloat16` and `trainer.mixed_precision: bf16` builds)
    policy = HFPolicy(
        PolicyConfig(
            model=args.model,
            dtype="bfloat16" if args.bf16 else "float32",
            stream=args.stream,
            cpu_threads=args.threads,
        )
    )
    trainer = Trainer(
        policy.model,
        TrainerConfig(
            mixed_precision="bf16" if args.bf16 else "off",
            lr=args.lr,
            clip_low=0.2,
            clip_high=0.28,
            micro_batch_size=micro_batch(args),
            skip_zero_advantage=not args.full_batch,
        ),
        policy.tokenizer.pad_token_id,
        temperature=1.0,
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    grader = make_grader(SANDBOX)
    rewards: list[float] = []
    reward_s = 0.0
    marks: list[float] = []
    lengths: list[int] = []  # sampled tokens per completion
    split = {"generation_s": 0.0, "update_s": 0.0, "weight_load_s": 0.0}
    trained = 0  # sequences that entered a loss, over all steps
    t0 = time.perf_counter()
    for step in range(args.steps):
        t_roll = time.perf_counter()
        batch = tasks[step * args.tasks : (step + 1) * args.tasks]
        shared = GroupBatcher(policy, live=len(batch) * args.k, window_s=0.05)  # one generate call per step
        groups = await asyncio.gather(
            *(
                rollout_group(
                    shared,
                    lambda: SingleTurnEnv(grader),
                    task,
                    args.k,
                    params=params,
                    group_id=f"{step}-{i}",
                    max_context_tokens=512,
                )
                for i, task in enumerate(batch)
            )
        )
        # the reward seam the training loop uses: a rollout ends with a verdict, `score_all` gives its reward
        flat = [t for g in score_all(RUBRIC, groups) for t in g]
        # episodes grade concurrently: the step's grading time is its slowest episode's env time; the
        # rest of the rollouts' wall time is the one batched generate call (and the prompts' encoding)
        grading_s = max(t.timings.get("env_s", 0.0) for t in flat)
        reward_s += grading_s
        t_update = time.perf_counter()
        split["generation_s"] += t_update - t_roll - grading_s
        metrics = trainer.step(with_advantages(flat, compute_advantages(flat, "grpo")))
        trained += int(metrics.get("train/sequences", 0))
        t_load = time.perf_counter()
        split["update_s"] += t_load - t_update
        policy.load_weights(trainer.state_dict(), trainer.version)
        marks.append(time.perf_counter())
        split["weight_load_s"] += marks[-1] - t_load
        lengths += [sum(t.completion()[1]) for t in flat]
        step_rewards = [t.reward.total if t.reward else 0.0 for t in flat]
        rewards.append(sum(step_rewards) / len(step_rewards))
        print(f"  ours step {step + 1}: reward {rewards[-1]:.3f}", flush=True)
    seconds = time.perf_counter() - t0
    await grader.close()
    if args.full_batch and trained != args.steps * args.tasks * args.k:
        raise SystemExit(f"--full-batch: {trained} sequences trained, not {args.steps * args.tasks * args.k}")
    if not trained and any(rewards):
        raise SystemExit("rewards were earned but no sequence was trained: the comparison would be void")
    mean_len = sum(lengths) / max(1, len(lengths))
    return trainer.base_model, {
        "seconds": seconds,
        "rewards": rewards,
        "reward_s": reward_s,
        "marks": marks,
        "completion_tokens_mean": mean_len,
        "split": split,
        "trained_sequences": trained,
        "precision": "bf16" if args.bf16 else "no",
    }


def micro_batch(args: argparse.Namespace) -> int:
    """Sequences per forward/backward in both systems: --micro-batch, or the whole step's batch."""
    size = args.micro_batch or args.tasks * args.k
    if (args.tasks * args.k) % size:
        raise SystemExit(f"--micro-batch {size} must divide the step's {args.tasks * args.k} sequences")
    return int(size)


def trl(args: argparse.Namespace, tasks: list[Task]) -> tuple[Any, dict[str, Any]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model_dir = resolve_model_dir(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # the tasks in their order (step s uses tasks[s*T:(s+1)*T], as ours does)
    rows = [{"prompt": [{"role": "user", "content": t.prompt}], "task_id": t.id} for t in tasks]
    rewards: list[float] = []
    reward_s = [0.0]
    marks: list[float] = []  # one per reward call = one per step (same phase of the step as ours)
    # trialground's TRL reward function: one grader on a persistent loop, the batch graded concurrently
    grading = reward_function(tasks, sandbox=SANDBOX)

    def sandboxed_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        t0 = time.perf_counter()
        values = grading(prompts, completions, **kwargs)
        reward_s[0] += time.perf_counter() - t0
        marks.append(time.perf_counter())
        graded = [v for v in values if v is not None]  # None: left out (infrastructure failure)
        rewards.append(sum(graded) / max(len(graded), 1))
        print(f"  trl  step {len(rewards)}: reward {rewards[-1]:.3f}", flush=True)
        return values

    config = GRPOConfig(
        output_dir="/tmp/trl_bench",
        max_steps=args.steps,
        # one optimiser step per step's batch, cut into micro-batches of --micro-batch sequences (gradient
        # accumulation); the whole batch is generated in one call, as ours is
        per_device_train_batch_size=micro_batch(args),
        gradient_accumulation_steps=args.tasks * args.k // micro_batch(args),
        num_generations=args.k,
        steps_per_generation=args.tasks * args.k // micro_batch(args),
        num_iterations=1,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        bf16=args.bf16,
        use_cpu=True,
        gradient_checkpointing=False,  # TRL defaults it on: pure recompute cost for a model this small
        shuffle_dataset=False,
        dataloader_num_workers=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[sandboxed_reward],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    # where TRL's time goes: its generation call, the whole generate-and-score phase (generation, the
    # reward call, advantages, bookkeeping) and the loss's forward + backward (`training_step`); the
    # optimiser step and the rest of the HF training loop are what remains of the wall time
    timed = {"_generate": 0.0, "_generate_and_score_completions": 0.0, "training_step": 0.0}
    for name in timed:
        original = getattr(trainer, name)

        def wrapper(*a: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return _original(*a, **kw)
            finally:
                timed[_name] += time.perf_counter() - t

        setattr(trainer, name, wrapper)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    grading.close()
    logged = [
        float(h["completions/mean_length"])
        for h in trainer.state.log_history
        if "completions/mean_length" in h
    ]
    return model, {
        "seconds": seconds,
        "precision": trainer.accelerator.mixed_precision,  # what accelerate ran TRL's forwards under
        "rewards": rewards,
        "reward_s": reward_s[0],
        "marks": marks,
        "completion_tokens_mean": sum(logged) / max(1, len(logged)),
        "split": {
            "generation_s": timed["_generate"],
            "scoring_other_s": timed["_generate_and_score_completions"] - timed["_generate"] - reward_s[0],
            # HF's training_step prepares its inputs (TRL generates and scores there) before the loss
            "update_s": timed["training_step"] - timed["_generate_and_score_completions"],
        },
    }


async def held_out_pass1(policy: HFPolicy, tasks: list[Task], max_new_tokens: int) -> float:
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    prompts = [policy.encode_chat([{"role": "user", "content": t.prompt}]) for t in tasks]
    gens = await policy.generate(prompts, params)
    grader = make_grader(SANDBOX)
    try:
        values = await grade_all(grader, tasks, [g.text for g in gens])
    finally:
        await grader.close()
    return sum(v > 0 for v in values) / len(values)


def summary(name: str, res: dict[str, Any], samples: int, pass1: float, per_step: int) -> dict[str, Any]:
    tail = res["rewards"][-max(1, len(res["rewards"]) // 3) :]
    # step-to-step intervals (the first step's warm-up excluded); the median resists load spikes from
    # other jobs on a shared machine
    gaps = sorted(b - a for a, b in zip(res["marks"], res["marks"][1:], strict=False))
    median = gaps[len(gaps) // 2] if gaps else float("nan")
    return {
        "system": name,
        "seconds": round(res["seconds"], 1),
        "samples_per_s": round(samples / res["seconds"], 2),
        "median_step_s": round(median, 2),
        "samples_per_s_median_step": round(per_step / median, 2),
        "reward_s": round(res["reward_s"], 1),
        "samples_per_s_excluding_reward": round(samples / (res["seconds"] - res["reward_s"]), 2),
        "reward_first_step": round(res["rewards"][0], 3),
        "reward_last_third": round(sum(tail) / len(tail), 3),
        "held_out_pass@1": round(pass1, 3),
        "completion_tokens_mean": round(res["completion_tokens_mean"], 1),
        "trained_sequences": res.get("trained_sequences"),
        "reward_calls": len(res["marks"]),  # one per step: the step's batch generated and graded at once
        "precision": res.get("precision"),
        # seconds over all steps: generation, grading (`reward_s`), update (forward + backward; ours
        # includes the optimiser step), and the rest of the wall time (start-up, optimiser step for TRL,
        # weight push for ours, bookkeeping)
        "split_s": {
            **{k: round(v, 2) for k, v in res["split"].items()},
            "reward_s": round(res["reward_s"], 2),
            "rest_s": round(res["seconds"] - res["reward_s"] - sum(res["split"].values()), 2),
        },
    }


def separately(name: str) -> tuple[dict[str, Any], float]:
    """Run one system (`--only NAME`) in a fresh child process with this command's other arguments; return
    its result row and the held-out pass@1 before training that it measured. The first update of a ~100M
    model touches gigabytes of fresh memory; in one process the system that runs second reuses what the
    first one's allocator kept."""
    argv, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg == "--separate":
            skip = False
            continue
        if arg in ("--json", "--only"):
            skip = True
            continue
        if not arg.startswith(("--json=", "--only=")):
            argv.append(arg)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--only", name, "--json", str(out)]
        subprocess.run(cmd, check=True)
        result = json.loads(out.read_text())
    (row,) = result["results"]
    return dict(row), float(result["pass@1_before"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tasks", type=int, default=4, help="tasks per step (T)")
    ap.add_argument("--k", type=int, default=8, help="samples per task")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="sequences per forward/backward in both systems (gradient accumulation over the step's "
        "batch; TRL: per_device_train_batch_size, gradient_accumulation_steps = steps_per_generation); "
        "default: the whole batch at once",
    )
    ap.add_argument("--eval-tasks", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="tiny", help="'tiny' or a local HF model directory")
    ap.add_argument(
        "--full-batch", action="store_true", help="ours: forward/backward every sequence, advantage 0 too"
    )
    ap.add_argument(
        "--bf16",
        action="store_true",
        help="both in bf16: TRL bf16=True (autocast); ours a bf16 sampler, bf16 autocast over fp32 weights",
    )
    ap.add_argument(
        "--stream", action="store_true", help="ours: policy.stream (episodes get their rows as they finish)"
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads, process-wide, for both systems"
    )
    ap.add_argument("--only", choices=["ours", "trl"], default=None)
    ap.add_argument("--ours-first", action="store_true", help="run ours before TRL (check order effects)")
    ap.add_argument(
        "--separate",
        action="store_true",
        help="run each system in a fresh process of its own (neither reuses memory the other faulted in)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    micro_batch(args)  # a --micro-batch that does not divide the step's batch stops here, before any work
    # both systems get what `trialground train` gives its runs (children inherit it): 2 MB pages for the
    # heap where the machine allows it (trialground/hugepages.py); TRIALGROUND_HUGEPAGES=0 turns it off
    reexec_with_hugepages()
    print(f"heap pages: {heap_pages()}", flush=True)
    tasks = generate_codegen_tasks(args.steps * args.tasks, seed=args.seed + 1, split="train")
    evals = generate_codegen_tasks(args.eval_tasks, seed=args.seed + 2, split="eval")
    samples = args.steps * args.tasks * args.k
    per_step = args.tasks * args.k
    order = ["ours", "trl"] if args.ours_first else ["trl", "ours"]
    if args.separate and args.only is None:  # the children do all the work
        results = {name: separately(name) for name in order}
        report(args, {name: row for name, (row, _) in results.items()}, results[order[0]][1])
        return
    base = HFPolicy(PolicyConfig(model=args.model, cpu_threads=args.threads))  # sets the process's threads
    start = asyncio.run(held_out_pass1(base, evals, args.max_new_tokens))
    print(f"held-out greedy pass@1 before training: {start:.3f}", flush=True)

    def run_trl() -> dict[str, Any]:
        torch.manual_seed(args.seed)
        print("TRL GRPOTrainer:", flush=True)
        model, res = trl(args, tasks)
        base.load_weights(model.state_dict(), 1)
        return summary(
            "trl", res, samples, asyncio.run(held_out_pass1(base, evals, args.max_new_tokens)), per_step
        )

    def run_ours() -> dict[str, Any]:
        torch.manual_seed(args.seed)
        print("trialground Trainer:", flush=True)
        model, res = asyncio.run(ours(args, tasks))
        base.load_weights(model.state_dict(), 1)  # both systems' final weights: the same fp32 evaluator
        pass1 = asyncio.run(held_out_pass1(base, evals, args.max_new_tokens))
        return summary("trialground", res, samples, pass1, per_step)

    runs = {"trl": run_trl, "ours": run_ours}
    report(args, {name: runs[name]() for name in order if args.only in (None, name)}, start)


def report(args: argparse.Namespace, rows: dict[str, dict[str, Any]], start: float) -> None:
    """Print (and with --json write) the result rows, the throughput ratio and each system's time split."""
    out = {
        "args": vars(args),
        "heap_pages": heap_pages(),
        "pass@1_before": start,
        "results": list(rows.values()),
    }
    print(json.dumps(out, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    if len(rows) == 2:
        ratio = rows["ours"]["samples_per_s"] / rows["trl"]["samples_per_s"]
        median_ratio = rows["ours"]["samples_per_s_median_step"] / rows["trl"]["samples_per_s_median_step"]
        print(f"throughput ratio trialground/trl: {ratio:.2f}x overall, {median_ratio:.2f}x by median step")
    for row in rows.values():
        parts = ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in row["split_s"].items())
        print(f"{row['system']}: where the {row['seconds']} s went: {parts}")


if __name__ == "__main__":
    main()
