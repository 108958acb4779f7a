"""`trialground policy serve`'s OpenAI API as agent code uses it, through the real `openai` SDK against the
reference server over the bundled tiny model on a kernel-picked port: streaming gives the text the
non-streaming answer gives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from trialground.gateway.reference import ReferenceServer

openai = pytest.importorskip("openai")
pytest.importorskip("torch")

from trialground.policy.config import PolicyConfig  # noqa: E402
from trialground.policy.hf import HFPolicy  # noqa: E402

ASK: Any = [{"role": "user", "content": "Fix solution.py."}]


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    server = ReferenceServer(HFPolicy(PolicyConfig(model="tiny-agent")), served_name="tiny")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    server.shutdown()


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
