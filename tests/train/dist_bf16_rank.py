"""One rank of the bf16 data-parallel test: `torchrun --nproc_per_node 2 dist_bf16_rank.py MODEL_DIR OUT`.
Rank 0 builds its trainer module as a run does (`trainer_module` on the policy's own bf16 module); rank 1
as `serve_rank` does. Each rank writes the weights and masters it ended with to OUT."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from dist_helpers import PAD, batches, run_config

from trialground.orchestrator.ranks import ranks, serve_rank
from trialground.orchestrator.wiring import trainer_module
from trialground.policy.backends.hf.hf import load_model
from trialground.train.distributed import join_data_parallel
from trialground.train.trainer import Trainer


def main() -> None:
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = run_config(model_dir, dtype="bfloat16")
    with ranks(config) as (config, rank):
        assert rank is not None, "not launched as two ranks"
        if rank.rank > 0:
            serve_rank(rank, config)
            trainer = rank._trainer
        else:
            sampler = load_model(config.policy).eval()  # what HFPolicy holds: policy.dtype
            trainer = Trainer(trainer_module(config, sampler), config.trainer, pad_id=PAD, temperature=1.0)
            assert trainer.model is sampler  # sync mode, same dtype: the sampler's own module is trained
            join_data_parallel(trainer)
            metrics = trainer.step(batches(model_dir)[0])
            (out / "metrics.json").write_text(json.dumps(metrics))
        assert trainer is not None and trainer.masters is not None
        torch.save(
            {"weights": trainer.state_dict(), "masters": trainer.masters.state()}, out / f"rank{rank.rank}.pt"
        )


if __name__ == "__main__":
    main()
