"""One rank of the data-parallel step test: `torchrun --nproc_per_node 2 dist_rank.py MODEL_DIR OUT`, or
`python dist_rank.py MODEL_DIR OUT --ray` (rank 0 here, rank 1 a Ray actor). Rank 0 trains both batches
and writes its weights and metrics to OUT; under torchrun rank 1 writes the weights it ended with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from dist_helpers import PAD, batches, run_config

from trialground.orchestrator.ranks import ranks, serve_rank
from trialground.policy.backends.hf.hf import load_model
from trialground.train.distributed import join_data_parallel
from trialground.train.trainer import Trainer


def main() -> None:
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = run_config(model_dir, ray="--ray" in sys.argv)
    with ranks(config) as (config, rank):
        assert rank is not None, "not launched as two ranks"
        if rank.rank > 0:
            serve_rank(rank, config)
            trainer = rank._trainer
            assert trainer is not None
            torch.save(trainer.state_dict(), out / f"rank{rank.rank}.pt")
            return
        trainer = Trainer(load_model(config.policy).eval(), config.trainer, pad_id=PAD, temperature=1.0)
        join_data_parallel(trainer)
        metrics = [trainer.step(batch) for batch in batches(model_dir)]
        torch.save(trainer.state_dict(), out / "rank0.pt")
        (out / "metrics.json").write_text(json.dumps(metrics))


if __name__ == "__main__":
    main()
