"""How servers take new weights (`policy.weight_transport`): the reference server is drained around each
load; an SGLang server gets `/update_weights_from_disk`, not a 404; vLLM's NCCL transfer is described
to the server as it will be sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from pydantic import ValidationError

from trialground.gateway.reference import ReferenceServer
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.remote.remote import RemotePolicy
from trialground.policy.config import PolicyConfig
from trialground.policy.weight_files import weight_headers

torch = pytest.importorskip("torch")

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReferenceServer]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    started = ReferenceServer(HFPolicy(PolicyConfig(model="tiny")), served_name="tiny", api_key=KEY)
    threading.Thread(target=started.serve_forever, daemon=True).start()
    yield started
    started.shutdown()


def test_the_reference_server_is_drained_around_each_load(server: ReferenceServer, tmp_path: Path) -> None:
    remote = RemotePolicy(PolicyConfig(backend="remote", servers=(server.url,), weight_dir=str(tmp_path)))
    state = HFPolicy(PolicyConfig(model="tiny")).model.state_dict()
    for version in (1, 2):
        remote.load_weights(state, version)
    info = httpx.get(server.url + "/trialground/info", headers=AUTH).json()
    assert info["pauses"] == 2 and info["weight_loads"] == 2 and info["dtype"] == "float32"
    assert httpx.get(server.url + "/is_paused", headers=AUTH).json() == {"is_paused": False}  # resumed
    # paused, a generation waits for /resume
    assert httpx.post(server.url + "/pause", params={"mode": "wait"}, headers=AUTH).status_code == 200
    body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 2}
    done: list[int] = []
    worker = threading.Thread(
        target=lambda: done.append(
            httpx.post(server.url + "/v1/completions", json=body, headers=AUTH).status_code
        )
    )
    worker.start()
    worker.join(1.0)
    assert done == []
    httpx.post(server.url + "/resume", headers=AUTH)
    worker.join(60)
    assert done == [200]
    with pytest.raises(ValidationError, match="unknown weight transport"):
        PolicyConfig(backend="remote", weight_transport="rsync")


class _SGLang(BaseHTTPRequestHandler):
    """SGLang's routes as the transport uses them: model list, /update_weights_from_disk
    (`UpdateWeightFromDiskReqInput`: model_path, flush_cache, weight_version -> success, message)."""

    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(200 if self.path == "/v1/models" else 404, {"data": [{"id": "tiny"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)) or b"{}")
        _SGLang.calls.append((self.path, body))
        if self.path == "/update_weights_from_disk":
            ok = bool(weight_headers(body["model_path"]))
            return self._send(200, {"success": ok, "message": "ok", "num_paused_requests": 0})
        return self._send(404, {"detail": "Not Found"})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_an_sglang_server_takes_the_first_push_from_disk(tmp_path: Path) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _SGLang)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        config = PolicyConfig(
            backend="remote", servers=(url,), weight_dir=str(tmp_path), weight_transport="sglang"
        )
        remote = RemotePolicy(config)
        remote.load_weights(HFPolicy(PolicyConfig(model="tiny")).model.state_dict(), 1)
    finally:
        httpd.shutdown()
    pushes = [body for path, body in _SGLang.calls if path == "/update_weights_from_disk"]
    assert [p["weight_version"] for p in pushes] == ["1"] and pushes[0]["flush_cache"] is True
    assert Path(pushes[0]["model_path"]) == tmp_path / "v00000001"
    assert {path for path, _ in _SGLang.calls} == {"/update_weights_from_disk"}  # nothing that 404s


def test_vllm_nccl_update_info_describes_what_is_sent() -> None:
    from trialground.policy.backends.remote.vllm_nccl import update_info

    state = HFPolicy(PolicyConfig(model="tiny")).model.state_dict()
    info = update_info(state, torch.bfloat16, 2**20)
    assert info["packed"] is True and info["packed_buffer_size_bytes"] == 2**20
    assert len(info["names"]) == len(state) - 1  # the tied lm_head once
    assert set(info["dtype_names"]) == {"bfloat16"}
    assert info["shapes"] == [list(state[n].shape) for n in info["names"]]


@pytest.mark.gpu
def test_vllm_nccl_needs_the_weights_on_a_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("vllm")
    from trialground.policy.backends.remote.vllm_nccl import VLLMNccl
    from trialground.policy.backends.remote.weight_push import PushFailed

    with httpx.Client() as client, pytest.raises(PushFailed, match="trainer's GPU"):
        VLLMNccl(bucket_bytes=2**20, dtype=None).push(client, "http://127.0.0.1:9", {"w": torch.ones(2)}, 1)
