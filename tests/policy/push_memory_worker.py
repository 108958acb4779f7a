"""Run in a process of its own (`python push_memory_worker.py MODEL URL BUCKET_MB SERVER_PID`): load
MODEL (a directory or a packaged name such as gemma-3-270m) as a trainer would, push its weights to the
`policy serve` at URL through the remote backend, and print one JSON line: how far the push raised this
process's peak resident memory above what it held before (its own weights included), the same for the
server process, whether the served weights equal this process's bit for bit afterwards, and how far the
served model's logprobs are from this process's for the same tokens. $OPENAI_API_KEY must hold the
server's key."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import httpx
import torch

from trialground.policy.backends.remote.remote import RemotePolicy
from trialground.policy.config import PolicyConfig
from trialground.policy.loading import load_model
from trialground.policy.weight_files import tensor_digest


def _status(pid: str, field: str) -> int:
    """A /proc/PID/status memory field in bytes (VmRSS: resident now; VmHWM: peak since the last reset)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak(pid: str) -> int:
    """Reset the process's peak resident memory to its current one (Linux `clear_refs` 5); returns it."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status(pid, "VmRSS")


def _perturb(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=gen))


def main(model_dir: str, url: str, bucket_mb: int, server_pid: str) -> None:
    extra = {"weight_bucket_mb": bucket_mb} if "weight_bucket_mb" in PolicyConfig.model_fields else {}
    config = PolicyConfig(backend="remote", model=model_dir, servers=(url,), **extra)  # type: ignore[arg-type]
    remote = RemotePolicy(config)
    model = load_model(config).float().eval()  # the trainer's copy
    _perturb(model, 1)
    remote.load_weights(model.state_dict(), 1)  # a first push: imports and first-call allocations
    _perturb(model, 2)
    state = model.state_dict()
    gc.collect()
    before, server_before = _reset_peak("self"), _reset_peak(server_pid)
    remote.load_weights(state, 2)
    peak, server_peak = _status("self", "VmHWM"), _status(server_pid, "VmHWM")
    # the served model's logprobs of its own greedy tokens, against this process's for the same tokens
    prompt = remote.encode_chat([{"role": "user", "content": "Write f(x) for an integer x: add 3."}])
    body = {"prompt": prompt, "max_tokens": 16, "temperature": 1.0, "seed": 0, "logprobs": 0}
    body |= {"return_token_ids": True, "model": remote.model_name, "top_k": -1}
    choice = httpx.post(url + "/v1/completions", json=body, headers=remote._headers(), timeout=300).json()
    ids, logprobs = choice["choices"][0]["token_ids"], choice["choices"][0]["logprobs"]["token_logprobs"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    own = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
    served = httpx.post(
        url + "/weight_checker", json={"action": "checksum"}, headers=remote._headers(), timeout=600
    ).json()["checksums"]
    weights_equal = served == {k: tensor_digest(v) for k, v in state.items()}
    weights = sum(t.numel() * t.element_size() for t in state.values())
    largest = max(t.numel() * t.element_size() for t in state.values())
    print(
        json.dumps(
            {
                "weights_bytes": weights,
                "bucket_bytes": bucket_mb * 2**20,
                "largest_tensor_bytes": largest,
                "trainer_rss_before": before,
                "trainer_peak_over": peak - before,
                "server_peak_over": server_peak - server_before,
                "tokens": len(ids),
                "weights_equal": weights_equal,
                "max_logprob_diff": float((own - torch.tensor(logprobs)).abs().max()),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
