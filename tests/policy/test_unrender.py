# ruff: noqa: E501  (the chat templates below are data: one jinja line per rendering rule)
"""`policy.api: chat` sends the messages a prompt was rendered from, so the endpoint applies the chat
template once: the split back into messages (`policy/unrender.py`) on templates in the styles of the
bundled models, Qwen2.5 (a default system message), Llama 3.1 (a start-of-text marker, a fixed system
header) and Gemma (no system role: the system text opens the first user turn), and the prompt the
endpoint renders from them, recorded by a real gateway, equal to the prompt the agent loop built."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from trialground.errors import PolicyError
from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.policy.backends.openai.openai import OpenAIPolicy
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.unrender import Unrenderer

QWEN = (
    "{% if messages[0].role != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% set msgs = messages[1:] %}{% else %}{% set msgs = messages %}{% endif %}<|eot_id|>"
    "{% for m in msgs %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
GEMMA = (
    "<bos>{% if messages[0].role == 'system' %}{% set first = messages[0].content + '\n\n' %}{% set msgs = messages[1:] %}"
    "{% else %}{% set first = '' %}{% set msgs = messages %}{% endif %}"
    "{% for m in msgs %}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n"
    "{{ first if loop.first else '' }}{{ m.content }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
CALL = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
EPISODE = [
    {"role": "system", "content": "You have tools."},
    {"role": "user", "content": "Find the price.\nTwo lines."},
    {"role": "assistant", "content": CALL},
    {"role": "user", "content": "[exit 0]\nprices.csv"},
    {"role": "assistant", "content": "I will read it. " + CALL},
    {"role": "user", "content": "apricot,41"},
]


def _tokenizer(template: str | None) -> Any:
    tok = copy.deepcopy(load_tokenizer("tiny-agent"))
    if template is not None:
        tok.chat_template = template
    return tok


@pytest.mark.parametrize("template", [None, QWEN, LLAMA, GEMMA], ids=["tiny", "qwen", "llama", "gemma"])
@pytest.mark.parametrize("turns", [2, 3, 4, 6])
def test_a_render_splits_into_messages_the_template_renders_back(template: str | None, turns: int) -> None:
    tok = _tokenizer(template)
    for messages in (EPISODE[:turns], EPISODE[1:turns] or EPISODE[1:2]):
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        found = Unrenderer(tok).messages(prompt)
        assert tok.apply_chat_template(found, tokenize=False, add_generation_prompt=True) == prompt
        if template in (None, QWEN, LLAMA):  # each message is its own turn there
            said = [(m["role"], m["content"]) for m in messages if m["role"] != "system"]
            assert [(m["role"], m["content"]) for m in found if m["role"] != "system"] == said


def test_a_prompt_that_is_no_render_is_refused() -> None:
    unrender = Unrenderer(_tokenizer(None))
    for text in ["plain text", "<|user|>\nhi<|end|>\n"]:  # no render / no generation prompt
        with pytest.raises(PolicyError, match="not a render of the chat template"):
            unrender.messages(text)
    with pytest.raises(PolicyError, match="no chat template"):
        Unrenderer(_tokenizer("")).messages("x")


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(host="127.0.0.1", port=0, unix=False)
    await gw.start()
    yield gw
    await gw.stop()


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_the_endpoint_renders_the_prompt_the_loop_built(
    gateway: Gateway, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real gateway (the endpoint's own template, over a recording session): api chat and api
    completions make the endpoint sample from the same prompt ids, the ones the agent loop built. Before
    the fix api chat sent the whole render as one user message and the template was applied twice."""
    tok = load_tokenizer("tiny-agent")
    session = Session(
        ScriptedPolicy(["done"], tokenizer=tok), SamplingParams(), "tiny-agent", tool_role="user"
    )
    ep = gateway.open(session)
    monkeypatch.setenv("TG_TEST_KEY", ep.key)
    config = PolicyConfig(
        backend="openai", base_url=gateway.url + ep.path.removesuffix("/v1"), model="tiny-agent",
        tokenizer="tiny-agent", api=api, api_key_env="TG_TEST_KEY",
    )  # fmt: skip
    policy = OpenAIPolicy(config, tokenizer=tok)
    text = tok.apply_chat_template(EPISODE, tokenize=False, add_generation_prompt=True)
    prompt = list(tok.encode(text, add_special_tokens=False))
    (generation,) = await policy.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=8))
    assert generation.text == "done"
    (record,) = session.records
    assert list(record.prompt_ids) == prompt
