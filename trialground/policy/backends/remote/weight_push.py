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
from typing import Any, Protocol

import httpx

from trialground.policy.weight_files import RELOAD_METHOD

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 900.0  # a multi-GB load from a network file system takes minutes
_VLLM_HINT = (
    "a vLLM server takes pushed weights only when started with VLLM_SERVER_DEV_MODE=1 and "
    "--worker-extension-cls trialground.policy.backends.vllm.vllm_worker.WeightReload"
)


class PushFailed(Exception):
    def __init__(self, why: str, unreachable: bool = False) -> None:
        super().__init__(why)
        self.unreachable = unreachable


class WeightTransport(Protocol):
    # True: `prepared` is the bucket directory the trainer wrote; False: the trainer's weights mapping
    uses_files: bool

    def push(self, client: httpx.Client, server: str, prepared: Any, version: int) -> None: ...


def _post(client: httpx.Client, server: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        return client.post(server + path, **kwargs)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise PushFailed(f"{server}: {type(exc).__name__}: {exc}", unreachable=True) from exc
    except httpx.HTTPError as exc:
        raise PushFailed(f"{server}: {type(exc).__name__}: {exc}") from exc


def _ok(server: str, resp: httpx.Response, hint: str = "") -> None:
    if resp.status_code == 404:
        raise PushFailed(f"{server}: {resp.request.url.path} not found" + (f" ({hint})" if hint else ""))
    if resp.status_code != 200:
        raise PushFailed(f"{server}{resp.request.url.path}: HTTP {resp.status_code}: {resp.text[:300]}")


class CollectiveRpc:
    """vLLM (worker extension) and `policy serve`: drain, load the directory, reset the cache, resume."""

    uses_files = True

    def __init__(self) -> None:
        self._no_pause: set[str] = set()

    def push(self, client: httpx.Client, server: str, prepared: Any, version: int) -> None:
        paused = False
        if server not in self._no_pause:
            resp = _post(client, server, "/pause", params={"mode": "wait"})
            if resp.status_code == 404:
                self._no_pause.add(server)
                log.warning(
                    "%s has no /pause: weights are loaded and the prefix cache reset while requests may "
                    "run (vLLM then keeps the old weights' cache); use a vLLM with /pause and /resume",
                    server,
                )
            else:
                _ok(server, resp)
                paused = True
        try:
            rpc = {"method": RELOAD_METHOD, "args": [str(prepared)], "timeout": PUSH_TIMEOUT_S}
            _ok(server, _post(client, server, "/collective_rpc", json=rpc), _VLLM_HINT)
            _ok(server, _post(client, server, "/reset_prefix_cache"), _VLLM_HINT)
        finally:
            if paused:
                _ok(server, _post(client, server, "/resume"))


class SGLangDisk:
    """SGLang: `/update_weights_from_disk` (it drains and flushes its cache itself)."""

    uses_files = True

    def push(self, client: httpx.Client, server: str, prepared: Any, version: int) -> None:
        body = {"model_path": str(prepared), "flush_cache": True, "weight_version": str(version)}
        resp = _post(client, server, "/update_weights_from_disk", json=body)
        _ok(server, resp, "an SGLang server loads pushed weights through /update_weights_from_disk")
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
