"""One rank of the FSDP test: `torchrun --nproc_per_node 2 dist_fsdp_rank.py MODEL_DIR OUT [--bf16]`
(bf16: one epoch).
Rank 0 trains the first test batch for one step with `trainer.parallel: fsdp` (fp32: logits 8 positions at
a time, against the one process's single chunk), then gathers the full
weights shard by shard (every rank takes part) and writes them; each rank writes the bytes it held."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from dist_helpers import PAD, batches, run_config

from trialground.orchestrator.ranks import ranks, serve_rank
from trialground.orchestrator.wiring import trainer_module
from trialground.train.checkpoint import load_checkpoint, save_checkpoint
from trialground.train.distributed import join_data_parallel, sharding
from trialground.train.fsdp import is_sharded
from trialground.train.trainer import Trainer


def main() -> None:
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    bf16 = "--bf16" in sys.argv
    config = run_config(model_dir, dtype="bfloat16" if bf16 else "float32", parallel="fsdp")
    if bf16:  # one epoch: the second one's gradient nearly cancels, and bf16 rounding then decides it
        trainer = config.trainer.model_copy(update={"epochs": 1})
        config = config.model_copy(update={"trainer": trainer})
    else:  # the output layer in chunks of 8 positions, each recomputed in the backward, under FSDP
        trainer = config.trainer.model_copy(update={"logit_chunk_tokens": 8})
        config = config.model_copy(update={"trainer": trainer})
    with ranks(config) as (config, rank):
        assert rank is not None, "not launched as two ranks"
        if rank.rank > 0:
            serve_rank(rank, config)
            trainer = rank._trainer
        else:
            trainer = Trainer(
                trainer_module(config, None),
                config.trainer,
                pad_id=PAD,
                temperature=1.0,
                shard=sharding(config.trainer),
            )
            assert is_sharded(trainer.model)
            join_data_parallel(trainer)
            metrics = trainer.step(batches(model_dir)[0])
            (out / "metrics.json").write_text(json.dumps(metrics))
            weights = {}
            for bucket in trainer.weight_buckets(bucket_bytes=4096):  # small buckets: several gathers
                assert sum(t.numel() * t.element_size() for _, t in bucket) <= 4096 or len(bucket) == 1
                weights.update(bucket)
            torch.save(weights, out / "weights.pt")
            if not bf16:  # a sharded checkpoint, then the second batch twice: straight on, and resumed
                save_checkpoint(out / "ckpt", trainer, step=1)
                trainer.step(batches(model_dir)[1])
                straight = trainer.state_dict()
                load_checkpoint(out / "ckpt", trainer)
                trainer.step(batches(model_dir)[1])
                torch.save({"straight": straight, "resumed": trainer.state_dict()}, out / "resume.pt")
        assert trainer is not None
        (out / f"bytes{rank.rank}.json").write_text(json.dumps(trainer.state_bytes))


if __name__ == "__main__":
    main()
