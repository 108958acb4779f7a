"""One episode's (or one server's) state behind the gateway, and the answers of both routes.

A `Session` answers with a `Generator` (the policy, or the run's batcher that shares generate calls
across episodes), under sampling defaults the request may override (temperature, top_p, top_k, min_p,
the penalties, max_tokens, stop, seed, n); `max_tokens` is capped by the room left in the context
budget, and a prompt that leaves no room is a 400 (`context_length_exceeded`), as OpenAI answers it.
Every call is recorded (`records`, `stitch.CallRecord`) when `record` is set. A session with a `budget`
(a harness episode's) admits requests and calls within it and ends the episode past it (`budget.py`);
rendering and tokenising run in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from trialground.errors import PolicyError
from trialground.gateway import toolstyle
from trialground.gateway.api import ChatRequest, CompletionRequest, Message, Sampling
from trialground.gateway.budget import (
    SessionBudget,
    Spent,
    connections_message,
    entry_refusal,
    max_token_chars,
    refusal,
    reserve_tokens,
)
from trialground.gateway.conversation import Renderer, Sampled, Turn, canonical
from trialground.gateway.logprobs import Alternatives, TopSource, chat_logprobs, completion_logprobs
from trialground.gateway.stitch import CallRecord
from trialground.policy.base import DISTRIBUTION_FIELDS, Generation, SamplingParams
from trialground.rollout.agent import Generator

T = TypeVar("T")

# What a request may set of the sampling distribution; what it omits comes from the session's defaults.
SAMPLING_FIELDS = (*DISTRIBUTION_FIELDS, "seed")


class GatewayError(Exception):
    """A request the gateway refuses: HTTP `status`, OpenAI error `code`."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclass
class Session:
    generator: Generator
    defaults: SamplingParams
    served_name: str
    max_context_tokens: int | None = None
    tool_style: str | None = None
    tool_role: str = "tool"
    record: bool = True
    # True: max_tokens is capped to the room left in the budget; False: a request past it is a 400
    cap_to_budget: bool = True
    records: list[CallRecord] = field(default_factory=list)
    history: list[Turn] = field(default_factory=list)
    truncated: bool = False
    budget: SessionBudget | None = None
    spent: Spent = field(default_factory=Spent)
    # set when a budget ends the episode: the harness environment stops the program
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    # the k most likely tokens per sampled position, for top_logprobs (None: the sampled token only)
    alternatives: TopSource | None = None
    # other names requests may give as `model` (a LoRA adapter loaded under its own name)
    aliases: frozenset[str] = frozenset()
    _renderer: Renderer | None = None

    @property
    def renderer(self) -> Renderer:
        if self._renderer is None:
            self._renderer = Renderer(self.generator.tokenizer, tool_role=self.tool_role)
        return self._renderer

    @property
    def style(self) -> str:
        return self.tool_style or toolstyle.detect(self.renderer.template_text)

    # ---------------------------------------------------------------- budget

    @property
    def body_limit(self) -> int | None:
        """The most bytes one request body of this session may hold (None: the gateway's own cap)."""
        return self.budget.body_bytes if self.budget is not None else None

    def end(self, why: str) -> None:
        """End the episode: its budget is spent (`why` is kept as the record of which)."""
        self.spent.exhausted = self.spent.exhausted or why
        self.ended.set()

    def connections_exceeded(self) -> None:
        """The session's listener refused a connection past the budget: the episode ends."""
        if self.budget is not None:
            self.end(connections_message(self.budget))

    def _refuse(self, refused: tuple[int, str, bool] | None) -> None:
        if refused is None:
            return
        status, message, ends = refused
        if ends:
            self.end(message)
        raise GatewayError(
            message, status=status, code="budget_exhausted" if status == 429 else "invalid_request"
        )

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """One request of this session, from before its body is read until it is answered: refused (429)
        when the session is spent or has its most requests in flight."""
        if self.budget is None:
            yield
            return
        self._refuse(entry_refusal(self.budget, self.spent))
        self.spent.inflight += 1
        try:
            yield
        finally:
            self.spent.inflight -= 1

    def _admit(self, rows: int, n: int) -> None:
        """Count a call against the budget, or refuse it (ending the episode when the budget is spent)."""
        if self.budget is None:
            return
        self._refuse(refusal(self.budget, self.spent, rows, n))
        self.spent.calls += 1
        self.spent.generations += rows * n

    def _reserve(self, params: SamplingParams, rows: int) -> tuple[SamplingParams, int]:
        """`params` with `max_new_tokens` cut to what the token budget has left for `rows` generations, and
        the tokens reserved (given back by `_settle`); the episode ends when not one token per row is left."""
        if self.budget is None:
            return params, 0
        per_row = reserve_tokens(self.budget, self.spent, rows, params.max_new_tokens)
        if per_row == 0:
            self._refuse((429, f"{self.budget.tokens} tokens generated, the episode's limit", True))
        if per_row < params.max_new_tokens:
            params = params.model_copy(update={"max_new_tokens": per_row})
        return params, per_row * rows

    def _settle(self, reserved: int, gens: Sequence[Generation]) -> None:
        """Replace a call's reservation by the tokens its generations hold."""
        if self.budget is not None:
            self.spent.tokens += sum(len(g.token_ids) for g in gens) - reserved

    # ---------------------------------------------------------------- shared

    async def _off_loop(self, fn: Callable[[], T]) -> T:
        """`fn()` (rendering, tokenising) in a worker thread, so the event loop other sessions share goes on
        (fast tokenizers encode without changing their state, so threads may share one)."""
        return await asyncio.to_thread(fn)

    def _fits(self, chars: int) -> None:
        """A text of `chars` characters that needs more tokens than the context budget holds is refused
        before it is tokenised (each token decodes to at most `max_token_chars` characters)."""
        if self.max_context_tokens is None:
            return
        most = self.max_context_tokens * max_token_chars(self.generator.tokenizer)
        if chars > most:
            self.truncated = self.truncated or self.record
            raise GatewayError(
                f"messages: {chars} characters cannot fit this episode's context budget of "
                f"{self.max_context_tokens} tokens",
                code="context_length_exceeded",
            )

    def _params(self, req: Sampling, prompt_len: int, max_tokens: int | None) -> SamplingParams:
        if req.model is not None and req.model != self.served_name and req.model not in self.aliases:
            raise GatewayError(
                f"model: the model `{req.model}` does not exist (this gateway serves `{self.served_name}`)",
                status=404,
                code="model_not_found",
            )
        update: dict[str, Any] = {}
        for name in SAMPLING_FIELDS:
            if getattr(req, name) is not None:
                update[name] = getattr(req, name)
        if update.get("top_k") == -1:
            update["top_k"] = 0
        if max_tokens is not None:
            update["max_new_tokens"] = max_tokens
        if req.stop is not None:
            update["stop"] = req.stops()
        try:
            params = SamplingParams.model_validate({**self.defaults.model_dump(), **update})
        except ValidationError as exc:
            raise GatewayError(describe(exc)) from exc
        if self.max_context_tokens is not None:
            room = self.max_context_tokens - prompt_len
            if room < 1:
                self.truncated = self.truncated or self.record
                raise GatewayError(
                    f"messages: the prompt is {prompt_len} tokens; this episode's context budget is "
                    f"{self.max_context_tokens}",
                    code="context_length_exceeded",
                )
            if params.max_new_tokens > room and not self.cap_to_budget:
                raise GatewayError(
                    f"prompt: {prompt_len} prompt tokens + max_tokens {params.max_new_tokens} exceed the "
                    f"model's maximum context length of {self.max_context_tokens} tokens",
                    code="context_length_exceeded",
                )
            if params.max_new_tokens > room:
                params = params.model_copy(update={"max_new_tokens": room})
        return params

    async def _sample(self, prompts: list[list[int]], n: int, params: SamplingParams) -> list[Generation]:
        rows = [p for p in prompts for _ in range(n)]
        try:
            gens = await self.generator.generate(rows, params)
        except PolicyError as exc:
            raise GatewayError(f"generation failed: {exc}", status=500, code="generation_failed") from exc
        if len(gens) != len(rows) or any(g.finish_reason == "error" for g in gens):
            raise GatewayError("the policy failed to generate", status=500, code="generation_failed")
        return gens

    def _cut(self, params: SamplingParams, prompt_len: int, g: Generation) -> None:
        budget = self.max_context_tokens
        if budget is not None and g.finish_reason == "length" and prompt_len + len(g.token_ids) >= budget:
            self.truncated = True

    async def _tops(
        self,
        what: str,
        k: int,
        prompts: Sequence[Sequence[int]],
        gens: Sequence[Generation],
        params: SamplingParams,
    ) -> list[Alternatives | None]:
        """Each generation's alternatives (`prompts[i]` is generation i's prompt), where `k` > 0 asks."""
        if k == 0:
            return [None] * len(gens)
        refused = GatewayError(
            f"{what}: this server reports the sampled token's logprob only (its policy backend gives no "
            f"alternatives); ask {what} 0 or leave it out"
        )
        if self.alternatives is None:
            raise refused
        out: list[Alternatives | None] = []
        for p, g in zip(prompts, gens, strict=True):
            try:
                found = await self.alternatives(p, g, params, k)
            except PolicyError as exc:
                raise GatewayError(str(exc), status=503, code="weights_changed") from exc
            if found is None:
                raise refused
            out.append(found)
        return out

    def _usage(self, prompt_tokens: int, gens: Sequence[Generation]) -> dict[str, int]:
        completion = sum(len(g.token_ids) for g in gens)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }

    # ---------------------------------------------------------------- chat

    async def chat(self, req: ChatRequest) -> dict[str, Any]:
        self._admit(1, req.n)
        return await self._chat(req)

    async def _chat(self, req: ChatRequest) -> dict[str, Any]:
        if req.tool_choice not in (None, "auto", "none", "required") and not isinstance(
            req.tool_choice, dict
        ):
            raise GatewayError(f"tool_choice: {req.tool_choice!r} is not auto, none, required or a function")
        tools = req.tools if req.tool_choice != "none" else None
        chars = sum(
            len(m.text()) + sum(len(c.function.arguments) for c in m.tool_calls or ()) for m in req.messages
        )

        def render() -> list[int]:
            self._fits(chars)
            return self.renderer.prompt(req.messages, tools, self.history)

        try:
            prompt = await self._off_loop(render)
        except GatewayError:
            raise
        except (ValueError, TypeError) as exc:
            raise GatewayError(f"messages: the chat template cannot render them: {exc}") from exc
        except Exception as exc:  # jinja errors raised by a template's own `raise_exception`
            raise GatewayError(f"messages: the chat template refused them: {exc}") from exc
        if req.top_logprobs and not req.logprobs:
            raise GatewayError("top_logprobs: needs logprobs: true")
        params = self._params(req, len(prompt), req.max_completion_tokens or req.max_tokens)
        params, reserved = self._reserve(params, req.n)
        t0 = time.perf_counter()
        gens: list[Generation] = []
        try:
            gens = await self._sample([prompt], req.n, params)
        finally:
            self._settle(reserved, gens)
        seconds = time.perf_counter() - t0
        tok = self.generator.tokenizer
        k = (req.top_logprobs or 0) if req.logprobs else 0
        tops = await self._tops("top_logprobs", k, [prompt] * len(gens), gens, params)
        choices, sampled = [], []
        for i, g in enumerate(gens):
            self._cut(params, len(prompt), g)
            message, finish = self._message(g, params, allow_tools=tools is not None)
            sampled.append(Sampled(canonical(message), g.token_ids))
            choice: dict[str, Any] = {"index": i, "message": message, "finish_reason": finish}
            if req.logprobs:
                choice["logprobs"] = {"content": chat_logprobs(tok, g, tops[i])}
            else:
                choice["logprobs"] = None
            choice["token_ids"] = list(g.token_ids)
            choices.append(choice)
        self.history.append(Turn(tuple(canonical(m) for m in req.messages), tuple(prompt), tuple(sampled)))
        if self.record:
            self.records.append(CallRecord(tuple(prompt), tuple(gens), seconds, "chat"))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served_name,
            "choices": choices,
            "usage": self._usage(len(prompt), gens),
            "prompt_token_ids": prompt,
            "policy_version": gens[0].version if gens else self.generator.version,
        }

    def _message(
        self, g: Generation, params: SamplingParams, *, allow_tools: bool
    ) -> tuple[dict[str, Any], str]:
        tok = self.generator.tokenizer
        # Decoded with special tokens kept: a tool tag that is a special token must still be parsed.
        raw = tok.decode(list(g.token_ids), skip_special_tokens=False)
        specials = [s for s in getattr(tok, "all_special_tokens", []) if s]
        hits = [(raw.find(s), s) for s in params.stop if s in raw] if g.finish_reason == "stop" else []
        if hits:
            raw = raw[: min(hits)[0]]
        raw = toolstyle.strip_end(raw, tok)
        parsed = toolstyle.parse(self.style, raw) if allow_tools else toolstyle.Parsed(raw)
        content = parsed.content
        for s in specials:
            content = content.replace(s, "")
        message: dict[str, Any] = {"role": "assistant", "content": content.strip() or None}
        finish = "length" if g.finish_reason == "length" else "stop"
        if parsed.calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for name, args in parsed.calls
            ]
            finish = "tool_calls"
        return message, finish

    # ---------------------------------------------------------------- completions

    async def complete(self, req: CompletionRequest) -> dict[str, Any]:
        raw: Any = req.prompt
        if isinstance(raw, str) or (raw and isinstance(raw[0], int)):
            raw = [raw]
        if not raw:
            raise GatewayError("prompt: empty")
        self._admit(len(raw), req.n)
        return await self._complete(req, raw)

    async def _complete(self, req: CompletionRequest, raw: list[Any]) -> dict[str, Any]:
        tok = self.generator.tokenizer
        vocab = len(tok)

        def encode() -> list[list[int]]:
            out = []
            for p in raw:
                if isinstance(p, str):
                    self._fits(len(p))
                    out.append(list(tok.encode(p, add_special_tokens=False)))
                else:
                    out.append(list(p))
            return out

        prompts: list[list[int]] = []
        for i, ids in enumerate(await self._off_loop(encode)):
            if not ids:
                raise GatewayError(f"prompt[{i}]: no tokens")
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise GatewayError(
                    f"prompt[{i}]: token ids outside the vocabulary (0..{vocab - 1}): {bad[:5]}"
                )
            prompts.append(ids)
        params = self._params(req, max(len(p) for p in prompts), req.max_tokens)
        params, reserved = self._reserve(params, len(prompts) * req.n)
        t0 = time.perf_counter()
        gens: list[Generation] = []
        try:
            gens = await self._sample(prompts, req.n, params)
        finally:
            self._settle(reserved, gens)
        seconds = time.perf_counter() - t0
        own = [prompts[i // req.n] for i in range(len(gens))]
        tops = await self._tops("logprobs", req.logprobs or 0, own, gens, params)
        choices = []
        for i, g in enumerate(gens):
            self._cut(params, len(own[i]), g)
            choice = _completion_choice(tok, i, g, req, params.stop, own[i])
            if req.logprobs is not None:
                choice["logprobs"] = completion_logprobs(
                    tok, g, tops[i], ids_as_names=req.return_tokens_as_token_ids
                )
            choices.append(choice)
        if self.record:
            for j, prompt in enumerate(prompts):
                picked = tuple(gens[j * req.n : (j + 1) * req.n])
                self.records.append(CallRecord(tuple(prompt), picked, seconds, "completions"))
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.served_name,
            "choices": choices,
            "usage": self._usage(sum(len(p) for p in prompts), gens),
        }


def _completion_choice(
    tok: Any, index: int, g: Generation, req: CompletionRequest, stops: Sequence[str], prompt: Sequence[int]
) -> dict[str, Any]:
    """vLLM's completion choice: `stop_reason`, `token_ids` and token-id names as vLLM reports them."""
    text = tok.decode(list(g.token_ids), skip_special_tokens=req.skip_special_tokens)
    stop_reason: str | None = None
    finish = "length" if g.finish_reason == "length" else "stop"
    if g.finish_reason == "stop":
        hits = [(text.find(s), s) for s in stops if s in text]
        if hits:
            at, stop_reason = min(hits)
            if not req.include_stop_str_in_output:
                text = text[:at]
    if req.echo:
        text = tok.decode(list(prompt), skip_special_tokens=req.skip_special_tokens) + text
    choice: dict[str, Any] = {
        "index": index,
        "text": text,
        "finish_reason": finish,
        "stop_reason": stop_reason,
        "logprobs": None,
    }
    if req.return_token_ids:
        choice["token_ids"] = list(g.token_ids)
    return choice


def describe(exc: ValidationError) -> str:
    """Each problem as `field: what is wrong` (a check of the whole body names its field itself)."""
    parts = []
    for e in exc.errors():
        where, msg = ".".join(str(p) for p in e["loc"]), str(e["msg"]).removeprefix("Value error, ")
        parts.append(msg if not where and e["type"] == "value_error" else f"{where or 'body'}: {msg}")
    return "; ".join(parts)


def message_text(messages: Sequence[Message]) -> str:
    return "\n".join(m.text() for m in messages)
