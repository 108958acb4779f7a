"""Hugging Face transformers policy: batched sampling with a KV cache, on CPU or CUDA.

Generation is our own loop over `past_key_values` rather than `model.generate()`: one prefill of the
left-padded batch, then one token per step for every row, so we control exactly which logprob is
recorded. Logprob contract (`Generation.logprobs[i]` for `token_ids[i]`):

- temperature T > 0: the log-probability of the sampled token under the *processed* sampling
  distribution, i.e. `log_softmax(logits / T)` restricted to the top-k tokens, the top-p nucleus and the
  tokens at least min_p times as likely as the most likely one, renormalised (top_k 0, top_p 1 and min_p 0
  restrict nothing). This is what the trainer's importance ratio needs. Repetition, presence and frequency
  penalties are not applied: a request that sets one is refused.
- temperature 0 (greedy): the log-probability of the argmax token under the raw distribution
  `log_softmax(logits)`.

`token_ids` include the eos token when the model ends its turn (finish_reason "eos"), so training sees the
stop decision; `text` is the decoded tokens without control tokens (`decoding.completion_text`: tool-call
tags that a tokenizer marks special stay in it). A stop string ends generation after the token that
completes it (finish_reason "stop"; the string stays in the text).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from trialground.errors import PolicyError
from trialground.policy.backends.hf.lean_decoders import decoder_class
from trialground.policy.backends.hf.llama_decode import LlamaDecoder, SharedPrefix
from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.decoding import completion_text, control_ids
from trialground.policy.loading import check_vocabulary, load_model, load_tokenizer
from trialground.tensors import cache_keyword, distinct_rows, final_hidden, head_logits, left_pad

__all__ = ["HFPolicy", "load_model", "load_tokenizer", "sample_batch", "top_logprobs"]

MAX_TOP_LOGPROBS = 20  # OpenAI's bound, and vLLM's default `--max-logprobs`
FLOOR = -9999.0  # a token the sampling removed (logprob -inf; JSON has no infinity, vLLM writes the same)


@dataclass
class RawSample:
    """Output of `sample_batch`, one list per prompt."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    finished_by_eos: list[bool]


def _process_logits(
    logits: torch.Tensor, temperature: float, top_p: float, top_k: int = 0, min_p: float = 0.0
) -> torch.Tensor:
    """Log-probabilities of the sampling distribution (see module docstring). logits: [B, V] float32."""
    if temperature == 0.0:
        return torch.log_softmax(logits, dim=-1)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    if 0 < top_k < logp.shape[-1]:
        kth = logp.topk(top_k, dim=-1).values[:, -1:]  # [B, 1]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        mass_before = sorted_logp.exp().cumsum(dim=-1) - sorted_logp.exp()
        drop = mass_before >= top_p
        sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
        logp = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_logp)
    if min_p > 0.0:
        floor = logp.max(dim=-1, keepdim=True).values + torch.log(torch.tensor(min_p))  # [B, 1]
        logp = logp.masked_fill(logp < floor, float("-inf"))
    if top_k > 0 or top_p < 1.0 or min_p > 0.0:
        logp = torch.log_softmax(logp, dim=-1)
    return logp


SCORE_CHUNK = 512  # positions whose logits exist at once when a whole completion is scored


def completion_logits(
    model: Any, prompt: Sequence[int], completion: Sequence[int], device: torch.device
) -> Iterator[tuple[int, torch.Tensor]]:
    """(offset, fp32 logits [n, V]) predicting `completion`'s tokens after `prompt`, from one forward pass,
    at most `SCORE_CHUNK` positions at a time: no `tokens x vocabulary` tensor for a long completion."""
    ids = torch.tensor([[*prompt, *completion]], device=device)  # [1, P+C]
    hidden, _ = final_hidden(model, input_ids=ids)
    hidden = hidden[0, len(prompt) - 1 : -1]  # [C, d]
    for start in range(0, len(completion), SCORE_CHUNK):
        yield start, head_logits(model, hidden[start : start + SCORE_CHUNK])


class _TransformersSteps:
    """Prefill and decode through the model's own forward and cache (any causal LM). Finished rows stay in
    the batch (fed padding) until every row is done."""

    def __init__(self, model: PreTrainedModel, mask: torch.Tensor) -> None:
        self.model = model
        self.mask = mask
        self.cache_kw = cache_keyword(model)
        self.cache: Any = None

    def prefill(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=ids, attention_mask=self.mask, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        self.cache = getattr(out, self.cache_kw)
        return out.logits[:, -1, :]  # type: ignore[no-any-return]

    def step(self, tok: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        ones = torch.ones((tok.shape[0], 1), dtype=self.mask.dtype, device=self.mask.device)
        self.mask = torch.cat([self.mask, ones], dim=-1)
        out = self.model(
            input_ids=tok.unsqueeze(-1),
            attention_mask=self.mask,
            position_ids=positions,
            use_cache=True,
            **{self.cache_kw: self.cache},
        )
        self.cache = getattr(out, self.cache_kw)
        return out.logits[:, -1, :]  # type: ignore[no-any-return]


class _LeanSteps:
    """The same through `LlamaDecoder`, over a KV cache preallocated for the whole generation. Finished
    rows are dropped from the batch (`keep`), so short answers stop costing compute.

    With `owner` ([B]: row b continues prompt owner[b] of the `mask` [U, W] prefilled), the prompts' cache
    is a `SharedPrefix` read once per prompt by every decode step, and each row's cache holds only its own
    new tokens. Shared attention stacks each prompt's rows into a grid as wide as the prompt with the most
    rows; where that grid would be over twice the rows (a few repeated prompts among many distinct ones, or
    uneven groups once rows left), the prompts are copied into the rows' caches instead (`_unshare`)."""

    def __init__(
        self,
        decoder: LlamaDecoder,
        mask: torch.Tensor,
        max_new_tokens: int,
        owner: torch.Tensor | None = None,
    ) -> None:
        rows, width = mask.shape
        self.decoder = decoder
        self.owner = owner
        self.prefix: SharedPrefix | None = None
        if owner is None:
            self.key_mask = torch.ones((rows, width + max_new_tokens), dtype=torch.bool, device=mask.device)
            self.key_mask[:, :width] = mask.bool()
            self.cache = decoder.new_cache(rows, width + max_new_tokens)
        else:
            self.prefix = SharedPrefix(*decoder.new_cache(rows, width), mask.bool())
            self.key_mask = torch.ones((len(owner), max_new_tokens), dtype=torch.bool, device=mask.device)
            self.cache = decoder.new_cache(len(owner), max_new_tokens)
        self.filled = 0

    def prefill(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.prefix is None or self.owner is None:
            self.filled = ids.shape[1]
            return self.decoder.forward(ids, positions, self.key_mask, self.cache, 0)
        prefix = self.prefix
        logits = self.decoder.forward(ids, positions, prefix.mask, (prefix.keys, prefix.values), 0)
        prefix.regroup(self.owner)
        self._share_or_copy()
        return logits[self.owner]

    def _share_or_copy(self) -> None:
        prefix = self.prefix
        if prefix is not None and prefix.mask.shape[0] * prefix.per_prompt > 2 * len(prefix.owner):
            self._unshare(prefix)

    def _unshare(self, prefix: SharedPrefix) -> None:
        """Copy each row's prompt into its own cache, ahead of its new tokens; decode without the prefix."""
        keys, values = self.cache
        self.cache = (
            torch.cat([prefix.keys[:, prefix.owner], keys], dim=3),
            torch.cat([prefix.values[:, prefix.owner], values], dim=3),
        )
        self.key_mask = torch.cat([prefix.row_mask, self.key_mask], dim=1)
        self.filled += prefix.mask.shape[1]
        self.prefix = None

    def step(self, tok: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        logits = self.decoder.forward(
            tok.unsqueeze(-1), positions, self.key_mask, self.cache, self.filled, prefix=self.prefix
        )
        self.filled += 1
        return logits

    def keep(self, rows: torch.Tensor) -> None:
        """Continue with only `rows` (indices into the current batch), in that order."""
        keys, values = self.cache
        self.cache = (keys[:, rows], values[:, rows])  # copies: the finished rows' memory is freed
        self.key_mask = self.key_mask[rows]
        if self.prefix is not None:
            self.prefix.regroup(self.prefix.owner[rows])
            self._share_or_copy()


# Drop finished rows from a compacting decoder once this fraction of its rows is finished.
_COMPACT_AT = 0.25


@torch.no_grad()
def sample_batch(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    eos_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    stop_check: Any = None,
    decoder: LlamaDecoder | None = None,
    on_done: Callable[[int, list[int], list[float], bool], None] | None = None,
) -> RawSample:
    """Sample continuations of `prompts` (left-padded into one batch) with a KV cache.

    `stop_check(row, ids) -> bool`, when given, is asked after every new token of an unfinished row.
    `on_done(row, token_ids, logprobs, by_eos)`, when given, is told each row that finishes (eos or stop)
    while others still decode, as soon as it does; the returned sample holds every row either way.
    `decoder`, when given, runs the forward passes instead of `model.forward` (same logits, faster, and
    finished rows leave the batch). Either way the random stream is consumed for every row at every
    step, so which rows are still computed never changes what the others sample.
    """
    device = next(model.parameters()).device
    bsz = len(prompts)
    ids, mask = left_pad(prompts, pad_id, device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, L]; left padding shifts no position
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)

    steps: _TransformersSteps | _LeanSteps
    if decoder is None:
        steps = _TransformersSteps(model, mask)
        logits = steps.prefill(ids, positions)
    else:
        # The k samples of a task share their prompt: prefill each distinct prompt once, then copy its
        # cache rows (prefix sharing).
        first, owner = distinct_rows(prompts)
        if len(first) == bsz:
            steps = _LeanSteps(decoder, mask, max_new_tokens)
            logits = steps.prefill(ids, positions)
        else:
            inverse = torch.tensor(owner, device=device)
            distinct = torch.tensor(first, device=device)
            steps = _LeanSteps(decoder, mask[distinct], max_new_tokens, owner=inverse)
            logits = steps.prefill(ids[distinct], positions[distinct])
    # logits [A, V] always has one row per entry of `live`: the batch rows `steps` computes, in its order
    live = torch.arange(bsz, device=device)
    next_pos = positions[:, -1] + 1  # [B]
    done = torch.zeros(bsz, dtype=torch.bool, device=device)
    by_eos = torch.zeros(bsz, dtype=torch.bool, device=device)
    out_tok = torch.full((bsz, max_new_tokens), pad_id, dtype=torch.long, device=device)
    out_logp = torch.zeros((bsz, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.zeros(bsz, dtype=torch.long, device=device)
    for t in range(max_new_tokens):
        logp = _process_logits(logits.float(), temperature, top_p, top_k, min_p)  # [A, V]
        if temperature == 0.0:
            tok = logp.argmax(dim=-1)
        else:
            # torch.multinomial's own method for one sample (exponential race), drawn for all B rows
            race = torch.empty((bsz, logp.shape[-1]), device=device).exponential_(generator=generator)
            tok = (logp.exp() / race[live]).argmax(dim=-1)
        running = ~done[live]
        rows = live[running]
        out_tok[rows, t] = tok[running]
        out_logp[rows, t] = logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)[running]
        lengths[rows] += 1
        hit = live[torch.isin(tok, eos) & running]
        by_eos[hit] = True
        done[hit] = True
        if stop_check is not None:
            for row in rows.tolist():
                if not done[row] and stop_check(row, out_tok[row, : t + 1].tolist()):
                    done[row] = True
        running = ~done[live]
        n_running = int(running.sum())
        if n_running == 0:
            break
        if on_done is not None:
            for row in rows[done[rows]].tolist():  # finished at this token, others still running
                size = int(lengths[row])
                on_done(row, out_tok[row, :size].tolist(), out_logp[row, :size].tolist(), bool(by_eos[row]))
        if isinstance(steps, _LeanSteps) and n_running <= (1.0 - _COMPACT_AT) * len(live):
            keep = running.nonzero().squeeze(-1)
            steps.keep(keep)
            live, tok, running = live[keep], tok[keep], running[keep]
        logits = steps.step(torch.where(running, tok, pad_id), next_pos[live].unsqueeze(-1))
        next_pos += 1
    n = lengths.tolist()
    all_tok, all_logp = out_tok.tolist(), out_logp.tolist()
    return RawSample(
        token_ids=[all_tok[i][: n[i]] for i in range(bsz)],
        logprobs=[all_logp[i][: n[i]] for i in range(bsz)],
        finished_by_eos=by_eos.tolist(),
    )


def encode_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Prompt token ids of a conversation, rendered with the model's chat template."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return [int(i) for i in ids]


class HFPolicy(Policy):
    """A transformers causal LM as a policy. `model` is the live torch module (the trainer may share it)."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self._tokenizer: Any = load_tokenizer(config)
        self.model: PreTrainedModel = load_model(config).eval()
        check_vocabulary(config, self.model, self._tokenizer)
        self.device = torch.device(config.device)
        self.eos_ids = sorted({self._tokenizer.eos_token_id, *self._eos_from_generation_config()})
        self.version = 0
        self._lock = threading.Lock()  # one generation or weight load at a time
        self._staged: dict[str, torch.Tensor] = {}  # weights loaded during a generation, not yet applied
        self._staged_version: int | None = None
        self._staging = threading.Lock()
        self._seed_source = torch.Generator().manual_seed(0)
        self._decoder: LlamaDecoder | None = None

    def _lean_decoder(self, length: int) -> LlamaDecoder | None:
        """The lean decoder when configured and exact for the model as it is now (a trainer may have
        wrapped its projections in LoRA since the last call) and for sequences of up to `length` tokens
        (a sliding window longer than that never slides), else None: the transformers forward."""
        if self.config.decode != "auto":
            return None
        kind = decoder_class(self.model, length)
        if kind is None:
            return None
        if type(self._decoder) is not kind:
            self._decoder = kind(self.model)
        return self._decoder

    def _eos_from_generation_config(self) -> list[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        return [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Prompt token ids of a conversation, rendered with the model's chat template."""
        return encode_chat(self._tokenizer, messages)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return await asyncio.to_thread(self.generate_sync, prompts, params)

    async def alternatives(
        self, prompt: Sequence[int], generation: Generation, params: SamplingParams, k: int
    ) -> list[list[tuple[int, float]]] | None:
        def run() -> list[list[tuple[int, float]]]:
            with self._lock:  # no generation or weight load meanwhile
                if generation.version != self.version:
                    raise PolicyError(
                        f"the weights changed since this answer was sampled (version {generation.version}, "
                        f"now {self.version}); send the request again"
                    )
                return top_logprobs(self, prompt, generation.token_ids, params, k)

        return await asyncio.to_thread(run)

    @property
    def streams(self) -> bool:
        """Whether batched callers should use `generate_streaming` (`policy.stream`)."""
        return self.config.stream

    async def generate_streaming(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        on_each: Callable[[int, Generation], None],
    ) -> list[Generation]:
        """`generate`, and `on_each(index, generation)` (on the calling event loop) for each prompt whose
        generation finished while others of the batch still decode: its episode can go on (grade, run its
        tool call) instead of waiting for the batch's longest row."""
        loop = asyncio.get_running_loop()

        def early(index: int, generation: Generation) -> None:
            loop.call_soon_threadsafe(on_each, index, generation)

        return await asyncio.to_thread(self.generate_sync, prompts, params, early)

    def generate_sync(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        on_each: Callable[[int, Generation], None] | None = None,
    ) -> list[Generation]:
        """Blocking `generate` (the async one runs this in a worker thread); `on_each` as in
        `generate_streaming`, called from this thread."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise PolicyError("empty prompt: at least one token is needed")
        if params.penalties():
            raise PolicyError(
                f"this sampler applies no repetition, presence or frequency penalty: {params.penalties()}"
            )
        with self._lock:
            self._apply_staged()
            version = self.version
            on_done = None
            if on_each is not None:

                def on_done(row: int, ids: list[int], logps: list[float], by_eos: bool) -> None:
                    on_each(row, self._generation(ids, logps, by_eos, params, version))

            # greedy decoding draws nothing: evaluations, however their requests happen to batch, leave the
            # sampling stream of the training generations as it was (a run's samples repeat exactly)
            seed = (
                params.seed
                if params.seed is not None
                else 0
                if params.temperature == 0.0
                else int(torch.randint(0, 2**62, (1,), generator=self._seed_source))
            )
            generator = torch.Generator(device=self.device).manual_seed(seed)
            stop_check = None
            if params.stop:
                tok = self._tokenizer
                control = control_ids(tok)

                def stop_check(_row: int, ids: list[int]) -> bool:
                    return any(s in completion_text(tok, ids, control) for s in params.stop)

            try:
                raw = sample_batch(
                    self.model,
                    prompts,
                    max_new_tokens=params.max_new_tokens,
                    temperature=params.temperature,
                    top_p=params.top_p,
                    top_k=params.top_k,
                    min_p=params.min_p,
                    eos_ids=self.eos_ids,
                    pad_id=self._tokenizer.pad_token_id,
                    generator=generator,
                    stop_check=stop_check,
                    decoder=self._lean_decoder(max(len(p) for p in prompts) + params.max_new_tokens),
                    on_done=on_done,
                )
            except (RuntimeError, ValueError, IndexError) as exc:
                raise PolicyError(f"generation failed: {exc}") from exc
        return [
            self._generation(ids, logps, by_eos, params, version)
            for ids, logps, by_eos in zip(raw.token_ids, raw.logprobs, raw.finished_by_eos, strict=True)
        ]

    def _generation(
        self, ids: list[int], logps: list[float], by_eos: bool, params: SamplingParams, version: int
    ) -> Generation:
        text = completion_text(self._tokenizer, ids)
        if by_eos:
            reason = "eos"
        elif params.stop and any(s in text for s in params.stop):
            reason = "stop"
        else:
            reason = "length"
        return Generation(
            token_ids=tuple(ids), logprobs=tuple(logps), text=text, finish_reason=reason, version=version
        )

    @torch.no_grad()
    def score(
        self, prompt: Sequence[int], completion: Sequence[int], temperature: float = 1.0
    ) -> list[float]:
        """Logprobs of `completion` after `prompt` by one forward pass, under the same processing as
        sampling at `temperature` (top_p = 1). Lets a caller check or recompute `Generation.logprobs`."""
        targets = torch.tensor(list(completion), device=self.device)
        out: list[float] = []
        for start, logits in completion_logits(self.model, prompt, completion, self.device):
            logp = _process_logits(logits, temperature, 1.0)  # [n, V]
            part = targets[start : start + len(logits)].unsqueeze(-1)
            out += logp.gather(-1, part).squeeze(-1).tolist()
        return out

    def shared_module(self) -> PreTrainedModel:
        return self.model

    def seed_sampling(self, seed: int) -> None:
        """Restart the generator that seeds each unseeded `generate` (the run's `seed` lands here)."""
        self._seed_source.manual_seed(seed)

    def sampling_rng_state(self) -> torch.Tensor:
        """State of the generator that seeds each unseeded `generate`: saved in checkpoints so a resumed
        run samples exactly what the uninterrupted run would have."""
        return self._seed_source.get_state()

    def set_sampling_rng_state(self, state: torch.Tensor) -> None:
        self._seed_source.set_state(state)

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Copy `state_dict` (full or partial, same names as `model.state_dict()`) into the model.

        Never waits for a running generation: the weights are copied aside and applied before the next
        generation starts, so the trainer goes on while rollouts finish. Either way every generation that
        starts after this call returns samples with these weights and is stamped `version`; one already
        running finishes with the weights (and the version) it started with."""
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise PolicyError(f"load_weights: unknown parameter names {unknown[:5]}")
        copies = {}
        for name, value in state_dict.items():
            tensor = torch.as_tensor(value)
            if tensor.data_ptr() != own[name].data_ptr():  # shared with the trainer: nothing to copy
                target = own[name]
                copies[name] = tensor.detach().to(device=target.device, dtype=target.dtype, copy=True)
        with self._staging:
            self._staged |= copies
            self._staged_version = version
        if self._lock.acquire(blocking=False):  # no generation running: apply now
            try:
                self._apply_staged()
            finally:
                self._lock.release()

    def load_weight_stream(self, items: Iterable[tuple[str, Any]], version: int) -> int:
        """Copy each `(name, tensor)` into the model as it comes (one tensor held at a time, never a staged
        copy of the model), after any running generation; then stamp `version`. The caller has checked
        names and shapes (a bad one midway leaves a partial load). Returns the tensors copied."""
        own = self.model.state_dict()
        count = 0
        with self._lock, torch.no_grad():
            self._apply_staged()
            for name, tensor in items:
                own[name].copy_(tensor)
                count += 1
            self.version = version
        return count

    def _apply_staged(self) -> None:
        """Copy staged weights into the model; the caller holds `_lock`."""
        with self._staging:
            staged, version = self._staged, self._staged_version
            self._staged, self._staged_version = {}, None
        if version is None:
            return
        own = self.model.state_dict()
        with torch.no_grad():
            for name, tensor in staged.items():
                own[name].copy_(tensor)
        self.version = version


@torch.no_grad()
def top_logprobs(
    policy: HFPolicy, prompt: Sequence[int], completion: Sequence[int], params: SamplingParams, k: int
) -> list[list[tuple[int, float]]]:
    """The k most likely tokens at each position of `completion`: one forward pass over prompt +
    completion (its output layer `SCORE_CHUNK` positions at a time), processed as sampling processed it,
    so the sampled token's entry is its sampling logprob."""
    if not 1 <= k <= MAX_TOP_LOGPROBS:
        raise ValueError(f"k: {k} is outside 1..{MAX_TOP_LOGPROBS}")
    if not completion:
        return []
    out: list[list[tuple[int, float]]] = []
    for _start, logits in completion_logits(policy.model, prompt, completion, policy.device):
        logp = _process_logits(logits, params.temperature, params.top_p, params.top_k, params.min_p)
        values, index = logp.topk(min(k, logp.shape[-1]), dim=-1)  # [n, k]
        out += [
            [(int(t), max(float(v), FLOOR)) for v, t in zip(vs, ts, strict=True)]
            for vs, ts in zip(values.tolist(), index.tolist(), strict=True)
        ]
    return out
