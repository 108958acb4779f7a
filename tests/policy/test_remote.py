"""The remote backend against real reference servers (`trialground policy serve`'s code) over loopback
HTTP: token ids and logprobs exactly the server's, least-loaded routing, weight pushes, clear errors."""

from __future__ import annotations

import gc
import json
import random
import socket
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from trialground.errors import ConfigError, PolicyError
from trialground.gateway.reference import ReferenceServer
from trialground.policy import make_policy
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.openai.openai import OpenAIPolicy
from trialground.policy.backends.remote.remote import RemotePolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.factory import require_trainable
from trialground.policy.weight_files import tensor_digest

torch = pytest.importorskip("torch")

TASK = [{"role": "user", "content": "Write f(x) for an integer x: add 3."}]
OTHER = [{"role": "user", "content": "Write f(x) for an integer x: double it."}]


KEY = "test-key"  # the weight routes exist only behind a key; the remote backend sends $OPENAI_API_KEY


AUTH = {"Authorization": f"Bearer {KEY}"}


def _start(policy: HFPolicy, key: str | None = KEY) -> ReferenceServer:
    server = ReferenceServer(policy, served_name="tiny", api_key=key)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ReferenceServer]]:
    """Two reference servers, each with its own copy of the tiny model (weight pushes change them)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    started = [_start(HFPolicy(PolicyConfig(model="tiny"))) for _ in range(2)]
    yield started
    for server in started:
        server.shutdown()


def _remote(urls: list[str], **extra: Any) -> RemotePolicy:
    policy = make_policy(PolicyConfig(backend="remote", servers=tuple(urls), **extra))
    assert isinstance(policy, RemotePolicy)
    return policy


async def test_tokens_and_logprobs_are_the_servers_own(servers: list[ReferenceServer]) -> None:
    remote = _remote([servers[0].url + "/v1/"])  # the /v1 suffix and a trailing slash are accepted
    assert remote.model_name == "tiny"
    remote.seed_sampling(5)
    a, b = remote.encode_chat(TASK), remote.encode_chat(OTHER)
    params = SamplingParams(temperature=0.7, max_new_tokens=30)
    gens = await remote.generate([a, b, a, a], params)
    # Seeds are drawn per distinct prompt, in order: the server, asked directly with the same seed and
    # rows, samples exactly these ids (they are the sampled ids, not a re-encoding of the text).
    seeds = random.Random(5)
    seed_a, seed_b = seeds.randrange(2**31), seeds.randrange(2**31)
    local = servers[0].policy
    direct_a = local.generate_sync([a, a, a], params.model_copy(update={"seed": seed_a}))
    (direct_b,) = local.generate_sync([b], params.model_copy(update={"seed": seed_b}))
    assert [g.token_ids for g in (gens[0], gens[2], gens[3])] == [g.token_ids for g in direct_a]
    assert gens[1].token_ids == direct_b.token_ids
    for prompt, g in zip([a, b, a, a], gens, strict=True):
        assert len(g.logprobs) == len(g.token_ids) > 0
        # the sampling logprob of each returned token, as one forward pass of the same model scores it
        assert list(g.logprobs) == pytest.approx(local.score(prompt, g.token_ids, temperature=0.7), abs=1e-4)
        assert g.version == 0
        assert g.text == remote.tokenizer.decode(list(g.token_ids), skip_special_tokens=True)
    assert {g.finish_reason for g in gens} <= {"eos", "length"}
    assert any(g.finish_reason == "eos" and g.token_ids[-1] in remote.eos_ids for g in gens)


async def test_stop_strings_and_greedy(servers: list[ReferenceServer]) -> None:
    remote = _remote([servers[0].url])
    prompt = remote.encode_chat(TASK)
    (g,) = await remote.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=40, stop=("\n",)))
    assert g.finish_reason == "stop" and "\n" in g.text
    (full,) = await remote.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=40))
    assert full.token_ids[: len(g.token_ids)] == g.token_ids  # the stop only cut the same greedy answer
    (short,) = await remote.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=2))
    assert short.finish_reason == "length" and len(short.token_ids) == 2


async def test_each_request_goes_to_the_least_loaded_server(servers: list[ReferenceServer]) -> None:
    remote = _remote([s.url for s in servers])
    a, b = remote.encode_chat(TASK), remote.encode_chat(OTHER)
    c = remote.encode_chat([{"role": "user", "content": "Write f(x) for an integer x: subtract 1."}])
    params = SamplingParams(temperature=0.7, max_new_tokens=8)
    # a (3 samples) goes to server 0; b finds server 1 emptier, and so does c (3 sequences vs 1)
    await remote.generate([a, a, a, b, c], params)
    assert remote.requests == [1, 2]
    assert [s.requests for s in servers] == [1, 2]
    # round robin would have sent c to server 0; equal loads alternate
    await remote.generate([a, b, c, remote.encode_chat(OTHER + TASK)], params)
    assert remote.requests == [3, 4]


async def test_an_episodes_turns_stay_on_its_server_until_it_dies(servers: list[ReferenceServer]) -> None:
    remote = _remote([s.url for s in servers])
    params = SamplingParams(temperature=0.7, max_new_tokens=6)
    a, b = remote.encode_chat(TASK), remote.encode_chat(OTHER)
    ga, gb = await remote.generate([a, b], params)  # side by side: one on each server
    assert remote.requests == [1, 1]
    # next turns, one at a time: least-loaded alone would send both to server 0 (both idle)
    obs = remote.tokenizer.encode("ok", add_special_tokens=False)
    a2 = [*a, *ga.token_ids, *obs]
    b2 = [*b, *gb.token_ids, *obs]
    await remote.generate([a2], params)
    (gb2,) = await remote.generate([b2], params)
    assert remote.requests == [2, 2]
    (_,) = await remote.generate([[*b2, *gb2.token_ids, *obs]], params)
    assert remote.requests == [2, 3]
    # server 1 is dropped (it missed a push): its episodes move to the survivor
    remote.dropped.add(1)
    remote.affinity.forget_server(1)
    (_,) = await remote.generate([[*b2, *gb2.token_ids, *obs, *obs]], params)
    assert remote.requests == [3, 3]


async def test_a_dead_server_is_retried_elsewhere_and_named_when_all_fail(
    servers: list[ReferenceServer],
) -> None:
    with socket.socket() as s:  # a port nothing listens on any more
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    remote = _remote([dead, servers[0].url], served_model="tiny")
    prompt = remote.encode_chat(TASK)
    (g,) = await remote.generate([prompt], SamplingParams(max_new_tokens=4))
    assert len(g.token_ids) > 0 and remote.requests == [1, 1]
    alone = _remote([dead], served_model="tiny", max_retries=1)
    with pytest.raises(PolicyError, match=f"after 2 tries: {dead}"):
        await alone.generate([prompt], SamplingParams(max_new_tokens=4))
    with pytest.raises(PolicyError, match=f"{dead}/v1/models did not answer"):
        _remote([dead])


def test_weights_are_pushed_to_every_server(servers: list[ReferenceServer], tmp_path: Path) -> None:
    remote = _remote([s.url for s in servers], weight_dir=str(tmp_path / "weights"))
    trainer_model = HFPolicy(PolicyConfig(model="tiny")).model
    for version in (1, 2, 3):
        with torch.no_grad():
            for p in trainer_model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        state = {k: v.detach() for k, v in trainer_model.state_dict().items()}
        remote.load_weights(state, version)
        assert remote.version == version
        expected = {k: tensor_digest(v) for k, v in state.items()}
        for server in servers:
            served = httpx.post(
                server.url + "/weight_checker", json={"action": "checksum"}, headers=AUTH
            ).json()
            assert served["checksums"] == expected  # every weight, tied lm_head included, bit for bit
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v00000002", "v00000003"]
    info = [httpx.get(s.url + "/trialground/info", headers=AUTH).json() for s in servers]
    assert [i["weight_loads"] for i in info] == [3, 3]


async def test_generations_after_a_push_carry_its_version(servers: list[ReferenceServer]) -> None:
    remote = _remote([servers[0].url])
    state = servers[1].policy.model.state_dict()  # the same weights: only the version changes
    remote.load_weights(state, 7)
    (g,) = await remote.generate([remote.encode_chat(TASK)], SamplingParams(max_new_tokens=4))
    assert g.version == 7
    remote.close()
    assert not remote.weight_root.exists()  # the private weight directory is removed


async def test_the_private_weight_directory_is_made_at_the_first_push_and_never_outlives_the_policy(
    servers: list[ReferenceServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # mkdtemp's parent: this test's own
    made = lambda: sorted(tmp_path.glob("trialground-weights-*"))  # noqa: E731
    remote = _remote([servers[0].url])
    await remote.generate([remote.encode_chat(TASK)], SamplingParams(max_new_tokens=2))
    assert made() == []  # generation alone makes none
    remote.load_weights(servers[1].policy.model.state_dict(), 1)
    (root,) = made()
    assert (root / "v00000001").is_dir()
    del remote  # never closed: collected, and the directory goes with it
    gc.collect()
    assert made() == []


class _Fake(BaseHTTPRequestHandler):
    """A server that lists a model and answers completions with a canned choice; no weight routes."""

    choice: ClassVar[dict[str, Any]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(200, {"data": [{"id": "m"}]})

    def do_POST(self) -> None:
        json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)) or b"{}")
        if self.path == "/v1/completions":
            return self._send(200, {"choices": [_Fake.choice]})
        return self._send(404, {"detail": "Not Found"})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_answers_without_ids_or_logprobs_are_refused(fake: str) -> None:
    remote = _remote([fake])
    text_only = {"index": 0, "text": "x", "finish_reason": "stop", "logprobs": {"token_logprobs": [-1.0]}}
    cases = [
        (text_only, "no sampled token ids"),
        ({**text_only, "token_ids": [5, 6]}, "1 logprobs for 2 sampled tokens"),
        ({**text_only, "token_ids": [5], "logprobs": {"token_logprobs": [None]}}, "None is not a finite"),
        ({**text_only, "token_ids": [5], "finish_reason": "abort"}, "unexpected finish_reason"),
    ]
    for choice, message in cases:
        _Fake.choice = choice
        with pytest.raises(PolicyError, match=message):
            await remote.generate([[1, 2]], SamplingParams())
    # ids from `return_tokens_as_token_ids` alone are enough (vLLM before return_token_ids)
    _Fake.choice = {**text_only, "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.5]}}
    (g,) = await remote.generate([[1, 2]], SamplingParams())
    assert g.token_ids == (7,) and g.logprobs == (-0.5,) and g.finish_reason == "stop"


def test_a_server_without_weight_routes_is_named_with_the_fix(fake: str, tmp_path: Path) -> None:
    remote = _remote([fake], weight_dir=str(tmp_path))
    with pytest.raises(PolicyError, match=f"{fake}: /collective_rpc not found .*VLLM_SERVER_DEV_MODE=1"):
        remote.load_weights({"w": torch.zeros(2)}, 1)
    assert remote.version == 0


def test_reference_server_rejects_bad_requests_by_field(servers: list[ReferenceServer]) -> None:
    url = servers[0].url
    cases = [
        ({"prompt": [1, 10**9]}, "prompt[0]: token ids outside the vocabulary"),
        ({"prompt": [1, 2], "max_tokens": 1000}, "exceed the model's maximum context length"),
        ({"prompt": [1, 2], "temperature": -1}, "temperature"),
        ({"prompt": [1, 2], "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": []}, "prompt: empty"),
        ({}, "prompt"),
    ]
    for body, message in cases:
        resp = httpx.post(url + "/v1/completions", json=body, headers=AUTH)
        assert resp.status_code == 400 and message in resp.json()["message"], (body, resp.text)
    resp = httpx.post(url + "/v1/completions", json={"model": "other", "prompt": [1]}, headers=AUTH)
    assert resp.status_code == 404 and "`other` does not exist" in resp.json()["message"]
    resp = httpx.post(url + "/collective_rpc", json={"method": "reset_weights"}, headers=AUTH)
    assert resp.status_code == 400 and "only 'trialground_load_weights'" in resp.json()["message"]
    resp = httpx.post(
        url + "/collective_rpc",
        json={"method": "trialground_load_weights", "args": ["/nonexistent"]},
        headers=AUTH,
    )
    assert resp.status_code == 400 and "no *.safetensors weights in '/nonexistent'" in resp.json()["message"]
    resp = httpx.post(
        url + "/v1/completions", content=b"{not json", headers={"Content-Type": "application/json", **AUTH}
    )
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["message"]
    assert httpx.get(url + "/nowhere", headers=AUTH).status_code == 404
    assert (
        httpx.post(url + "/v1/completions", json={"prompt": [1], "seed": 10**30}, headers=AUTH).status_code
        == 400
    )
    assert httpx.post(url + "/v1/completions", json={"prompt": [1]}).status_code == 401  # no key
    rpc = {"method": "trialground_load_weights", "args": ["/"]}
    assert (
        httpx.post(url + "/collective_rpc", json=rpc, headers={"Authorization": "Bearer x"}).status_code
        == 401
    )
    assert httpx.get(url + "/health").status_code == 200  # still serving


def test_reference_server_without_a_key_refuses_weight_routes_and_serves_the_openai_sdk() -> None:
    import openai

    server = _start(HFPolicy(PolicyConfig(model="tiny-agent")), key=None)
    try:
        rpc = {"method": "trialground_load_weights", "args": ["/"]}
        resp = httpx.post(server.url + "/collective_rpc", json=rpc)
        assert resp.status_code == 403 and "need a key" in resp.json()["message"]
        assert httpx.post(server.url + "/weight_checker", json={"action": "checksum"}).status_code == 403
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Fix solution.py."}],
            max_tokens=8,
            logprobs=True,
        )
        assert reply.choices[0].logprobs is not None and reply.usage is not None
        assert 1 <= reply.usage.completion_tokens <= 8
        with pytest.raises(openai.BadRequestError, match="seed"):
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "x"}], seed=2**64
            )
    finally:
        server.shutdown()


def test_remote_needs_servers_and_openai_cannot_train() -> None:
    with pytest.raises(PolicyError, match=r"needs policy\.servers"):
        make_policy(PolicyConfig(backend="remote"))
    config = PolicyConfig(backend="openai", base_url="http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"policy\.backend=openai cannot train.*policy\.backend=remote"):
        require_trainable(config, OpenAIPolicy(config))
