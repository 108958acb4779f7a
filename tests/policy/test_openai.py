"""OpenAIPolicy against a real local HTTP server that answers like an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from trialground.errors import PolicyError
from trialground.policy import make_policy
from trialground.policy.backends.openai.openai import OpenAIPolicy
from trialground.policy.backends.scripted.scripted import load_tokenizer
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig

ANSWER = "def f(x):\n    x = x * 2\n    return x\n"


class Endpoint(BaseHTTPRequestHandler):
    """Deterministic: the answer depends on the request only; `fail_next` 5xx answers come first."""

    fail_next = 0
    requests: ClassVar[list[tuple[str, dict[str, Any], str]]] = []
    tokenizer: Any = None

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Endpoint.requests.append((self.path, body, self.headers.get("Authorization", "")))
        if Endpoint.fail_next > 0:
            Endpoint.fail_next -= 1
            return self._send(503, {"error": "warming up"})
        if body.get("model") == "bad-request":
            return self._send(400, {"error": "unknown model"})
        if self.path == "/v1/completions":
            text = ANSWER if "Write" in body["prompt"] else f"echo:{len(body['prompt'])}"
            stop = body.get("stop") or []
            if "\n" in stop:
                choice = {"text": text.split("\n")[0], "finish_reason": "stop", "stop_reason": "\n"}
            else:
                n = len(Endpoint.tokenizer.encode(text, add_special_tokens=False))
                choice = {"text": text, "finish_reason": "stop", "logprobs": {"token_logprobs": [-0.25] * n}}
            return self._send(200, {"choices": [choice]})
        if self.path == "/v1/chat/completions":
            content = "chat:" + body["messages"][-1]["content"][-10:]
            choice = {"message": {"role": "assistant", "content": content}, "finish_reason": "length"}
            if body.get("logprobs") is True:  # OpenAI's chat API: one entry per token it sampled
                n = len(Endpoint.tokenizer.encode(content, add_special_tokens=False))
                choice["logprobs"] = {"content": [{"token": "?", "logprob": -0.5}] * n}
            return self._send(200, {"choices": [choice]})
        return self._send(404, {"error": "no such path"})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    Endpoint.tokenizer = load_tokenizer("tiny")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _prompt(policy: OpenAIPolicy, text: str) -> list[int]:
    ids = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return [int(i) for i in ids]


async def test_completions_round_trip(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_KEY", "sekrit")
    policy = make_policy(
        PolicyConfig(backend="openai", model="m", base_url=endpoint, api_key_env="TG_TEST_KEY")
    )
    assert isinstance(policy, OpenAIPolicy)
    Endpoint.requests.clear()
    prompts = [_prompt(policy, "Write f(x) for an integer x: double it."), _prompt(policy, "hello")]
    a, b = await policy.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=30, seed=4))
    assert a.text == ANSWER and a.finish_reason == "eos"
    assert a.token_ids[-1] == policy.tokenizer.eos_token_id
    # one logprob per text token from the server; none for the end-of-turn token
    assert len(a.logprobs) == len(a.token_ids)
    assert set(a.logprobs[:-1]) == {-0.25} and math.isnan(a.logprobs[-1])
    assert b.text.startswith("echo:")
    path, body, auth = Endpoint.requests[0]
    assert path == "/v1/completions" and auth == "Bearer sekrit"
    assert body["prompt"].startswith("<|user|>\n") and body["prompt"].endswith("<|assistant|>\n")
    assert (body["model"], body["max_tokens"], body["temperature"], body["seed"]) == ("m", 30, 0.0, 4)


async def test_stop_reason_keeps_the_stop_string(endpoint: str) -> None:
    policy = OpenAIPolicy(PolicyConfig(backend="openai", base_url=endpoint))
    (g,) = await policy.generate([_prompt(policy, "Write it")], SamplingParams(stop=("\n",)))
    assert g.text == "def f(x):\n" and g.finish_reason == "stop"
    assert g.token_ids[-1] != policy.tokenizer.eos_token_id


async def test_chat_api(endpoint: str) -> None:
    policy = OpenAIPolicy(PolicyConfig(backend="openai", base_url=endpoint + "/v1", api="chat"))
    Endpoint.requests.clear()
    (g,) = await policy.generate([_prompt(policy, "abc")], SamplingParams())
    assert g.text.startswith("chat:") and g.finish_reason == "length"
    assert Endpoint.requests[0][1]["logprobs"] is True  # the chat API is asked for logprobs
    assert set(g.logprobs) == {-0.5} and len(g.logprobs) == len(g.token_ids)
    g2 = await policy.chat([{"role": "user", "content": "0123456789xyz"}], SamplingParams())
    assert g2.text == "chat:3456789xyz"


async def test_retries_5xx_then_succeeds_and_gives_up(endpoint: str) -> None:
    policy = OpenAIPolicy(PolicyConfig(backend="openai", base_url=endpoint, max_retries=2))
    Endpoint.fail_next = 2
    (g,) = await policy.generate([_prompt(policy, "Write")], SamplingParams())
    assert g.text == ANSWER
    Endpoint.fail_next = 3
    with pytest.raises(PolicyError, match="after 3 tries"):
        await policy.generate([_prompt(policy, "Write")], SamplingParams())
    Endpoint.fail_next = 0


async def test_client_errors_and_weights_are_policy_errors(endpoint: str) -> None:
    policy = OpenAIPolicy(PolicyConfig(backend="openai", model="bad-request", base_url=endpoint))
    with pytest.raises(PolicyError, match="HTTP 400"):
        await policy.generate([[1, 2]], SamplingParams())
    with pytest.raises(PolicyError, match="evaluation only"):
        policy.load_weights({}, version=1)
    dead = OpenAIPolicy(PolicyConfig(backend="openai", base_url="http://127.0.0.1:9", max_retries=0))
    with pytest.raises(PolicyError, match="failed after 1 tries"):
        await dead.generate([[1, 2]], SamplingParams())
    with pytest.raises(PolicyError, match="base_url"):
        OpenAIPolicy(PolicyConfig(backend="openai"))
