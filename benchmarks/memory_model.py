"""The memory model (trialground.train.memory_model) against what training ranks hold, on CPU; and the table
of what fits on 80 GB GPUs that docs/memory.md shows.

    .venv/bin/python benchmarks/memory_model.py measure [--cases small_ddp_fp32,...]  # 2 gloo ranks
    .venv/bin/python benchmarks/memory_model.py table  # docs/memory.md's table

`measure` saves each case's model (a random Llama of a given shape, or the packaged Gemma 3 270M when it is
converted here), then runs two training steps of the real trainer under `torchrun --nproc_per_node 2` (or in
one process) on a synthetic batch: every sequence `--seq` tokens, one prompt token, the rest trained. Each
rank reports the trainer's own count of its parameter + gradient + optimiser bytes (`Trainer.state_bytes`,
the figure a run prints) and its peak resident memory during the second step above its resident memory once
the libraries are imported and the ranks joined, before the model was loaded (`VmHWM` after resetting it
through /proc/self/clear_refs, less `VmRSS` before), beside
the model's prediction for that rank. Resident memory on CPU includes what the allocator has not returned
and the libraries' own buffers, so it is compared to the prediction's device total loosely.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trialground.orchestrator.memory_check import MEASURED_OVER  # noqa: E402
from trialground.train.config import TrainerConfig  # noqa: E402
from trialground.train.memory_model import (  # noqa: E402
    GIB,
    RESERVE_BYTES,
    ModelShape,
    TrainSetup,
    estimate,
    size_text,
)

# Qwen2.5 base models' config.json sizes (the doc's table; tests check the parameter counts)
_QWEN = {"model_type": "qwen2", "attention_bias": True}
QWEN25: dict[str, dict[str, Any]] = {
    "0.5B": {**_QWEN, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
             "tie_word_embeddings": True},
    "1.5B": {**_QWEN, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
             "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
             "tie_word_embeddings": True},
    "7B": {**_QWEN, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
           "tie_word_embeddings": False},
    "14B": {**_QWEN, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 48,
            "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064,
            "tie_word_embeddings": False},
}  # fmt: skip

# The doc table's modes: (label, setup fields). Every row: micro-batch 1 x 4096 tokens, bf16 compute,
# activation checkpointing, one micro-batch a step.
MODES: list[tuple[str, dict[str, Any]]] = [
    ("DDP fp32", {"parallel": "ddp", "dtype": "float32", "mixed_precision": True}),
    ("DDP bf16", {"parallel": "ddp", "dtype": "bfloat16"}),
    ("FSDP bf16", {"parallel": "fsdp", "dtype": "bfloat16"}),
    ("FSDP bf16 + offload", {"parallel": "fsdp", "dtype": "bfloat16", "cpu_offload": True}),
    ("LoRA r32, bf16 base", {"parallel": "ddp", "dtype": "bfloat16", "lora_rank": 32}),
]
TABLE_SEQ = 4096
LOGIT_CHUNK = TrainerConfig.model_fields["logit_chunk_tokens"].default  # the trainer's default chunk
DEVICE = 80 * 10**9  # "80 GB": an H100's 80 GB (decimal), the memory the check compares against


def table() -> str:
    """docs/memory.md's table: per-rank estimate, and whether it fits 80 GB with the reserve kept free."""
    lines = [
        "| model | mode | 1 GPU: per rank | fits | 8 GPUs: per rank | fits |",
        "|---|---|---|---|---|---|",
    ]
    for name, cfg in QWEN25.items():
        shape = ModelShape.from_hf_config(cfg)
        for label, fields in MODES:
            cells = []
            for world in (1, 8):
                if world == 1 and fields["parallel"] == "fsdp":
                    cells += ["(one process does not shard)", ""]
                    continue
                setup = TrainSetup(
                    world=world, seq_tokens=TABLE_SEQ, checkpointing=True, logit_chunk=LOGIT_CHUNK, **fields
                )
                est = estimate(shape, setup)
                fits = est.device + RESERVE_BYTES <= DEVICE
                tight = est.device * MEASURED_OVER + RESERVE_BYTES > DEVICE  # cautioned by the check
                host = f" (+{size_text(est.host)} host)" if est.host else ""
                cells += [size_text(est.device) + host, ("tight" if tight else "yes") if fits else "**no**"]
            lines.append(f"| {name} ({shape.params / 1e9:.2f}B) | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------- measurement

SMALL = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8,
         "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000,
         "tie_word_embeddings": True}  # fmt: skip

# name -> (model: a config dict or "gemma-3-270m", world, setup fields, micro_batch_size)
CASES: dict[str, tuple[Any, int, dict[str, Any], int]] = {
    "tiny_fsdp_fp32": ("tiny", 2, {"parallel": "fsdp", "dtype": "float32"}, 4),
    "small_one_fp32": (SMALL, 1, {"parallel": "ddp", "dtype": "float32"}, 4),
    "small_ddp_fp32": (SMALL, 2, {"parallel": "ddp", "dtype": "float32"}, 4),
    "small_ddp_bf16": (SMALL, 2, {"parallel": "ddp", "dtype": "bfloat16"}, 4),
    "small_fsdp_fp32": (SMALL, 2, {"parallel": "fsdp", "dtype": "float32"}, 4),
    "small_fsdp_bf16": (SMALL, 2, {"parallel": "fsdp", "dtype": "bfloat16"}, 4),
    "small_fsdp_bf16_accumulate": (SMALL, 2, {"parallel": "fsdp", "dtype": "bfloat16"}, 2),
    "small_ddp_lora": (SMALL, 2, {"parallel": "ddp", "dtype": "bfloat16", "lora_rank": 16}, 4),
    "gemma_fsdp_bf16": ("gemma-3-270m", 2, {"parallel": "fsdp", "dtype": "bfloat16"}, 4),
    "gemma_ddp_lora": ("gemma-3-270m", 2, {"parallel": "ddp", "dtype": "bfloat16", "lora_rank": 16}, 4),
}
SAMPLES = 8  # sequences a step (4 groups of 2), split over the ranks
STEPS = 2  # the second step's peak is measured


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _model_dir(model: Any, out: Path) -> Path:
    if isinstance(model, str):
        from trialground.policy.tiny import resolve_model_dir

        return resolve_model_dir(model)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**model)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    (out / "tokenizer.json").write_text("{}")  # the trainer never reads it
    return out


def worker(case: str, model_dir: Path, seq: int, out: Path) -> None:
    """One rank: the trainer as a run builds it, one step on a synthetic batch; writes its figures."""
    from trialground.orchestrator.ranks import ranks, serve_rank
    from trialground.orchestrator.run_config import RunConfig
    from trialground.orchestrator.wiring import trainer_module
    from trialground.rollout.trajectory import Trajectory, Turn
    from trialground.train.advantages import with_advantages
    from trialground.train.distributed import join_data_parallel, sharding
    from trialground.train.trainer import Trainer
    from trialground.verify.reward.model import Reward

    _model, _world, fields, mbs = CASES[case]
    trainer_cfg = {"micro_batch_size": mbs, "share_prompt": False, "compute_entropy": False}
    trainer_cfg |= {"parallel": fields["parallel"], "lora_rank": fields.get("lora_rank", 0)}
    config = RunConfig.model_validate(
        {
            "policy": {"model": str(model_dir), "dtype": fields["dtype"], "max_context_tokens": seq},
            "trainer": trainer_cfg,
        }
    )
    trajs = []
    for i in range(SAMPLES):
        ids = [(7 * i + j) % 300 + 3 for j in range(seq)]
        turns = (
            Turn(role="prompt", token_ids=(ids[0],)),
            Turn(role="policy", token_ids=tuple(ids[1:]), logprobs=tuple([-3.0] * (seq - 1))),
        )
        trajs.append(
            Trajectory(task_id="t", group_id=f"g{i // 2}", sample_index=i % 2, policy_version=0, turns=turns,
                       reward=Reward(outcome=float(i % 2), gated=False))
        )  # fmt: skip
    batch = with_advantages(trajs, [1.0 if i % 2 else -1.0 for i in range(SAMPLES)])
    import transformers  # noqa: F401  (imported before the baseline: its own memory is not the trainer's)

    def reset_peak_then(step: Any) -> Any:
        def run(self: Trainer, batch: Any) -> Any:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here: this step
            return step(self, batch)

        return run

    # the peak of the last step: AdamW's moments exist from the first step on (it makes them in its step,
    # after the backward), so from the second step on they add to the activations
    Trainer.step = reset_peak_then(Trainer.step)  # type: ignore[method-assign]

    with ranks(config) as (config, dp):
        base_rss = _status("VmRSS")  # joined, libraries loaded, no model yet
        if dp is not None and dp.rank > 0:
            serve_rank(dp, config)
            trainer = dp._trainer
            rank = dp.rank
        else:
            trainer = Trainer(
                trainer_module(config, None), config.trainer, pad_id=0, shard=sharding(config.trainer)
            )
            join_data_parallel(trainer)
            for _ in range(STEPS):
                trainer.step(batch)
            rank = 0
        assert trainer is not None
        peak = _status("VmHWM") - base_rss
        report = {"case": case, "rank": rank, "state": trainer.state_bytes, "peak_rss_above_start": peak}
        (out / f"{case}.{rank}.json").write_text(json.dumps(report))


def measure(cases: list[str], seq: int) -> list[dict[str, Any]]:
    rows = []
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            model, world, fields, mbs = CASES[case]
            model_dir = _model_dir(model, Path(tmp) / case)
            args = [__file__, "worker", case, str(model_dir), str(seq), tmp]
            cmd = [str(torchrun), "--standalone", "--nproc_per_node", str(world), *args] if world > 1 else [
                sys.executable, *args]  # fmt: skip
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                print(f"{case}: rc {proc.returncode}\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            shape = ModelShape.from_model_dir(model_dir)
            per_rank = -(-SAMPLES // world)
            setup = TrainSetup(world=world, micro_batch_size=mbs, seq_tokens=seq - 1,
                               micro_batches=-(-per_rank // mbs), **fields)  # fmt: skip
            est = estimate(shape, setup)
            for rank in range(world):
                got = json.loads((Path(tmp) / f"{case}.{rank}.json").read_text())
                state = sum(got["state"].values())
                rows.append(
                    {"case": case, "rank": rank, "params": shape.params, "state_measured": state,
                     "state_predicted": est.state, "state_ratio": state / est.state,
                     "peak_rss_above_start": got["peak_rss_above_start"], "device_predicted": est.device,
                     "rss_ratio": got["peak_rss_above_start"] / est.device,
                     "predicted_parts": {k: v for k, v in est.__dict__.items() if k != "notes"}}
                )  # fmt: skip
                r = rows[-1]
                peak = size_text(r["peak_rss_above_start"])
                print(
                    f"{case} rank {rank}: state {state} measured / {est.state} predicted "
                    f"({r['state_ratio']:.3f}); peak RSS above start {peak} / "
                    f"predicted total {size_text(est.device)} ({r['rss_ratio']:.2f})",
                    flush=True,
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--cases", default=",".join(CASES))
    m.add_argument("--seq", type=int, default=256, help="tokens of every sequence")
    m.add_argument("--json", type=Path, help="write the rows here")
    sub.add_parser("table")
    w = sub.add_parser("worker")
    w.add_argument("case")
    w.add_argument("model_dir", type=Path)
    w.add_argument("seq", type=int)
    w.add_argument("out", type=Path)
    a = parser.parse_args()
    if a.cmd == "table":
        print(table())
    elif a.cmd == "worker":
        worker(a.case, a.model_dir, a.seq, a.out)
    else:
        rows = measure(a.cases.split(","), a.seq)
        load = os.getloadavg()
        if a.json:
            a.json.write_text(json.dumps({"load": load, "seq": a.seq, "rows": rows}, indent=1))
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {GIB} bytes a GiB")


if __name__ == "__main__":
    main()
