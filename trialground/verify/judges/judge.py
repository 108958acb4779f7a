"""Reward models and judges behind one interface, plus the cross-checks that keep them honest.

- `Judge.score(task, submission) -> float in [0, 1]`.
- `OpenAIJudge`: any OpenAI-compatible `/chat/completions` endpoint (httpx). The reply must contain
  `SCORE: <number in [0, 1]>` (last one wins); anything else is a `VerifierError` (never a silent 0). A
  request whose connection failed is sent once more.
- `HFClassifierJudge`: a local Hugging Face sequence-classification model; the score is the softmax
  probability of label `positive_label` for the text `prompt [SEP] submission`. Needs the `train` extra.
- `disagreement_rate`: on a sample, how often the judge (score >= threshold) disagrees with rule verdicts.
- `CanaryCheck`: re-scores a labelled canary set with a judge; reports accuracy and whether it is below
  `min_accuracy` (run at every evaluation with the rule verifier's canaries, `canary.py`).
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import re
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from trialground.errors import VerifierError
from trialground.tasks.model import Task

JUDGE_PROMPT = (
    "You grade a submission to a task. Reply with a short reason, then a final line `SCORE: x` where x is "
    "a number from 0 (wrong) to 1 (fully correct).\n\n# Task\n{prompt}\n\n# Submission\n{submission}\n"
)
_SCORE = re.compile(r"SCORE\s*[:=]\s*([01](?:\.\d+)?|\.\d+)", re.IGNORECASE)


class Judge(abc.ABC):
    @abc.abstractmethod
    async def score(self, task: Task, submission: str) -> float:
        """A score in [0, 1]; raises VerifierError when no score could be obtained."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Free clients / models."""


class OpenAIJudge(Judge):
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        prompt: str = JUDGE_PROMPT,
        timeout_s: float = 60.0,
        max_tokens: int = 256,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.model, self.prompt, self.max_tokens = model, prompt, max_tokens

    async def score(self, task: Task, submission: str) -> float:
        body = {
            "model": self.model,
            "messages": [
                {"role": "user", "content": self.prompt.format(prompt=task.prompt, submission=submission)}
            ],
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        try:
            try:
                resp = await self._client.post("/chat/completions", json=body)
            except httpx.TransportError:  # a dropped or refused connection: once more, on a new one
                resp = await self._client.post("/chat/completions", json=body)
            resp.raise_for_status()
            text = resp.json()["choices"][0]["message"]["content"] or ""
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as e:
            raise VerifierError(f"judge endpoint failed: {type(e).__name__}: {e}", kind="judge_http") from e
        found = _SCORE.findall(text)
        if not found:
            raise VerifierError(f"judge reply has no SCORE line: {text[-200:]!r}", kind="judge_parse")
        value = float(found[-1])
        if not 0.0 <= value <= 1.0:
            raise VerifierError(f"judge score {value} outside [0, 1]", kind="judge_parse")
        return value

    async def close(self) -> None:
        await self._client.aclose()


class HFClassifierJudge(Judge):
    """Scores with a local sequence-classification model (path or already-loaded model + tokenizer)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        positive_label: int = 1,
        max_length: int = 512,
        device: str = "cpu",
    ) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if isinstance(model, str):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForSequenceClassification.from_pretrained(model)
        if tokenizer is None:
            raise VerifierError("HFClassifierJudge needs a tokenizer", kind="judge_config")
        self._torch = torch
        self.model = model.to(device).eval()
        self.tokenizer, self.positive_label, self.max_length, self.device = (
            tokenizer,
            positive_label,
            max_length,
            device,
        )
        self._lock = asyncio.Lock()

    def _score_sync(self, text_a: str, text_b: str) -> float:
        enc = self.tokenizer(text_a, text_b, truncation=True, max_length=self.max_length, return_tensors="pt")
        enc = {
            k: v.to(self.device)
            for k, v in enc.items()
            if k in ("input_ids", "attention_mask", "token_type_ids")
        }
        with self._torch.no_grad():
            logits = self.model(**enc).logits  # [1, num_labels]
        return float(logits.softmax(-1)[0, self.positive_label])

    async def score(self, task: Task, submission: str) -> float:
        async with self._lock:  # one forward at a time: the model is not re-entrant across threads
            return await asyncio.to_thread(self._score_sync, task.prompt, submission)


def disagreement_rate(
    rule_passed: Sequence[bool], judge_scores: Sequence[float], threshold: float = 0.5
) -> float:
    """Fraction of the sample where `score >= threshold` differs from the rule verdict."""
    if len(rule_passed) != len(judge_scores):
        raise ValueError("rule verdicts and judge scores differ in length")
    if not rule_passed:
        return 0.0
    return sum((s >= threshold) != r for r, s in zip(rule_passed, judge_scores, strict=True)) / len(
        rule_passed
    )


class CrossCheck:
    """Which rule-graded submissions the judge also scores: a deterministic sample of `rate`, by a hash of
    task id and submission (the step's metrics compare the two: `verify/judge_disagreement`)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def sampled(self, task: Task, submission: str) -> bool:
        if self.rate <= 0.0:
            return False
        digest = hashlib.blake2b(f"{task.id}\0{submission}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64 < self.rate


class Canary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Task
    submission: str
    label: bool


class CanaryReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int
    accuracy: float
    n: int
    failed: bool
    errors: int


class CanaryCheck:
    """Re-checks a judge against labelled canaries (the loop runs it at every evaluation,
    `trialground.verify.detectors.canary`). `failed`: accuracy below `min_accuracy`."""

    def __init__(
        self, canaries: Sequence[Canary], *, min_accuracy: float = 0.8, threshold: float = 0.5
    ) -> None:
        self.canaries = list(canaries)
        self.min_accuracy, self.threshold = min_accuracy, threshold

    async def run(self, judge: Judge, step: int) -> CanaryReport:
        right = errors = 0
        for c in self.canaries:
            try:
                right += (await judge.score(c.task, c.submission) >= self.threshold) == c.label
            except VerifierError:
                errors += 1  # an unanswered canary counts as wrong
        n = len(self.canaries)
        acc = right / n if n else 1.0
        return CanaryReport(step=step, accuracy=acc, n=n, failed=acc < self.min_accuracy, errors=errors)
