"""`trialground policy serve`'s OpenAI API as agent code uses it, through the real `openai` SDK against the
reference server over the bundled tiny model on a kernel-picked port: streaming gives the text the
non-streaming answer gives."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trialground.gateway.reference import ReferenceServer

openai = pytest.importorskip("openai")
pytest.importorskip("torch")

from trialground.policy.backends.hf.hf import HFPolicy  # noqa: E402
from trialground.policy.config import PolicyConfig  # noqa: E402


def _harness_core() -> Any:
    """verifiers' bundled harness script, loaded from its file: it imports nothing of verifiers (the
    package itself takes seconds to import)."""
    spec = importlib.util.find_spec("verifiers")
    if spec is None or spec.origin is None:
        pytest.skip("verifiers is not installed")
    path = Path(spec.origin).parent / "v1" / "harnesses" / "utils" / "core.py"
    if not path.is_file():
        pytest.skip("verifiers < 0.4 (no v1 harness script)")
    module_spec = importlib.util.spec_from_file_location("verifiers_harness_core", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


ASK: Any = [{"role": "user", "content": "Fix solution.py."}]


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServer]:
    server = ReferenceServer(HFPolicy(PolicyConfig(model="tiny-agent")), served_name="tiny")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture
def client(server: ReferenceServer) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.0, "seed": 7}])
def test_streamed_chat_and_completions_give_the_unstreamed_text(
    client: Any, sampling: dict[str, Any]
) -> None:
    kw = {"model": "tiny", "max_tokens": 24, **sampling}
    plain = client.chat.completions.create(messages=ASK, **kw).choices[0]
    text, finish, usage = "", None, None
    for chunk in client.chat.completions.create(
        messages=ASK, stream=True, stream_options={"include_usage": True}, **kw
    ):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == plain.message.content and finish == plain.finish_reason
    assert usage is not None and usage.completion_tokens >= 1

    plain_text = client.completions.create(prompt="def f(x):", **kw).choices[0].text
    chunks = client.completions.create(prompt="def f(x):", stream=True, **kw)
    streamed = "".join(c.choices[0].text for c in chunks)
    assert streamed == plain_text and plain_text


def test_verifiers_harness_model_call_completes(server: ReferenceServer) -> None:
    """verifiers 0.4's harness programs call the model through `core.chat` (always `stream=True` with
    `include_usage`, gathered by the SDK's stream accumulator); it failed every rollout of `vf-eval`
    against this server while streaming was refused."""
    core = _harness_core()
    aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    done = asyncio.run(core.chat(aclient, "tiny", ASK, [core.BASH_TOOL]))
    (choice,) = done.choices
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert choice.message.content or choice.message.tool_calls
    assert done.usage is not None and done.usage.completion_tokens >= 1


def test_top_logprobs_are_the_k_likeliest_of_the_sampled_distribution(client: Any) -> None:
    kw: Any = {"model": "tiny", "messages": ASK, "max_tokens": 12, "logprobs": True}
    for sampling in ({"temperature": 0.0}, {"temperature": 0.8, "top_p": 0.9, "seed": 3}):
        reply = client.chat.completions.create(top_logprobs=5, **kw, **sampling)
        content = reply.choices[0].logprobs.content
        assert content
        for entry in content:
            values = [t.logprob for t in entry.top_logprobs]
            assert len(values) == 5 and values == sorted(values, reverse=True)
            assert values[0] >= entry.logprob - 1e-4  # nothing likelier than the first alternative
            same = [t.logprob for t in entry.top_logprobs if t.token == entry.token]
            assert not same or abs(same[0] - entry.logprob) < 1e-3
        if sampling["temperature"] == 0.0:  # greedy: the sampled token is the likeliest
            assert all(e.top_logprobs[0].token == e.token for e in content)
    with pytest.raises(
        openai.BadRequestError, match="top_logprobs: Input should be less than or equal to 20"
    ):
        client.chat.completions.create(top_logprobs=21, **kw)
    out = client.completions.create(model="tiny", prompt="def f(x):", max_tokens=4, logprobs=3, temperature=0)
    logprobs = out.choices[0].logprobs
    assert logprobs is not None and logprobs.top_logprobs and logprobs.tokens
    for token, top in zip(logprobs.tokens, logprobs.top_logprobs, strict=True):
        assert 3 <= len(top) <= 4 and token in top  # the three likeliest, and the sampled token


def test_responses_streamed_and_not_give_the_same_answer(client: Any) -> None:
    kw: Any = {"model": "tiny", "input": "Fix solution.py.", "instructions": "Fix it.", "temperature": 0.0}
    kw["tools"] = [{"type": "function", "name": "write_file", "parameters": {"type": "object"}}]
    plain = client.responses.create(max_output_tokens=40, **kw)
    with client.responses.stream(max_output_tokens=40, **kw) as events:
        streamed = events.get_final_response()

    def same(o: Any) -> Any:  # ids are fresh per answer; the stream helper adds parsed_arguments
        return {k: v for k, v in o.model_dump().items() if k not in ("id", "call_id", "parsed_arguments")}

    assert [same(o) for o in streamed.output] == [same(o) for o in plain.output]
    assert plain.output and plain.status == "completed" and plain.usage is not None
