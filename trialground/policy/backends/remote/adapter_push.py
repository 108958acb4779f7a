"""How the `remote` backend hands a LoRA run's adapter to a running server: only the adapter moves.

The trainer writes the adapter once in PEFT's format (`policy/adapters.py`) under `policy.weight_dir`,
then each server loads it under a new name per version through its runtime LoRA route (vLLM's
`POST /v1/load_lora_adapter {"lora_name", "lora_path"}`, SGLang's `/load_lora_adapter`, and
`trialground policy serve`'s, which answers vLLM's), and the backend's requests name that adapter as
their `model` from then on. The adapter two versions back is unloaded (`.../unload_lora_adapter`); the
last one stays loaded, so requests that started before the push finish with the adapter they began with.
No drain or cache reset is needed: a server keys its prefix cache by adapter, and a request picks its
adapter by name when it starts.

vLLM must be started with `--enable-lora --max-lora-rank R` (R at least `trainer.lora_rank`) and
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` in its environment; SGLang with `--enable-lora`. The vLLM and
SGLang paths follow their documented routes and have not been run against a GPU server here.
"""

from __future__ import annotations

import httpx

from trialground.policy.backends.remote.push_http import WeightTransport, ok, post

_HINT = (
    "a server takes pushed LoRA adapters only with LoRA enabled at runtime (vLLM: --enable-lora "
    "--max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; SGLang: --enable-lora); or set "
    "policy.push_lora_adapter: false to push merged full weights"
)


def push_adapter(
    client: httpx.Client,
    server: str,
    transport: WeightTransport,
    name: str,
    path: str,
    retire: str | None,
) -> None:
    """Load the adapter at `path` as `name` on `server`, then unload `retire` (None: nothing)."""
    load, unload = transport.adapter_routes
    ok(server, post(client, server, load, json={"lora_name": name, "lora_path": path}), _HINT)
    if retire is not None:
        resp = post(client, server, unload, json={"lora_name": retire})
        if resp.status_code != 404:  # already gone (a restarted server) is fine
            ok(server, resp)
