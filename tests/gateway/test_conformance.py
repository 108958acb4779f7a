# ruff: noqa: E501  (the chat templates below are data: one jinja line per rendering rule)
"""`policy check-template` on locally built tokenizers in the styles of four template families: Qwen2.5
(`<tool_call>` tags, one trajectory), Qwen3 (earlier reasoning stripped: segments), Llama 3.1 (`ipython`
tool role, `<|python_tag|>` special) and Mistral (`[TOOL_CALLS]` special)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trialground.gateway.conformance import check, load_tokenizer_dir

pytest.importorskip("transformers")

SYS = "{% if messages[0].role == 'system' %}{% set sys = messages[0].content %}{% set msgs = messages[1:] %}{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
CALLS_TAGS = "{% for c in m.tool_calls or [] %}{{ '\\n' if m.content else '' }}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}"
QWEN25 = (
    SYS
    + "<|im_start|>system\n{{ sys }}{% if tools %}\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}<|im_end|>\n"
    "{% for m in msgs %}{% if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content or '' }}"
    + CALLS_TAGS
    + "<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen3: an assistant turn before the last user message loses its <think> block.
QWEN3 = QWEN25.replace(
    "{% for m in msgs %}",
    "{% set ns = namespace(last=-1) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{% for m in msgs %}",
).replace(
    "<|im_start|>assistant\n{{ m.content or '' }}",
    "<|im_start|>assistant\n{{ (m.content or '').split('</think>')[-1].lstrip('\\n') if loop.index0 < ns.last else (m.content or '') }}",
)
LLAMA31 = (
    "<|begin_of_text|>"
    + SYS
    + "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n{{ sys }}<|eot_id|>"
    "{% for m in msgs %}{% if m.role == 'assistant' and m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% for c in m.tool_calls %}{{ {'name': c.function.name, 'parameters': c.function.arguments} | tojson }}{% endfor %}<|eot_id|>"
    "{% elif m.role in ('tool', 'ipython') %}<|start_header_id|>ipython<|end_header_id|>\n\n{{ m.content }}<|eot_id|>"
    "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
MISTRAL = (
    "<s>" + SYS + "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "{% for m in msgs %}{% if m.role == 'user' %}[INST]{{ sys + '\\n\\n' if loop.first and sys else '' }}{{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | map(attribute='function') | map('tojson') | join(', ') | replace('\"arguments\"', '\"arguments\"') | format_calls }}</s>"
    "{% elif m.role == 'assistant' %}{{ m.content }}</s>"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ {'content': m.content} | tojson }}[/TOOL_RESULTS]{% endif %}{% endfor %}"
)
# (jinja has no `format_calls`: the Mistral calls are written out with a loop instead)
MISTRAL = MISTRAL.replace(
    "{{ m.tool_calls | map(attribute='function') | map('tojson') | join(', ') | replace('\"arguments\"', '\"arguments\"') | format_calls }}",
    "[{% for c in m.tool_calls %}{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}{{ ', ' if not loop.last else '' }}{% endfor %}]",
)

FAMILIES = {
    "qwen25": (QWEN25, "<|im_end|>", ["<|im_start|>", "<|im_end|>"], ["<tool_call>", "</tool_call>"]),
    "qwen3": (QWEN3, "<|im_end|>", ["<|im_start|>", "<|im_end|>"], ["<tool_call>", "</tool_call>"]),
    "qwen25_special_tags": (
        QWEN25,
        "<|im_end|>",
        ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
        [],
    ),
    "llama31": (
        LLAMA31,
        "<|eot_id|>",
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"],
        [],
    ),
    "mistral": (
        MISTRAL,
        "</s>",
        [
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ],
        [],
    ),
}


def build(tmp_path: Path, family: str) -> Path:
    """A byte-level BPE tokenizer with the family's special tokens and template, saved and reloaded."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    template, eos, specials, plain = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        '{"name": "bash", "arguments": {"command": "ls"}}',
        "solution.py is broken; fix it.",
        "I should look first.",
    ]
    tok.train_from_iterator(
        corpus * 20, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, additional_special_tokens=[s for s in specials if s != eos]
    )
    if plain:
        fast.add_tokens(plain)  # added, not special: Qwen's own tool tags
    fast.chat_template = template
    out = tmp_path / family
    fast.save_pretrained(out)
    return out


@pytest.mark.parametrize(
    ("family", "tool_role", "mode", "special"),
    [
        ("qwen25", "tool", "trajectory", ()),
        ("qwen3", "tool", "segments", ()),
        ("qwen25_special_tags", "tool", "trajectory", ("<tool_call>", "</tool_call>")),
        ("llama31", "ipython", "trajectory", ("<|python_tag|>",)),
        ("mistral", "tool", "trajectory", ("[TOOL_CALLS]",)),
    ],
)
def test_four_template_styles(
    tmp_path: Path, family: str, tool_role: str, mode: str, special: tuple[str, ...]
) -> None:
    report = check(load_tokenizer_dir(str(build(tmp_path, family))), tool_role=tool_role)
    assert report.mode == mode, report.text()
    assert report.special_tags == special, report.text()
    # tool results carrying every special-token string: text, split from the template's markers exactly
    assert report.message_text == "exact", report.text()
    calls = [t for t in report.turns if t.tool_call is not None]
    assert len(calls) == 2 and all(t.emitted_roundtrip and t.template_roundtrip for t in calls), report.text()
    if family == "qwen3":  # the follow-up user turn strips the earlier <think>: the prefix breaks there
        assert [t.prefix_preserved for t in report.turns] == [True, False, True]
        assert report.segments == 2
    else:
        assert all(t.prefix_preserved for t in report.turns), report.text()
    assert {
        "qwen25": "tags",
        "qwen3": "tags",
        "qwen25_special_tags": "tags",
        "llama31": "llama3",
        "mistral": "mistral",
    }[family] == report.style
