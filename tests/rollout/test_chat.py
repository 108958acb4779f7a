"""ChatRenderer: observation turns continue the context exactly as the template would render it."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("transformers", reason="needs the [train] extra")

from rollout_helpers import tiny_policy

from trialground.rollout.chat import ChatRenderer

CHATML = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return tiny_policy(tmp_path_factory.mktemp("tiny")).tokenizer


def test_observation_continues_the_template(tokenizer) -> None:  # type: ignore[no-untyped-def]
    r = ChatRenderer(tokenizer)
    prompt = r.prompt_ids([{"role": "user", "content": "hi"}])
    answer = [*tokenizer.encode("ok", add_special_tokens=False), tokenizer.eos_token_id]
    obs = r.observation_ids("out: 3", after=answer)
    full = tokenizer.decode(prompt + answer + obs)
    expected = tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "out: 3"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert full == expected
    # a policy that stopped without its eos (length / stop string) gets the close marker from the env side
    cut = tokenizer.encode("ok", add_special_tokens=False)
    assert tokenizer.decode(prompt + cut + r.observation_ids("out: 3", after=cut)) == expected
    # a tool turn is rendered with its own role marker
    assert "<|tool|>" in tokenizer.decode(r.observation_ids("x", role="tool", after=answer))


def test_other_templates_and_refusals(tokenizer) -> None:  # type: ignore[no-untyped-def]
    chatml = copy.deepcopy(tokenizer)
    chatml.chat_template = CHATML
    r = ChatRenderer(chatml)
    text = chatml.decode(r.observation_ids("obs", after=[]))
    assert text == "<|im_end|>\n<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n"
    last_only = copy.deepcopy(tokenizer)
    last_only.chat_template = "{{ messages[-1]['content'] }}"
    with pytest.raises(ValueError, match="not append-only"):
        ChatRenderer(last_only).observation_ids("obs", after=[])
    none = copy.deepcopy(tokenizer)
    none.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        ChatRenderer(none)
