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

from trialground.policy.config import PolicyConfig  # noqa: E402
from trialground.policy.hf import HFPolicy  # noqa: E402


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
