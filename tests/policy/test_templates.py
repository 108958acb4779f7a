"""Base models: a tokenizer without a chat template renders with `policy.chat_template` (`plain` by
default), token-exact over multi-turn episodes and through the gateway's conformance check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="needs the [train] extra")

from transformers import AutoTokenizer

from trialground.errors import PolicyError
from trialground.gateway.conformance import check
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.config import PolicyConfig
from trialground.policy.templates import PLAIN, choose_template, with_template
from trialground.policy.tiny import tiny_model_dir
from trialground.rollout.chat import ChatRenderer


@pytest.fixture(scope="module")
def bare_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled tiny model without its chat template: a base model's directory."""
    out = tmp_path_factory.mktemp("bare") / "m"
    shutil.copytree(tiny_model_dir(), out)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def bare(bare_dir: Path) -> Any:
    tok = AutoTokenizer.from_pretrained(str(bare_dir))
    assert not tok.chat_template
    return tok


def test_auto_picks_plain_only_without_a_template(bare: Any, tmp_path: Path) -> None:
    assert choose_template(bare, "auto") == PLAIN
    with pytest.raises(ValueError, match="no chat template"):
        choose_template(bare, "own")
    own = AutoTokenizer.from_pretrained(str(tiny_model_dir()))
    assert choose_template(own, "auto") is None  # the tokenizer's own template stays
    jinja = tmp_path / "t.jinja"
    jinja.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert choose_template(bare, str(jinja)) == jinja.read_text()
    with pytest.raises(ValueError, match="neither"):
        choose_template(bare, "plian")


def test_the_hf_policy_loads_a_base_model_and_own_refuses_it(bare_dir: Path) -> None:
    policy = HFPolicy(PolicyConfig(model=str(bare_dir)))
    assert policy.tokenizer.chat_template == PLAIN
    with pytest.raises(PolicyError, match="no chat template"):
        HFPolicy(PolicyConfig(model=str(bare_dir), chat_template="own"))


def test_plain_renders_the_prompt_as_text_and_episodes_append_only(bare: Any) -> None:
    tok = with_template(bare, "plain")
    r = ChatRenderer(tok)
    prompt = "def add(a, b):\n    return"
    ids = r.prompt_ids([{"role": "user", "content": prompt}])
    assert ids == tok.encode(prompt, add_special_tokens=False)  # nothing added: the model continues it
    answer = [*tok.encode(" a + b", add_special_tokens=False), tok.eos_token_id]
    obs = r.observation_ids("1 passed", role="tool", after=answer)
    cut = tok.encode(" a + b", add_special_tokens=False)  # stopped by a stop string: the eos is appended
    expected = tok.apply_chat_template(
        [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": " a + b"},
            {"role": "tool", "content": "1 passed"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert expected == prompt + " a + b" + tok.eos_token + "\n\n1 passed\n\n"
    assert tok.decode(ids + answer + obs) == expected
    assert tok.decode(ids + cut + r.observation_ids("1 passed", role="tool", after=cut)) == expected
    system = r.prompt_ids([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q"}])
    assert tok.decode(system) == "Be brief.\n\nQ"


def test_check_template_reports_token_exact_turns_with_plain(bare: Any) -> None:
    report = check(with_template(bare, "plain"))
    assert report.ok and report.mode == "trajectory" and report.message_text == "exact"
    assert all(t.prefix_preserved for t in report.turns)
