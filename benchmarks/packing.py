"""Tokens trained per second with padding-free packing against padded micro-batches, on the real batches
of a run (its `trajectories/step_N.parquet`, e.g. from `trialground train examples/agent.yaml`).

    python benchmarks/packing.py RUN_DIR [--model tiny-agent] [--repeats 3] [--micro-batch 16]

Each step's trajectories are rebuilt as the trainer receives them (their sampled ids, roles and logprobs;
advantages from the stored column, or +-1 by reward where it is 0 everywhere), and one trainer step runs
on them per mode: `padded` (share_prompt off, each micro-batch padded to its longest sequence),
`shared_prompt` (the default), `packed` (`trainer.packing`). Each mode trains its own copy of the model on
the same batches, the modes taking turns on each batch; the best of `--repeats` timings of each batch
counts. Prints one JSON line per mode:
trained tokens (policy tokens in the loss), token positions run (`train/forward_tokens`), seconds, and
trained tokens per second.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any

import torch


def batches(run: Path) -> list[list[Any]]:
    """One list of `Scored` records per stored step of `run`."""
    import pyarrow.parquet as pq

    from trialground.rollout.trajectory import Trajectory, Turn
    from trialground.train.advantages import with_advantages

    out = []
    for path in sorted((run / "trajectories").glob("step_*.parquet"), key=lambda p: int(p.stem[5:])):
        rows = [r for r in pq.read_table(path).to_pylist() if r.get("error_kind") is None]
        trajs, advs = [], []
        for i, row in enumerate(rows):
            turns = tuple(
                Turn(role=role, token_ids=tuple(ids), logprobs=tuple(lps or ()))
                for role, ids, lps in zip(
                    row["turn_roles"], row["turn_token_ids"], row["turn_logprobs"], strict=True
                )
            )
            trajs.append(
                Trajectory(task_id=row["task_id"], group_id=row["group_id"], sample_index=i, policy_version=0,
                           turns=turns)
            )  # fmt: skip
            advs.append(row.get("advantage") or 0.0)
        if not any(advs):  # a step where every group had one outcome: still a real batch's shapes
            advs = [1.0 if (r.get("reward") or 0.0) > 0 else -1.0 for r in rows]
        out.append(with_advantages(trajs, advs))
    return out


MODES = {
    "padded": {"share_prompt": False},
    "shared_prompt": {"share_prompt": True},
    "packed": {"share_prompt": False, "packing": True},
}


def measure(
    model: torch.nn.Module, steps: list[list[Any]], modes: list[str], repeats: int, micro_batch: int = 16
) -> dict[str, dict[str, float]]:
    """Per mode: trained tokens, positions run, seconds (best of `repeats` per batch) and tokens/s. The
    modes take turns on each batch, so a change in the machine's load reaches all of them alike."""
    from trialground.train.config import TrainerConfig
    from trialground.train.trainer import Trainer

    trainers = {
        m: Trainer(copy.deepcopy(model), TrainerConfig(lr=1e-6, micro_batch_size=micro_batch, **MODES[m]), 0)
        for m in modes
    }
    out = {m: {"trained_tokens": 0.0, "positions": 0.0, "seconds": 0.0} for m in modes}
    for batch in steps:
        best = dict.fromkeys(modes, float("inf"))
        metrics: dict[str, dict[str, float]] = {}
        for _ in range(repeats):
            for mode in modes:
                t0 = time.perf_counter()
                metrics[mode] = trainers[mode].step(batch)
                best[mode] = min(best[mode], time.perf_counter() - t0)
        for mode in modes:
            out[mode]["trained_tokens"] += metrics[mode]["train/tokens"]
            out[mode]["positions"] += metrics[mode]["train/forward_tokens"]
            out[mode]["seconds"] += best[mode]
    for row in out.values():
        row["tokens_per_s"] = row["trained_tokens"] / row["seconds"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--model", default="tiny-agent", help="a policy.model value")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--micro-batch", type=int, default=16, help="trainer.micro_batch_size")
    args = parser.parse_args()
    from trialground.policy.config import PolicyConfig
    from trialground.policy.loading import load_model

    model = load_model(PolicyConfig(model=args.model)).eval()
    steps = batches(args.run)
    for mode, row in measure(model, steps, args.modes.split(","), args.repeats, args.micro_batch).items():
        head = {"mode": mode, "micro_batch": args.micro_batch, "steps": len(steps)}
        print(json.dumps({**head, **row}), flush=True)


if __name__ == "__main__":
    main()
