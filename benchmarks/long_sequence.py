"""One training step on one long sequence of a real model on CPU: peak RSS, time, and the largest tensor
with a vocabulary-sized last dimension that any operation made, forward or backward.

    python benchmarks/long_sequence.py --model gemma-3-270m --tokens 16384

Prints one JSON line: tokens, vocab, chunk, seconds (the step), peak_rss_gib (the process's high-water
mark, model load included), largest_logits (elements of the largest [.., vocab] tensor) and full
(tokens x vocab, which `largest_logits` must stay far below). `--check` exits 1 when `largest_logits`
passes one chunk (`chunk x vocab`) or the peak passes `--max-rss-gib`.

The step is the trainer's own (`Trainer.step`, AdamW included) on one trajectory whose prompt is one
token and whose completion is the rest, fp32, gradient checkpointing on (a 16k-token step keeps no layer's
activations but its input), with the output layer `--chunk` positions at a time.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class VocabWatch(TorchDispatchMode):
    """Records the most elements any operation's output had among tensors whose last dimension is the
    vocabulary (logits, their softmax, their gradient): forward and backward, as the dispatcher sees
    them. The output layer's own weight, transposed ([hidden, vocab]), is not logits and is not counted."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.weight = (hidden, vocab)
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == self.vocab:
                if tuple(t.shape) == self.weight:
                    continue
                self.largest = max(self.largest, t.numel())
        return out


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)  # KiB on Linux


def long_step(model_name: str, tokens: int, chunk: int, *, checkpointing: bool = True) -> dict[str, float]:
    """Load `model_name` (a `policy.model` value), run one trainer step on one `tokens`-long sequence."""
    from trialground.policy.config import PolicyConfig
    from trialground.policy.loading import load_model
    from trialground.rollout.trajectory import Trajectory, Turn
    from trialground.train.advantages import with_advantages
    from trialground.train.config import TrainerConfig
    from trialground.train.trainer import Trainer

    model = load_model(PolicyConfig(model=model_name))
    vocab = model.config.vocab_size
    torch.manual_seed(0)
    ids = torch.randint(4, vocab, (tokens,)).tolist()
    turns = (
        Turn(role="prompt", token_ids=tuple(ids[:1])),
        Turn(role="policy", token_ids=tuple(ids[1:]), logprobs=tuple([-12.0] * (tokens - 1))),
    )
    traj = Trajectory(task_id="t", group_id="g", sample_index=0, policy_version=0, turns=turns)
    config = TrainerConfig(
        lr=1e-6, gradient_checkpointing=checkpointing, logit_chunk_tokens=chunk, micro_batch_size=1
    )
    trainer = Trainer(model, config, pad_id=0)
    with VocabWatch(vocab, model.config.hidden_size) as watch:
        t0 = time.perf_counter()
        metrics = trainer.step(with_advantages([traj], [1.0]))
        seconds = time.perf_counter() - t0
    return {
        "tokens": float(tokens),
        "vocab": float(vocab),
        "chunk": float(chunk),
        "seconds": seconds,
        "peak_rss_gib": peak_rss_gib(),
        "largest_logits": float(watch.largest),
        "full": float(tokens * vocab),
        "loss": metrics["train/loss"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m", help="a policy.model value")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--chunk", type=int, default=512, help="trainer.logit_chunk_tokens")
    parser.add_argument("--max-rss-gib", type=float, default=8.0)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    out = long_step(args.model, args.tokens, args.chunk)
    print(json.dumps(out), flush=True)
    one_chunk = out["chunk"] * out["vocab"]
    if args.check and (out["largest_logits"] > one_chunk or out["peak_rss_gib"] > args.max_rss_gib):
        sys.exit(1)


if __name__ == "__main__":
    main()
