"""`trialground sft CONFIG --data PATH... --out DIR`: supervised fine-tuning of the config's policy model
on demonstrations (trajectory Parquet files or JSONL chats), written as a Hugging Face model directory
that `policy.model` takes (`trialground.train.sft`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from trialground.cli.common import EXIT_INFRA, fail


def sft(
    config: Path = typer.Argument(..., help="The run config whose policy (model, chat template) is tuned"),
    data: list[Path] = typer.Option(..., "--data", help="trajectories/*.parquet files or JSONL chats"),
    out: Path = typer.Option(..., "--out", help="Directory to write (must not exist, or be empty)"),
    overrides: list[str] = typer.Option([], "--set", help="Config override key=value (repeatable)"),
    epochs: int = typer.Option(1, min=1, help="Passes over the examples"),
    lr: float = typer.Option(1e-5, min=0.0, help="AdamW learning rate"),
    batch_size: int = typer.Option(4, min=1, help="Examples per optimiser step"),
    max_tokens: int = typer.Option(2048, min=8, help="Skip examples longer than this"),
    min_reward: float | None = typer.Option(None, help="Trajectory rows: keep those with reward >= this"),
    seed: int = typer.Option(0, help="Shuffling seed"),
) -> None:
    """Fine-tune the config's policy model on demonstrations: policy turns trained, the rest masked."""
    # Writes the model, its tokenizer and `sft.json` (the loss per step) to --out.
    from trialground.errors import TrialgroundError
    from trialground.orchestrator.run_config import load_config
    from trialground.policy.loading import check_vocabulary, load_model, load_tokenizer
    from trialground.train.sft import SFTConfig, from_jsonl, from_trajectories, train_sft

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"--out {out}: exists and is not an empty directory (nothing is overwritten)")
    missing = [str(p) for p in data if not p.is_file()]
    if missing:
        fail(f"--data: no such file: {', '.join(missing)}")
    try:
        cfg = load_config(config, overrides)
        policy = cfg.policy
        settings = SFTConfig(
            lr=lr, epochs=epochs, batch_size=batch_size, max_tokens=max_tokens, min_reward=min_reward,
            seed=seed, observation_role=policy.observation_role,
        )  # fmt: skip
        tokenizer = load_tokenizer(policy)
        model = load_model(policy)
        check_vocabulary(policy, model, tokenizer)
    except TrialgroundError as exc:
        fail(str(exc), EXIT_INFRA)
    examples = []
    try:
        for path in data:
            if path.suffix == ".parquet":
                examples += from_trajectories([path], settings.min_reward)
            else:
                examples += from_jsonl(path, tokenizer, settings.observation_role)
    except (OSError, ValueError) as exc:
        fail(f"--data: {exc}")
    torch_seed(seed)
    started = time.perf_counter()
    try:
        log = train_sft(model, examples, settings, pad_id=int(tokenizer.pad_token_id))
    except ValueError as exc:
        fail(f"sft: {exc}")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    summary = {
        "model": policy.model,
        "data": [str(p) for p in data],
        "examples": len(examples),
        "settings": settings.model_dump(),
        "seconds": round(time.perf_counter() - started, 1),
        "steps": log,
    }
    (out / "sft.json").write_text(json.dumps(summary, indent=2) + "\n")
    first, last = log[0]["loss"], log[-1]["loss"]
    print(f"{len(examples)} examples, {len(log)} steps: loss {first:.3f} -> {last:.3f}; wrote {out}")


def torch_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
