"""A weight push to a real `policy serve` process holds at most one bucket beyond the trainer's own
weights, on both sides, and leaves the served model's logprobs equal to the trainer's.

The model is a random Llama of ~110 MB (fp32) with the tiny model's tokenizer, written to a temporary
directory, so that a whole extra copy (what the push made before it streamed: ~110 MB) would show far above
the 16 MiB bucket. Measured in a process of its own (`push_memory_worker.py`): peak resident memory
(/proc VmHWM, reset just before the push) minus resident memory before it."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # two processes load a 110 MB model

ROOT = Path(__file__).resolve().parents[2]
KEY = "push-memory-key"
BUCKET_MB = 16


def _model_dir(path: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    from trialground.policy.tiny import resolve_model_dir

    tiny = resolve_model_dir("tiny")
    config = LlamaConfig.from_pretrained(tiny)
    config.update({"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8, "head_dim": 64})
    config.update({"num_attention_heads": 8, "num_key_value_heads": 8, "tie_word_embeddings": False})
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(tiny / name, path / name)
    return path


def _serve(model: Path, key_file: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "trialground", "policy", "serve", "--model", str(model), "--port", "0"),
            *("--api-key-file", str(key_file)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    out = proc.stdout
    assert out is not None
    threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=300)
    except queue.Empty:
        proc.kill()
        raise AssertionError("policy serve printed nothing within 300 s") from None
    assert first.startswith("serving http://"), first
    return proc, first.split()[1]


def test_a_push_holds_at_most_one_bucket_and_the_served_logprobs_are_the_trainers(tmp_path: Path) -> None:
    # TRIALGROUND_PUSH_MODEL=gemma-3-270m measures the real pretrained model instead (two ~1 GB processes)
    named = os.environ.get("TRIALGROUND_PUSH_MODEL")
    model = Path(named) if named else _model_dir(tmp_path / "model")
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    proc, url = _serve(model, key_file)
    try:
        env = {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONPATH": str(ROOT)}
        worker = Path(__file__).with_name("push_memory_worker.py")
        done = subprocess.run(
            [sys.executable, str(worker), str(model), url, str(BUCKET_MB), str(proc.pid)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
    finally:
        proc.terminate()
        proc.wait(60)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print("push memory:", report)  # shown with -s: the measured figures
    assert report["weights_bytes"] > 6 * report["bucket_bytes"]  # a whole copy would stand out
    assert report["trainer_peak_over"] <= report["bucket_bytes"], report
    # the server maps one bucket file at a time (a tensor larger than a bucket is a file of its own) and
    # copies one tensor of it at a time into its model
    bound = max(report["bucket_bytes"], report["largest_tensor_bytes"]) + report["largest_tensor_bytes"]
    assert report["server_peak_over"] <= bound, report
    assert report["weights_equal"], report  # every served weight is the trainer's, bit for bit
    # the server samples with a KV cache, the trainer scores in one pass: float error only (2.4e-6 on the
    # random Llama, 2.3e-4 on Gemma 3 270M and its 262k-token vocabulary)
    assert report["tokens"] > 0 and report["max_logprob_diff"] < 1e-3, report
