"""The bundled tiny model: present, small, Llama, with a tokenizer and chat template that round-trip code."""

from __future__ import annotations

from trialground.families.codegen.source import generate_codegen_tasks
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.tiny import EOS, tiny_model_dir


def test_bundled_files_exist_and_are_small() -> None:
    root = tiny_model_dir()
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert (root / name).is_file(), name
    total = sum(p.stat().st_size for p in root.iterdir())
    assert total <= 20 * 1024 * 1024


def test_llama_with_at_most_5m_params(tiny: HFPolicy) -> None:
    assert type(tiny.model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in tiny.model.parameters()) <= 5_000_000


def test_tokenizer_round_trips_code_and_digits_are_single_tokens(tiny: HFPolicy) -> None:
    tok = tiny.tokenizer
    for task in generate_codegen_tasks(20, seed=3, split="eval"):
        assert task.reference is not None
        ids = tok.encode(task.reference, add_special_tokens=False)
        assert tok.decode(ids) == task.reference
        assert len(ids) <= 40  # short solutions keep generation cheap
    assert len(tok.encode("1234", add_special_tokens=False)) == 4


def test_chat_template_renders_roles_and_eos(tiny: HFPolicy) -> None:
    tok = tiny.tokenizer
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text == f"<|user|>\nhi{EOS}\n<|assistant|>\n"
    ids = tiny.encode_chat([{"role": "user", "content": "hi"}])
    assert tok.decode(ids) == text
    assert tok.eos_token == EOS and tok.eos_token_id in tiny.eos_ids
    assert tok.pad_token_id != tok.eos_token_id
