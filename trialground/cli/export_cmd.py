"""`trialground export RUN_DIR [--step N] --out DIR [--merge-lora]`: a checkpoint as a Hugging Face model.

Full fine-tuning runs export the model (`hf/` of the checkpoint: safetensors, config, generation config,
tokenizer). LoRA runs export the peft adapter (plus the tokenizer), or with `--merge-lora` the full model
with the adapters merged in. Nothing is overwritten: `--out` must not exist or be empty.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import typer

from trialground.cli.common import fail

_TOKENIZER_FILES = re.compile(
    r"^(tokenizer.*|special_tokens_map\.json|chat_template\.(jinja|json)|vocab\.\w+|merges\.txt|.*\.model)$"
)


def _checkpoint(run_dir: Path, step: int | None) -> Path:
    from trialground.train.checkpoint import checkpoint_path, latest_checkpoint

    if not (run_dir / "checkpoints").is_dir():
        fail(f"{run_dir}: no checkpoints/ directory; is it a run directory?")
    if step is None:
        found = latest_checkpoint(run_dir)
        if found is None:
            fail(f"{run_dir}: no complete checkpoint under checkpoints/")
        return found
    path = checkpoint_path(run_dir, step)
    if not (path / "meta.json").is_file():
        have = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if (p / "meta.json").is_file())
        fail(f"{run_dir}: no complete checkpoint for --step {step} (have: {', '.join(have) or 'none'})")
    return path


def export(
    run_dir: Path = typer.Argument(..., help="A run directory (runs/<name>)"),
    out: Path = typer.Option(..., "--out", help="Directory to write (must not exist, or be empty)"),
    step: int | None = typer.Option(None, "--step", min=0, help="Checkpoint step (default: the latest)"),
    merge_lora: bool = typer.Option(
        False, "--merge-lora", help="LoRA runs: export the full model with adapters merged, not the adapter"
    ),
) -> None:
    """Export a checkpoint as a Hugging Face model directory (or a peft adapter for LoRA runs)."""
    from trialground.train.hf_checkpoint import ADAPTER_DIR, HF_DIR

    ckpt = _checkpoint(run_dir, step)
    hf, adapter = ckpt / HF_DIR, ckpt / ADAPTER_DIR
    if not (hf / "config.json").is_file():
        fail(f"{ckpt}: no {HF_DIR}/ directory with a config.json in this checkpoint")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"--out {out}: exists and is not an empty directory (nothing is overwritten)")
    is_lora = (adapter / "adapter_config.json").is_file()
    out.parent.mkdir(parents=True, exist_ok=True)
    if is_lora and not merge_lora:
        shutil.copytree(adapter, out, dirs_exist_ok=True)
        for item in hf.iterdir():  # the tokenizer travels with the adapter
            if item.is_file() and _TOKENIZER_FILES.match(item.name):
                shutil.copy2(item, out / item.name)
        base = json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path")
        what = f"peft adapter (base model {base}; --merge-lora for the full model)"
    else:
        shutil.copytree(hf, out, dirs_exist_ok=True)
        what = "full model, LoRA merged" if is_lora else "full model"
    typer.echo(f"exported {ckpt.name} of {run_dir} to {out}: {what}")
