"""The sampled distribution is the trained one: the remote backend states every sampling field, so a
reference server whose default top_k is 20 (`policy serve --default-top-k 20`, as vLLM takes a model's
generation_config.json) still samples the full softmax; server defaults are read at start and reported."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from trialground.errors import PolicyError
from trialground.gateway.reference import ReferenceServer
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.openai.openai import OpenAIPolicy
from trialground.policy.backends.remote.remote import RemotePolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.sampling_parity import check_defaults, server_defaults, wire_fields

torch = pytest.importorskip("torch")

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TASK = [{"role": "user", "content": "Write f(x) for an integer x: add 3."}]


@pytest.fixture(scope="module")
def top_k_server(tiny: HFPolicy) -> Iterator[ReferenceServer]:
    """A reference server whose requests default to top_k 20 (a real knob, `--default-top-k`)."""
    defaults = SamplingParams(top_k=20)
    server = ReferenceServer(tiny, served_name="tiny", api_key=KEY, sampling_defaults=defaults)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _complete(server: ReferenceServer, prompt: list[int], **fields: Any) -> list[float]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 1.5, "seed": 3, "logprobs": 0}
    resp = httpx.post(server.url + "/v1/completions", json=body | fields, headers=AUTH, timeout=60)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["choices"][0]["logprobs"]["token_logprobs"])


def test_the_servers_default_top_k_is_real(top_k_server: ReferenceServer, tiny: HFPolicy) -> None:
    prompt = tiny.encode_chat(TASK)
    omitted = _complete(top_k_server, prompt)  # top_k 20 applies: logprobs renormalised over 20 tokens
    stated = _complete(top_k_server, prompt, top_k=-1)
    assert omitted != pytest.approx(stated, abs=1e-3)
    info = httpx.get(top_k_server.url + "/trialground/info", headers=AUTH).json()
    assert info["sampling_defaults"] == {"top_k": 20}


async def test_remote_requests_state_top_k_so_the_server_default_never_applies(
    top_k_server: ReferenceServer, tiny: HFPolicy, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with caplog.at_level(logging.WARNING, logger="trialground.policy.backends.remote.remote"):
        remote = RemotePolicy(PolicyConfig(backend="remote", servers=(top_k_server.url,)))
    # the server's default is read at start and reported loudly
    assert any("server default top_k=20" in r.getMessage() for r in caplog.records)
    prompt = remote.encode_chat(TASK)
    gens = await remote.generate([prompt, prompt], SamplingParams(temperature=1.5, max_new_tokens=12, seed=4))
    for g in gens:
        # full softmax at T: what the trainer scores; a request without top_k would be scored over 20 tokens
        full = tiny.score(prompt, g.token_ids, temperature=1.5)
        assert list(g.logprobs) == pytest.approx(full, abs=1e-4)
    # a configured top_k is sent as configured (and the sampler's logprobs are then the truncated ones)
    (g,) = await remote.generate([prompt], SamplingParams(temperature=1.5, max_new_tokens=12, top_k=5))
    full = tiny.score(prompt, g.token_ids, temperature=1.5)
    assert all(a >= b - 1e-5 for a, b in zip(g.logprobs, full, strict=True))
    assert any(a > b + 1e-3 for a, b in zip(g.logprobs, full, strict=True))


def test_every_field_is_on_the_wire_and_openai_only_endpoints_refuse_extras() -> None:
    body = wire_fields(SamplingParams())
    assert body == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    assert "top_k" not in wire_fields(SamplingParams(), extras=False)
    with pytest.raises(PolicyError, match="top_k"):
        wire_fields(SamplingParams(top_k=20), extras=False)
    policy = OpenAIPolicy(PolicyConfig(backend="openai", base_url="http://127.0.0.1:9"))
    assert policy._body(SamplingParams(min_p=0.1))["min_p"] == 0.1


def test_penalties_are_refused_by_the_reference_sampler(
    top_k_server: ReferenceServer, tiny: HFPolicy
) -> None:
    body = {"model": "tiny", "prompt": tiny.encode_chat(TASK), "max_tokens": 2, "repetition_penalty": 1.05}
    resp = httpx.post(top_k_server.url + "/v1/completions", json=body, headers=AUTH, timeout=60)
    assert resp.status_code == 400 and "repetition_penalty" in resp.text


class _VLLMInfo(BaseHTTPRequestHandler):
    """vLLM's development route `/server_info?config_format=json` (the shape of vLLM's VllmConfig dump)."""

    model_config: ClassVar[dict[str, Any]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/server_info"):
            assert "config_format=json" in self.path
            data = json.dumps({"vllm_config": {"model_config": _VLLMInfo.model_config}}).encode()
            self.send_response(200)
        else:
            data = b'{"detail": "Not Found"}'
            self.send_response(404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_vllm_defaults_are_read_from_server_info() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _VLLMInfo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with httpx.Client(timeout=10) as client:
            _VLLMInfo.model_config = {"generation_config": "vllm", "override_generation_config": {}}
            assert server_defaults(client, url, "tiny") == ("/server_info (--generation-config vllm)", {})
            _VLLMInfo.model_config = {
                "generation_config": "auto",
                "override_generation_config": {"top_k": 20, "repetition_penalty": 1.05, "max_new_tokens": 9},
            }
            source, found = server_defaults(client, url, "tiny") or ("", {})
            assert found == {"top_k": 20, "repetition_penalty": 1.05}
    finally:
        httpd.shutdown()
    warnings = check_defaults(url, source, found, SamplingParams())
    assert len(warnings) == 2 and "--generation-config vllm" in warnings[0]
    assert check_defaults(url, source, {"top_k": -1}, SamplingParams()) == []
    # a default on a field no request states would change the distribution: refused
    with pytest.raises(PolicyError, match="typical_p"):
        check_defaults(url, source, {"typical_p": 0.9}, SamplingParams())
