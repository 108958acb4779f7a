"""A submission too long for the judge fails (score 0, kept in training) instead of becoming an
infrastructure error that drops it; other judge errors stay infrastructure. A real local HTTP server that
answers like vLLM past its context length and counts the requests it gets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from app_server import serve
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from reward_helpers import grade_scored

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.judges.config import JudgeConfig
from trialground.verify.verdict import Graded

CONTEXT_CHARS = 16_384  # a judge with a 4k-token context: well under max_submission_chars' default
TASK = Task(domain="writing", prompt="Name the capital of France.", verifier=VerifierSpec(kind="judge"))
PADDED = "Berlin. " + "filler " * 3000  # a wrong answer, 21,000 characters
VLLM_TOO_LONG = (
    "This model's maximum context length is 4096 tokens. However, you requested 5561 tokens (5305 in the "
    "messages, 256 in the completion). Please reduce the length of the messages or completion."
)
# (status, message) by a line `ANSWER=<case>` in the submission
ANSWERS: dict[str, tuple[int, str]] = {
    "unknown_model": (400, "The model `judge` does not exist."),
    "bad_param": (422, "temperature: Input should be a valid number"),
    "not_found": (404, "Not Found: prompt is too long"),  # the wording, not a too-long status
    "openai_413": (413, "Request too large: prompt is too long for this model"),
}


def _error(status: int, message: str) -> JSONResponse:
    body = {"object": "error", "message": message, "type": "BadRequestError", "code": status}
    return JSONResponse(body, status_code=status)


def _app(seen: list[str]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: dict) -> Any:
        prompt = body["messages"][-1]["content"]
        seen.append(prompt)
        case = next((c for c in ANSWERS if f"ANSWER={c}\n" in prompt), None)
        if case is not None:
            return _error(*ANSWERS[case])
        if len(prompt) > CONTEXT_CHARS:  # vLLM's check against max_model_len
            return _error(400, VLLM_TOO_LONG)
        reply = "Correct capital.\nSCORE: 1" if "Paris" in prompt else "The answer is wrong.\nSCORE: 0"
        return {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": reply}}]}

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    with serve(_app(seen)) as url:
        yield f"{url}/v1", seen


async def grade(config: RewardConfig, submission: str) -> tuple[Graded, Any]:
    grader = make_grader(SandboxConfig(), config)
    try:
        return await grade_scored(grader, TASK, submission)
    finally:
        await grader.close()


def judged_by(url: str, **fields: Any) -> RewardConfig:
    return RewardConfig(
        judge=JudgeConfig(kind="openai", base_url=url, model="judge", max_retries=0, **fields)
    )


def flags(graded: Graded) -> set[str]:
    return {f.name for f in graded.verdict.flags}


async def test_a_submission_past_the_judge_context_is_scored_zero_and_kept(
    server: tuple[str, list[str]],
) -> None:
    url, seen = server
    before = len(seen)
    graded, reward = await grade(judged_by(url), PADDED)
    assert len(seen) == before + 1  # within max_submission_chars: sent, and the endpoint said 400
    assert graded.verdict.error is None, graded.verdict.error
    assert not graded.verdict.passed and graded.verdict.score == 0.0
    assert "maximum context length" in graded.verdict.detail
    assert flags(graded) == {"judge_input_too_long"}
    assert reward.total == 0.0 and not reward.dropped  # a wrong answer keeps its negative advantage
    short, short_reward = await grade(judged_by(url), "Berlin.")  # the same answer, short: the same reward
    assert not short.verdict.passed and short.verdict.error is None and short_reward.total == 0.0


async def test_only_a_too_long_answer_is_the_submissions_failure(server: tuple[str, list[str]]) -> None:
    url, _ = server
    graded, reward = await grade(judged_by(url), "ANSWER=openai_413\nParis")
    assert graded.verdict.error is None and not graded.verdict.passed and not reward.dropped
    assert flags(graded) == {"judge_input_too_long"}
    for case in ("unknown_model", "bad_param", "not_found"):  # a misconfigured judge never zeroes rewards
        graded, reward = await grade(judged_by(url), f"ANSWER={case}\nParis")
        error = graded.verdict.error
        assert error is not None and error.kind == "judge_http", (case, graded.verdict)
        assert reward.dropped, case
    graded, reward = await grade(judged_by(url), "Paris")  # the endpoint itself works
    assert graded.verdict.passed and reward.total == 1.0


async def test_the_length_bound_refuses_before_any_request(server: tuple[str, list[str]]) -> None:
    url, seen = server
    config = judged_by(url, max_submission_chars=100)
    before = len(seen)
    graded, reward = await grade(config, "Paris" + " " * 96)  # 101 characters: correct, but over the bound
    assert len(seen) == before  # no request at all
    assert graded.verdict.error is None and not graded.verdict.passed and graded.verdict.score == 0.0
    assert "max_submission_chars (100)" in graded.verdict.detail
    (flag,) = graded.verdict.flags
    assert flag.name == "judge_input_too_long" and "101 characters" in flag.evidence
    assert reward.total == 0.0 and not reward.dropped
    graded, reward = await grade(config, "Paris" + " " * 95)  # exactly the bound: judged
    assert len(seen) == before + 1 and graded.verdict.passed and reward.total == 1.0
