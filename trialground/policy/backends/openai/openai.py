"""Any OpenAI-compatible endpoint as a policy, for evaluation only.

What it can and cannot do:
- It can evaluate (and sample for) any endpoint that speaks the OpenAI API: OpenAI itself, a hosted
  model, a vLLM or other server, with text in and text out.
- It cannot train: it has no way to give an endpoint new weights, and its tokens are a local
  re-encoding of the endpoint's text, not the tokens the endpoint sampled. `trialground train` refuses
  it before it starts. To train with decoupled inference servers use `policy.backend: remote`
  (token ids in and out, sampling logprobs, a weight push after every step; docs/serving.md).

Every request states the whole sampling distribution (`sampling_parity.wire_fields`: top_k, min_p and
the penalties besides temperature and top_p), so no server default changes it; with
`policy.sampling_extras: false` (endpoints that refuse fields outside OpenAI's API) only OpenAI's fields
are sent, and a run that sets top_k, min_p or repetition_penalty is refused.

The policy interface speaks token ids; an HTTP endpoint speaks text. A local tokenizer
(`PolicyConfig.tokenizer`) bridges them: prompt ids are decoded to text (special tokens kept, so a
chat-templated prompt arrives as rendered) and the returned text is encoded back.

- api "completions" (default): POST {base_url}/v1/completions with the rendered prompt and `logprobs: 0`
  (the sampled tokens' logprobs, no alternatives).
  Faithful: the endpoint continues exactly the text the agent loop built.
- api "chat": POST {base_url}/v1/chat/completions with `logprobs: true`. The agent loop's prompts are
  already rendered with the chat template, and the endpoint applies its own: `generate` sends the
  messages each prompt was rendered from (`unrender.Unrenderer`: split at the template's markers, and
  only where the template renders them back to exactly the prompt; otherwise a `PolicyError`), so the
  template is applied once. `chat(messages, params)` sends real messages.

`Generation.logprobs` holds the endpoint's per-token logprobs only when it returned one for each token of
the local re-encoding of its text (the endpoint's tokenizer split the text the same way); otherwise,
and for the appended end-of-turn token, NaN. They are informative only: nothing trains on them. Requests
run concurrently (at most `max_concurrency`). A connection error, a 429 or a 5xx answer is retried up to
`max_retries` times with exponential backoff and jitter, waiting at least what `Retry-After` asks, within
`retry_total_s` (`trialground.retry`); anything else raises `PolicyError`.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from trialground.errors import PolicyError
from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.sampling_parity import wire_fields
from trialground.policy.unrender import Unrenderer
from trialground.retry import RetriesExhausted, send_with_retries

_FINISH = {"stop": "stop", "length": "length", "eos": "eos"}


class OpenAIPolicy(Policy):
    trainable = False  # see the module docstring: no weight push, re-tokenised text

    def __init__(self, config: PolicyConfig, *, tokenizer: Any = None) -> None:
        if not config.base_url:
            raise PolicyError("the openai backend needs policy.base_url (e.g. http://localhost:8000)")
        self.config = config
        if tokenizer is None:
            from trialground.policy.backends.scripted import load_tokenizer

            tokenizer = load_tokenizer(config.tokenizer)
        self._tokenizer = tokenizer
        self.version = 0
        self._base = config.base_url.rstrip("/")
        if not self._base.endswith("/v1"):
            self._base += "/v1"
        key = os.environ.get(config.api_key_env)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._unrender = Unrenderer(tokenizer)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        texts = [self._tokenizer.decode(list(p)) for p in prompts]
        async with httpx.AsyncClient(timeout=self.config.request_timeout_s, headers=self._headers) as client:
            if self.config.api == "completions":
                jobs = [self._complete(client, text, params) for text in texts]
            else:
                jobs = [self._chat(client, self._unrender.messages(text), params) for text in texts]
            return list(await asyncio.gather(*jobs))

    async def chat(self, messages: Sequence[Mapping[str, str]], params: SamplingParams) -> Generation:
        """One chat completion of real messages (api "chat" endpoints)."""
        async with httpx.AsyncClient(timeout=self.config.request_timeout_s, headers=self._headers) as client:
            return await self._chat(client, [dict(m) for m in messages], params)

    def _body(self, params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": params.max_new_tokens,
            **wire_fields(params, extras=self.config.sampling_extras),
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    async def _complete(self, client: httpx.AsyncClient, prompt: str, params: SamplingParams) -> Generation:
        choice = await self._post(
            client, "/completions", {**self._body(params), "prompt": prompt, "logprobs": 0}
        )
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        return self._generation(str(choice.get("text", "")), choice, logprobs, params)

    async def _chat(
        self, client: httpx.AsyncClient, messages: list[dict[str, str]], params: SamplingParams
    ) -> Generation:
        body = {**self._body(params), "messages": messages, "logprobs": True}
        choice = await self._post(client, "/chat/completions", body)
        content = (choice.get("message") or {}).get("content") or ""
        logprobs = [c.get("logprob") for c in ((choice.get("logprobs") or {}).get("content") or [])]
        return self._generation(str(content), choice, logprobs or None, params)

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self._base + path

        async def send(_attempt: int) -> httpx.Response:
            async with self._semaphore:  # held for the request only, not for the wait before a retry
                return await client.post(url, json=body)

        try:
            resp = await send_with_retries(send, self.config.backoff())
        except RetriesExhausted as exc:
            raise PolicyError(f"POST {exc}", kind="http") from exc
        except httpx.HTTPError as exc:
            raise PolicyError(f"POST {url}: {type(exc).__name__}: {exc}", kind="http") from exc
        if resp.status_code != 200:
            raise PolicyError(f"POST {url}: HTTP {resp.status_code}: {resp.text[:200]}", kind="http")
        try:
            return dict(resp.json()["choices"][0])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise PolicyError(f"POST {url}: malformed answer: {resp.text[:200]}", kind="protocol") from exc

    def _generation(
        self, text: str, choice: Mapping[str, Any], logprobs: Sequence[Any] | None, params: SamplingParams
    ) -> Generation:
        reason = _FINISH.get(str(choice.get("finish_reason")), "stop")
        matched = choice.get("stop_reason")  # vLLM names the stop string that matched; OpenAI does not
        if reason == "stop" and isinstance(matched, str) and matched in params.stop:
            text += matched  # our contract keeps the stop string; endpoints drop it
        ids = list(self._tokenizer.encode(text, add_special_tokens=False))
        numeric = logprobs is not None and all(isinstance(x, int | float) for x in logprobs)
        if numeric and logprobs is not None and len(logprobs) == len(ids):
            lps = [float(x) for x in logprobs]
        else:
            lps = [math.nan] * len(ids)
        if reason == "stop" and not any(s in text for s in params.stop):
            # the endpoint's own end of turn: record it as eos, with the eos token, like the hf policy
            reason = "eos"
            ids.append(self._tokenizer.eos_token_id)
            lps.append(math.nan)  # endpoints do not report the end-of-turn token's logprob
        return Generation(
            token_ids=tuple(ids), logprobs=tuple(lps), text=text, finish_reason=reason, version=self.version
        )  # type: ignore[arg-type]

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        raise PolicyError(
            "the openai backend is for evaluation only: it cannot give an endpoint new weights (train "
            "with policy.backend=remote against vLLM servers or `trialground policy serve`)",
            kind="unsupported",
        )
