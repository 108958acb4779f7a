"""The HTTP seam every weight transport of the `remote` backend shares: a push's failure (`PushFailed`,
unreachable or refused), the transport protocol, and one POST with its answer checked."""

from __future__ import annotations

from typing import Any, Protocol

import httpx


class PushFailed(Exception):
    def __init__(self, why: str, unreachable: bool = False) -> None:
        super().__init__(why)
        self.unreachable = unreachable


class WeightTransport(Protocol):
    # True: `prepared` is the bucket directory the trainer wrote; False: the trainer's weights mapping
    uses_files: bool
    # (load, unload) routes of the server's LoRA adapters, taking {"lora_name", "lora_path"}
    adapter_routes: tuple[str, str]

    def push(self, client: httpx.Client, server: str, prepared: Any, version: int) -> None: ...


def post(client: httpx.Client, server: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        return client.post(server + path, **kwargs)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise PushFailed(f"{server}: {type(exc).__name__}: {exc}", unreachable=True) from exc
    except httpx.HTTPError as exc:
        raise PushFailed(f"{server}: {type(exc).__name__}: {exc}") from exc


def ok(server: str, resp: httpx.Response, hint: str = "") -> None:
    if resp.status_code == 404:
        raise PushFailed(f"{server}: {resp.request.url.path} not found" + (f" ({hint})" if hint else ""))
    if resp.status_code != 200:
        raise PushFailed(f"{server}{resp.request.url.path}: HTTP {resp.status_code}: {resp.text[:300]}")
