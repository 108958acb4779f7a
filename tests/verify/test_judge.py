"""Judges: an OpenAI-compatible endpoint over real loopback HTTP, a tiny local HF classifier,
the rule-vs-judge disagreement rate and the canary re-check."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from app_server import serve
from fastapi import FastAPI, HTTPException
from reward_helpers import grade_scored, step_metrics

from trialground.errors import VerifierError
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.judges.judge import (
    Canary,
    CanaryCheck,
    HFClassifierJudge,
    OpenAIJudge,
    disagreement_rate,
)

TASK = Task(domain="qa", prompt="Name the capital of France.", verifier=VerifierSpec(kind="judge"))


def _app(seen: list[dict]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def chat(body: dict) -> dict:
        seen.append(body)
        text = body["messages"][-1]["content"]
        if "EXPLODE" in text:
            raise HTTPException(status_code=500, detail="boom")
        if "GARBAGE" in text:
            reply = "I refuse to grade."
        elif "Paris" in text:
            reply = "Correct capital.\nSCORE: 0.9"
        else:
            reply = "Wrong.\nSCORE: 0.1"
        return {
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}
            ]
        }

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[dict]]]:
    seen: list[dict] = []
    with serve(_app(seen)) as url:
        yield f"{url}/v1", seen


async def test_openai_judge_over_http(server: tuple[str, list[dict]]) -> None:
    url, seen = server
    judge = OpenAIJudge(url, "judge-model", api_key="k")
    try:
        assert await judge.score(TASK, "It is Paris.") == 0.9
        assert await judge.score(TASK, "It is Lyon.") == 0.1
        with pytest.raises(VerifierError, match="SCORE line"):
            await judge.score(TASK, "GARBAGE")
        with pytest.raises(VerifierError, match="endpoint failed"):
            await judge.score(TASK, "EXPLODE")
    finally:
        await judge.close()
    assert seen[0]["model"] == "judge-model" and seen[0]["temperature"] == 0.0
    assert "Name the capital of France." in seen[0]["messages"][0]["content"]


async def test_canary_recheck_and_disagreement(server: tuple[str, list[dict]]) -> None:
    url, _ = server
    judge = OpenAIJudge(url, "m")
    canaries = [
        Canary(task=TASK, submission="Paris", label=True),
        Canary(task=TASK, submission="Lyon", label=False),
        Canary(task=TASK, submission="Paris!", label=False),  # mislabelled on purpose: judge says yes
        Canary(task=TASK, submission="GARBAGE", label=True),  # unanswerable counts as wrong
    ]
    check = CanaryCheck(canaries, min_accuracy=0.75)
    try:
        report = await check.run(judge, step=20)
    finally:
        await judge.close()
    assert report.step == 20 and report.accuracy == 0.5 and report.errors == 1 and report.failed
    assert disagreement_rate([True, False, True, False], [0.9, 0.1, 0.2, 0.6]) == 0.5
    assert disagreement_rate([], []) == 0.0


@pytest.mark.slow
async def test_local_hf_classifier_judge(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "name", "the", "capital", "of", "france", "paris", "lyon"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, num_labels=2,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(config)
    model.save_pretrained(tmp_path)
    fast.save_pretrained(tmp_path)
    judge = HFClassifierJudge(str(tmp_path))  # loaded from disk like a real reward model, no hub
    a = await judge.score(TASK, "paris")
    b = await judge.score(TASK, "paris")
    c = await judge.score(TASK, "lyon")
    assert 0.0 <= a <= 1.0 and a == b  # deterministic
    enc = fast(TASK.prompt, "paris", return_tensors="pt")
    with torch.no_grad():
        expected = model.eval()(**dict(enc)).logits.softmax(-1)[0, 1]  # [1, 2] -> P(label 1)
    assert a == pytest.approx(float(expected), abs=1e-6)
    assert c != a


async def test_grader_cross_checks_rule_rewards_on_a_sample(server: tuple[str, list[dict]]) -> None:
    from trialground.sandbox.base import SandboxConfig
    from trialground.verify.config import RewardConfig
    from trialground.verify.grader import make_grader

    url, _ = server
    grader = make_grader(SandboxConfig(), RewardConfig(judge_sample_rate=1.0), judge=OpenAIJudge(url, "m"))

    def exact(answer: str) -> Task:
        return Task(
            domain="qa",
            prompt="Name the capital.",
            verifier=VerifierSpec(kind="exact", params={"answer": answer}),
        )

    try:
        g1, r1 = await grade_scored(grader, exact("Paris"), "Answer: Paris")  # rule yes, judge 0.9: agree
        g2, r2 = await grade_scored(grader, exact("Paris"), "Answer: Lyon")  # rule no, judge 0.1: agree
        g3, r3 = await grade_scored(grader, exact("Lyon"), "Answer: Lyon")  # rule yes, judge 0.1: disagree
    finally:
        await grader.close()
    judge = r1.component("judge")
    assert judge is not None and judge.value == 0.9 and judge.weight == 0.0  # logged, not paid
    assert r1.total == 1.0 and r2.total == 0.0 and r3.total == 1.0
    metrics = step_metrics([g1, g2, g3], grader.reward_config)
    assert metrics["verify/gradings"] == 3.0 and metrics["verify/pass_rate"] == pytest.approx(2 / 3)
    assert metrics["hack/flag_rate"] == 0.0
    assert metrics["verify/judge_samples"] == 3.0
    assert metrics["verify/judge_disagreement"] == pytest.approx(1 / 3)
