"""The `remote` backend: a client of the sandbox service (`service.py`) over HTTP.

Configured by `SandboxConfig.remote_url` and `SandboxConfig.token_file`. Transport failures and server
errors raise SandboxError (the sandbox failed, not the program): kind `transport` when the service cannot
be reached or drops the connection (it died or restarted), `closed` for a session it does not know (closed,
reaped, or lost with a restarted service) and for a call cut short by this sandbox's own `close`. Program
results come back as `ExecResult`s exactly as the server's sandbox produced them.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from trialground.errors import SandboxError
from trialground.sandbox.base import Command, ExecResult, Limits, Sandbox, SandboxConfig, text_bytes
from trialground.sandbox.beneath import read_limit


def _b64(data: bytes | str) -> str:
    return base64.b64encode(text_bytes(data)).decode()


class RemoteSandbox(Sandbox):
    def __init__(self, config: SandboxConfig, client: httpx.AsyncClient, session_id: str) -> None:
        self.config = config
        self._client = client
        self.session_id = session_id
        self._closed = False

    @staticmethod
    def _client_for(config: SandboxConfig) -> httpx.AsyncClient:
        if not config.remote_url:
            raise SandboxError("backend 'remote' needs remote_url", kind="config")
        if not config.token_file or not Path(config.token_file).is_file():
            raise SandboxError("backend 'remote' needs token_file naming an existing file", kind="config")
        token = Path(config.token_file).read_text().strip()
        timeout = httpx.Timeout(config.limits.wall_s + 30, connect=10)
        return httpx.AsyncClient(
            base_url=config.remote_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    @classmethod
    async def create(
        cls, config: SandboxConfig, files: Mapping[str, str | bytes] | None = None
    ) -> RemoteSandbox:
        client = cls._client_for(config)
        spec = {
            "limits": config.limits.model_dump(),
            "network": config.network,
            "snapshot_mode": config.snapshot_mode,
            "warm": config.warm,
            "python_fast": config.python_fast,
            "files": {p: _b64(d) for p, d in (files or {}).items()},
        }
        try:
            body = await _call(client, "POST", "/sessions", json=spec)
        except BaseException:
            await client.aclose()
            raise
        return cls(config, client, body["session_id"])

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        if self._closed:
            raise SandboxError("sandbox is closed", kind="closed")
        try:
            return await _call(self._client, method, f"/sessions/{self.session_id}{path}", **kwargs)
        except SandboxError as exc:
            if self._closed:  # closed by another task while this call was in flight (its client with it)
                raise SandboxError("sandbox is closed", kind="closed") from exc
            raise

    async def exec(
        self,
        cmd: Command,
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        req = {
            "cmd": cmd if isinstance(cmd, str) else list(cmd),
            "stdin_b64": _b64(stdin) if stdin is not None else None,
            "env": dict(env) if env is not None else None,
            "cwd": cwd,
            "limits": limits.model_dump() if limits is not None else None,
        }
        return ExecResult.model_validate(await self._call("POST", "/exec", json=req))

    async def write(self, path: str, data: bytes | str) -> None:
        await self._call("PUT", "/files", json={"path": path, "data_b64": _b64(data)})

    async def read(self, path: str, limit: int | None = None) -> bytes:
        params: dict[str, str | int] = {"path": path}
        if limit is not None:
            params["limit"] = read_limit(limit)
        try:
            body = await self._call("GET", "/files", params=params)
        except SandboxError as exc:
            if exc.kind == "http_404":
                raise FileNotFoundError(path) from exc
            raise
        return base64.b64decode(body["data_b64"])

    async def snapshot(self) -> str:
        return str((await self._call("POST", "/snapshot"))["snapshot_id"])

    async def restore(self, snapshot_id: str) -> None:
        await self._call("POST", "/restore", json={"snapshot_id": snapshot_id})

    async def hand_over(self, snapshot_id: str) -> None:
        await self._call("POST", "/restore", json={"snapshot_id": snapshot_id, "hand_over": True})

    async def fork(self) -> Sandbox:
        body = await self._call("POST", "/fork")
        return RemoteSandbox(self.config, self._client_for(self.config), body["session_id"])

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await _call(self._client, "DELETE", f"/sessions/{self.session_id}")
        except SandboxError:
            pass  # already reaped or the server is gone: nothing left to free here
        finally:
            self._closed = True
            await self._client.aclose()


async def _call(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = await client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise SandboxError(f"sandbox service unreachable: {exc!r}", kind="transport") from exc
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        # The service names the kind of a file route's error (bad_path, not_a_file, ...): kept as it was.
        kind = response.headers.get("x-sandbox-error-kind") or f"http_{response.status_code}"
        raise SandboxError(f"sandbox service: HTTP {response.status_code}: {detail}", kind=kind)
    return response.json()
