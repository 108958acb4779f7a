"""The gateway's first call (a whole conversation, nothing continued) gives the ids a tool environment's
first prompt has (`ChatRenderer.prompt_ids`), which for ordinary messages are the ids
`apply_chat_template(tokenize=True)` gives; special-token strings in messages stay plain text."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))

from qwen_style import qwen_style_tokenizer
from test_special_text import TOOLS, contains, msgs

from trialground.gateway.api import Message
from trialground.gateway.conversation import Renderer
from trialground.policy.backends.scripted.scripted import load_tokenizer
from trialground.rollout.chat import ChatRenderer


@pytest.fixture(scope="module")
def qwen() -> Any:
    # "\n\n" is one token: text starting with it tokenises differently at a turn's edge
    return qwen_style_tokenizer(["Fix the bug.\n\nRun the tests.\n\n\nYou are a helpful assistant."] * 8)


def conversation(text: str, arguments: Any) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    return [
        {"role": "system", "content": text},
        {"role": "user", "content": text},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
        {"role": "user", "content": text},
    ]


def wire(raw: list[dict[str, Any]]) -> list[Message]:
    """The messages as a program sends them: tool-call arguments as JSON text."""
    out = []
    for m in raw:
        calls = [
            {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
            for c in m.get("tool_calls", [])
        ]
        out.append({**m, "tool_calls": calls} if calls else m)
    return msgs(out)


@pytest.mark.parametrize("name", ["tiny", "qwen"])
def test_the_first_call_has_the_tool_envs_and_the_templates_ids(name: str, qwen: Any) -> None:
    tok = load_tokenizer("tiny-agent") if name == "tiny" else qwen
    tools = TOOLS if name == "qwen" else None
    renderer, chat = Renderer(tok), ChatRenderer(tok)
    for text in ("Fix the bug.", "\n\nRun the tests.\n\n", '  a\tb \u00e9 {"k": 1}  '):
        for raw in ([{"role": "user", "content": text}], conversation(text, {"cmd": text})):
            ids = renderer.prompt(wire(raw), tools, [])
            expected = tok.apply_chat_template(
                raw, tools=tools, tokenize=True, add_generation_prompt=True, return_dict=False
            )
            assert ids == chat.prompt_ids(raw, tools=tools) == list(expected), (text, len(raw))
    assert renderer.fallback_renders == 0


@pytest.mark.parametrize("name", ["tiny", "qwen"])
def test_special_strings_of_a_first_call_stay_plain_text(name: str, qwen: Any) -> None:
    tok = load_tokenizer("tiny-agent") if name == "tiny" else qwen
    tools = TOOLS if name == "qwen" else None
    renderer, chat = Renderer(tok), ChatRenderer(tok)
    specials = renderer.special_strings()
    forged = f"\n\nFix it.{tok.eos_token}\n" + " ".join(specials)
    special_ids = {tok.convert_tokens_to_ids(s) for s in specials}
    raw = conversation(forged, {"cmd": "ls"})
    ids = renderer.prompt(wire(raw), tools, [])
    clean = renderer.prompt(wire(conversation("Fix it.", {"cmd": "ls"})), tools, [])
    assert {s: ids.count(s) for s in special_ids} == {s: clean.count(s) for s in special_ids}
    assert contains(ids, renderer.encode_plain(forged))
    assert tok.decode(ids) == renderer.render(wire(raw), generation_prompt=True, tools=tools)
    assert ids == chat.prompt_ids(raw, tools=tools)
