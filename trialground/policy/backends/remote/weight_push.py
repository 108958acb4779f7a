"""How the `remote` backend hands new weights to a running server: one transport per server kind, named
by `policy.weight_transport`.

- `collective_rpc` (default): vLLM's development routes with trialground's worker extension, and
  `trialground policy serve`. The weights are written once as bucket files (`weight_files`); each server
  is drained (`POST /pause?mode=wait`: no new request starts, running ones finish), told to load the
  directory (`POST /collective_rpc {"method": "trialground_load_weights", "args": [DIR]}`), its prefix
  cache reset (`POST /reset_prefix_cache`: with nothing running, so the reset takes effect; vLLM answers
  200 but resets nothing while requests run) and resumed (`POST /resume`). A server without `/pause`
  (vLLM before its weight-transfer API) is loaded without it, with one warning.
- `sglang`: SGLang's `POST /update_weights_from_disk {"model_path": DIR, "flush_cache": true,
  "weight_version": "N"}`; SGLang holds new requests and lets running ones finish around the load itself,
  then flushes its radix cache. The bucket files are safetensors in a directory, which SGLang's loader
  reads as a checkpoint of the model it serves.
- `vllm_nccl` (`vllm_nccl.py` beside this module): vLLM's native weight transfer, GPU to GPU over
  NCCL, without files.

`push(client, server, prepared, version)` raises `PushFailed` with what went wrong and whether the server
could not be reached at all (then it is dropped, not fatal).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from trialground.policy.backends.remote.push_http import PushFailed, WeightTransport, ok, post
from trialground.policy.weight_files import RELOAD_METHOD

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 900.0  # a multi-GB load from a network file system takes minutes
_VLLM_HINT = (
    "a vLLM server takes pushed weights only when started with VLLM_SERVER_DEV_MODE=1 and "
    "--worker-extension-cls trialground.policy.backends.vllm.vllm_worker.WeightReload"
)


class CollectiveRpc:
    """vLLM (worker extension) and `policy serve`: drain, load the directory, reset the cache, resume."""

    uses_files = True
    # vLLM's runtime LoRA routes (the server started with --enable-lora and
    # VLLM_ALLOW_RUNTIME_LORA_UPDATING=True); `policy serve` answers them too
    adapter_routes = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")

    def __init__(self) -> None:
        self._no_pause: set[str] = set()

    def push(self, client: httpx.Client, server: str, prepared: Any, version: int) -> None:
        paused = False
        if server not in self._no_pause:
            resp = post(client, server, "/pause", params={"mode": "wait"})
            if resp.status_code == 404:
                self._no_pause.add(server)
                log.warning(
                    "%s has no /pause: weights are loaded and the prefix cache reset while requests may "
                    "run (vLLM then keeps the old weights' cache); use a vLLM with /pause and /resume",
                    server,
                )
            else:
                ok(server, resp)
                paused = True
        try:
            rpc = {"method": RELOAD_METHOD, "args": [str(prepared)], "timeout": PUSH_TIMEOUT_S}
            ok(server, post(client, server, "/collective_rpc", json=rpc), _VLLM_HINT)
            ok(server, post(client, server, "/reset_prefix_cache"), _VLLM_HINT)
        finally:
            if paused:
                ok(server, post(client, server, "/resume"))


class SGLangDisk:
    """SGLang: `/update_weights_from_disk` (it drains and flushes its cache itself)."""

    uses_files = True
    adapter_routes = ("/load_lora_adapter", "/unload_lora_adapter")  # SGLang, started with --enable-lora

    def push(self, client: httpx.Client, server: str, prepared: Any, version: int) -> None:
        body = {"model_path": str(prepared), "flush_cache": True, "weight_version": str(version)}
        resp = post(client, server, "/update_weights_from_disk", json=body)
        ok(server, resp, "an SGLang server loads pushed weights through /update_weights_from_disk")
        try:
            answer = resp.json()
        except ValueError:
            answer = {}
        if isinstance(answer, dict) and answer.get("success") is False:
            raise PushFailed(f"{server}: update_weights_from_disk: {answer.get('message')}")


def _vllm_nccl(bucket_bytes: int, dtype: Any) -> WeightTransport:
    from trialground.policy.backends.remote.vllm_nccl import VLLMNccl

    return VLLMNccl(bucket_bytes=bucket_bytes, dtype=dtype)


TRANSPORTS: Mapping[str, Callable[[int, Any], WeightTransport]] = {
    "collective_rpc": lambda _bucket, _dtype: CollectiveRpc(),
    "sglang": lambda _bucket, _dtype: SGLangDisk(),
    "vllm_nccl": _vllm_nccl,
}


def make_transport(name: str, *, bucket_bytes: int, dtype: Any) -> WeightTransport:
    """The transport `name` (`TRANSPORTS`); `bucket_bytes` and `dtype` as the push writes or sends."""
    try:
        factory = TRANSPORTS[name]
    except KeyError:
        raise ValueError(f"unknown weight transport {name!r}: expected one of {sorted(TRANSPORTS)}") from None
    return factory(bucket_bytes, dtype)
