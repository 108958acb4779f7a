"""Running inference servers as a trainable policy: sampling and training deployed separately.

`policy.backend: remote` drives one or more servers that speak vLLM's OpenAI-compatible API (`vllm
serve`, or `trialground policy serve` on a machine without a GPU) with token ids in and out:

- Generation: each distinct prompt of a `generate` call is one `POST /v1/completions` with the prompt as
  token ids, `n` = how many times it appears, the whole sampling distribution (temperature, top_p, top_k,
  min_p, the penalties: `sampling_parity.wire_fields`), a seed, `logprobs: 0`, `return_token_ids` (the sampled
  ids; vLLM 0.10.2 and later) and `return_tokens_as_token_ids` (ids in `logprobs.tokens`, the fallback
  for older versions), `include_stop_str_in_output`. Nothing is re-tokenised: `Generation.token_ids`
  are the ids the server sampled and `logprobs[i]` the server's sampling logprob of `token_ids[i]`; an
  answer without ids, with a different number of logprobs, or with a logprob that is not a finite number
  raises `PolicyError` naming the server. For logprobs after temperature and top-p (the trainer's
  contract) start vLLM with `--logprobs-mode processed_logprobs`.
- Server defaults: at start each server's sampling defaults are read (`sampling_parity`); one on a field
  requests do not state is refused, one that differs from the run's is warned about (vLLM: start it with
  `--generation-config vllm`).
- Routing: a request whose prompt extends the context an earlier request left (prompt + sampled ids: an
  episode's next turn) goes to the server that answered that one, so its prefix cache serves the whole
  episode (`routing.PrefixAffinity`); any other request goes to the server with the fewest sequences in
  flight from this policy (ties: the first listed). Requests are not batched across episodes on this
  side (`concurrent`): each goes out when its episode is ready and returns with its own answer. A
  connection error, a 429 or a 5xx answer is retried, on another server where there is one,
  `max_retries` times, with exponential backoff and jitter, waiting at least what `Retry-After`
  asks, within `retry_total_s` (`trialground.retry`).
- Weight push (`load_weights`, after every trainer step): the weights are written as safetensors buckets
  of at most `policy.weight_bucket_mb`, cast to the servers' dtype (read at start), one tensor at a time
  (`weight_files`), into a new version directory under `policy.weight_dir` (a path every server can
  read), then each server is told to load it by `policy.weight_transport` (`weight_push`): by default
  drained (`POST /pause?mode=wait`), `POST /collective_rpc {"method": "trialground_load_weights",
  "args": [DIR]}`, `POST /reset_prefix_cache`, `POST /resume`; on vLLM these routes need
  `VLLM_SERVER_DEV_MODE=1` and the worker extension `--worker-extension-cls
  trialground.policy.backends.vllm.vllm_worker.WeightReload`; SGLang takes
  `/update_weights_from_disk`; `vllm_nccl` sends the tensors over NCCL instead of files. The two newest
  version directories are kept. A server that cannot be reached during a push (it died) is dropped for
  the rest of the run, with a warning: it missed a version, so it never samples again; the others go on.
  A server that answers with an error, or every server failing, raises `PolicyError`.
- Version stamps: a generation is stamped with the version pushed when its request was sent (and each
  policy turn of a trajectory carries it, `Turn.version`). A server is drained before a load, so no
  request runs across one; on a vLLM without `/pause` a request in flight during a push may finish under
  the new weights, with the logprobs it was sampled with and the older stamp.

The trainer's copy of the model comes from `policy.model` (a local directory, or 'tiny'); the tokenizer
is read from there too, and must be the servers' tokenizer. A training run pushes the trainer's starting
weights to every server before its first generation (`push_at_start`), so servers left with another
run's weights are corrected; an evaluation without `--checkpoint` samples whatever the servers hold.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from trialground.errors import PolicyError
from trialground.policy.backends.remote.adapter_push import push_adapter
from trialground.policy.backends.remote.routing import PrefixAffinity
from trialground.policy.backends.remote.weight_push import PUSH_TIMEOUT_S, PushFailed, make_transport
from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.decoding import completion_text
from trialground.policy.sampling_parity import check_defaults, engine_dtype, server_defaults, wire_fields
from trialground.policy.weight_files import prune, write_weights
from trialground.retry import RetriesExhausted, retryable, send_with_retries

if TYPE_CHECKING:
    from trialground.policy.adapters import Adapter

log = logging.getLogger(__name__)


def base_url(url: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/v1` all name the same server."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class RemotePolicy(Policy):
    """See the module docstring. `requests[i]` counts the completion requests sent to `servers[i]`."""

    trainable = True
    # A training run pushes the trainer's starting weights first: a server may still hold another run's.
    push_at_start = True
    # Each server batches on its own: the run sends every episode's request as soon as it is ready.
    concurrent = True

    def __init__(self, config: PolicyConfig, *, tokenizer: Any = None) -> None:
        if not config.servers:
            raise PolicyError(
                "the remote backend needs policy.servers: the base URLs of running vLLM servers or "
                "`trialground policy serve` processes, e.g. [http://127.0.0.1:8000]",
                kind="config",
            )
        self.config = config
        if tokenizer is None:
            from trialground.policy.loading import load_tokenizer

            tokenizer = load_tokenizer(config)
        self._tokenizer = tokenizer
        self.servers = [base_url(u) for u in config.servers]
        self.requests = [0] * len(self.servers)
        self._inflight = [0] * len(self.servers)
        self.dropped: set[int] = set()  # servers that missed a weight push: never asked again
        self.affinity = PrefixAffinity()  # an episode's turns stay on the server that holds its prefix
        self.eos_ids = _eos_ids(config, tokenizer)
        self.model_name = config.served_model or self._discover_model()
        self._check_sampling_defaults()
        self._push_dtype = self._engine_dtype()
        self._transport = make_transport(
            config.weight_transport, bucket_bytes=config.weight_bucket_mb * 2**20, dtype=self._push_dtype
        )
        self._seeds = random.Random(0)
        self.version = 0
        self._weight_root = (
            None if config.weight_dir is None else Path(config.weight_dir).expanduser().resolve()
        )
        self._remove_weight_root: weakref.finalize[Any, Any] | None = None
        self.takes_adapters = config.push_lora_adapter
        self.pushed_bytes = 0  # bytes the last push wrote for the servers to read
        self._adapters: list[str] = []  # names of the adapters loaded on the servers, oldest first

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def weight_root(self) -> Path:
        """Where pushed weights are written: `policy.weight_dir`, else a private temporary directory made
        at the first push and removed by `close`, or when this policy is collected or the interpreter
        exits without it (a policy that never pushes makes none)."""
        if self._weight_root is None:
            self._weight_root = Path(tempfile.mkdtemp(prefix="trialground-weights-"))
            self._remove_weight_root = weakref.finalize(self, shutil.rmtree, self._weight_root, True)
        return self._weight_root

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        from trialground.policy.backends.hf import encode_chat

        return encode_chat(self._tokenizer, messages)

    # ------------------------------------------------------------------ generation

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        rows: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prompts):
            if not p:
                raise PolicyError("empty prompt: at least one token is needed")
            rows.setdefault(tuple(int(t) for t in p), []).append(i)
        # seeds drawn in prompt order before anything is sent: the same run asks for the same samples
        seeds = [params.seed if params.seed is not None else self._seeds.randrange(2**31) for _ in rows]
        version = self.version
        limit = self.config.request_timeout_s
        timeout = httpx.Timeout(limit, connect=min(10.0, limit))
        async with httpx.AsyncClient(timeout=timeout, headers=self._headers()) as client:
            answers = await asyncio.gather(
                *(
                    self._complete(client, list(prompt), len(idx), seed, params)
                    for (prompt, idx), seed in zip(rows.items(), seeds, strict=True)
                )
            )
        out: list[Generation | None] = [None] * len(prompts)
        for (prompt, idx), (server, choices) in zip(rows.items(), answers, strict=True):
            for row, choice in zip(idx, choices, strict=True):
                g = out[row] = self._generation(server, choice, version)
                self.affinity.remember([*prompt, *g.token_ids], self.servers.index(server))
        return [g for g in out if g is not None]

    def _pick(self, avoid: set[int], prefer: int | None = None) -> int:
        """`prefer` (the server holding the prompt's prefix) while it is live and has not failed this
        request; else the least loaded."""
        live = [i for i in range(len(self.servers)) if i not in self.dropped]
        if prefer is not None and prefer in live and prefer not in avoid:
            return prefer
        candidates = [i for i in live if i not in avoid] or live
        return min(candidates, key=lambda i: self._inflight[i])

    async def _complete(
        self, client: httpx.AsyncClient, prompt: list[int], n: int, seed: int, params: SamplingParams
    ) -> tuple[str, list[dict[str, Any]]]:
        body: dict[str, Any] = {
            "model": self._adapters[-1] if self._adapters else self.model_name,
            "prompt": prompt,
            "n": n,
            "max_tokens": params.max_new_tokens,
            **wire_fields(params),
            "seed": seed,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": True,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        failed: set[int] = set()
        used: list[str] = []
        prefer = self.affinity.lookup(prompt)

        async def send(_attempt: int) -> httpx.Response:
            index = self._pick(failed, prefer)  # chosen and counted with no await between: no two pick blind
            used.append(self.servers[index])
            self._inflight[index] += n
            self.requests[index] += 1
            try:
                resp = await client.post(self.servers[index] + "/v1/completions", json=body)
            except httpx.TransportError:
                failed.add(index)
                raise
            finally:
                self._inflight[index] -= n
            if retryable(resp):
                failed.add(index)
            return resp

        try:
            resp = await send_with_retries(send, self.config.backoff())
        except RetriesExhausted as exc:
            raise PolicyError(f"completion {exc}", kind="http") from exc
        except httpx.HTTPError as exc:
            raise PolicyError(f"{used[-1]}: {type(exc).__name__}: {exc}", kind="http") from exc
        server = used[-1]
        if resp.status_code != 200:
            raise PolicyError(
                f"POST {server}/v1/completions: HTTP {resp.status_code}: {resp.text[:300]}", kind="http"
            )
        return server, _choices(server, resp, n)

    def _generation(self, server: str, choice: Mapping[str, Any], version: int) -> Generation:
        ids = _token_ids(server, choice)
        raw = (choice.get("logprobs") or {}).get("token_logprobs")
        if not isinstance(raw, list) or len(raw) != len(ids):
            got = len(raw) if isinstance(raw, list) else "no"
            raise PolicyError(f"{server}: {got} logprobs for {len(ids)} sampled tokens", kind="protocol")
        lps = []
        for x in raw:
            if not isinstance(x, int | float) or isinstance(x, bool) or not math.isfinite(x):
                why = f"{server}: sampled-token logprob {x!r} is not a finite number"
                raise PolicyError(why, kind="protocol")
            lps.append(float(x))
        finish = choice.get("finish_reason")
        if finish == "length":
            reason = "length"
        elif finish == "stop":
            matched = choice.get("stop_reason")
            reason = "stop" if isinstance(matched, str) or not (ids and ids[-1] in self.eos_ids) else "eos"
        else:
            raise PolicyError(f"{server}: unexpected finish_reason {finish!r}", kind="protocol")
        return Generation(
            token_ids=tuple(ids),
            logprobs=tuple(lps),
            text=completion_text(self._tokenizer, ids),
            finish_reason=reason,  # type: ignore[arg-type]
            version=version,
        )

    # ------------------------------------------------------------------ weights

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Write the weights under `weight_dir` and have every live server load them (module docstring).
        Returns when they have; a server that could not be reached is dropped; raises `PolicyError`
        naming each server that answered with an error, or when none could be reached."""
        prepared: Any = state_dict
        if self._transport.uses_files:
            prepared = write_weights(
                state_dict,
                self.weight_root,
                version,
                bucket_bytes=self.config.weight_bucket_mb * 2**20,
                dtype=self._push_dtype,
            )
        self._push_all(
            lambda client, server: self._transport.push(client, server, prepared, version), version
        )
        self._adapters = []  # full weights replace whatever adapter was loaded
        if self._transport.uses_files:
            self.pushed_bytes = sum(f.stat().st_size for f in Path(prepared).iterdir() if f.is_file())
            prune(self.weight_root, keep=2)
        self.version = version

    def load_adapter(self, adapter: Adapter, version: int) -> None:
        """Write the LoRA adapter alone under `weight_dir` and have every live server load it under a new
        name, which later requests name (`adapter_push.py`)."""
        from trialground.policy.adapters import write_adapter

        path = self.weight_root / f"lora-v{version:08d}"
        if path.exists():
            shutil.rmtree(path)
        self.pushed_bytes = write_adapter(adapter, path)
        name = f"{self.model_name}-lora-v{version}"
        retire = self._adapters[-2] if len(self._adapters) >= 2 else None
        transport = self._transport
        self._push_all(
            lambda client, server: push_adapter(client, server, transport, name, str(path), retire), version
        )
        self._adapters = [*self._adapters[-1:], name]
        kept = {f"lora-v{int(n.rsplit('-v', 1)[1]):08d}" for n in self._adapters}
        for old in self.weight_root.glob("lora-v*"):
            if old.name not in kept:
                shutil.rmtree(old, ignore_errors=True)
        self.version = version

    def _push_all(self, push: Callable[[httpx.Client, str], None], version: int) -> None:
        """`push` to every live server at once; a server that could not be reached is dropped; raises
        `PolicyError` naming each that answered with an error, or when none could be reached."""
        live = [i for i in range(len(self.servers)) if i not in self.dropped]
        with ThreadPoolExecutor(max_workers=len(live)) as pool:
            pushed = pool.map(lambda i: self._push(self.servers[i], push), live)
            results = dict(zip(live, pushed, strict=True))
        failed = {i: why for i, (why, _) in results.items() if why}
        gone = {i for i, (why, unreachable) in results.items() if why and unreachable}
        if failed.keys() - gone or gone == set(live):
            raise PolicyError("weight push failed: " + "; ".join(failed.values()), kind="weights")
        for i in sorted(gone):
            self.dropped.add(i)
            self.affinity.forget_server(i)
            log.warning(
                "policy server dropped for the rest of the run (it missed weights v%d): %s",
                version,
                failed[i],
            )

    def _push(self, server: str, push: Callable[[httpx.Client, str], None]) -> tuple[str | None, bool]:
        """(what went wrong or None, whether the server could not be reached at all)."""
        try:
            with httpx.Client(timeout=PUSH_TIMEOUT_S, headers=self._headers()) as client:
                push(client, server)
        except PushFailed as exc:
            return str(exc), exc.unreachable
        return None, False

    # ------------------------------------------------------------------ run plumbing

    def seed_sampling(self, seed: int) -> None:
        """Restart the stream of per-request seeds (the run's `seed` lands here)."""
        self._seeds = random.Random(seed)

    def sampling_rng_state(self) -> Any:
        return self._seeds.getstate()

    def set_sampling_rng_state(self, state: Any) -> None:
        self._seeds.setstate(state)

    def close(self) -> None:
        """Delete the weight directory when this policy made it (a configured one is left as it is)."""
        if self._remove_weight_root is not None:
            self._remove_weight_root()

    def _headers(self) -> dict[str, str]:
        import os

        key = os.environ.get(self.config.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _engine_dtype(self) -> Any:
        """The servers' weight dtype (`/trialground/info`, vLLM's `/server_info`), which pushed weights are
        cast to; `policy.dtype` where no server says, or where they differ."""
        import torch

        found: set[str] = set()
        with httpx.Client(
            timeout=min(30.0, self.config.request_timeout_s), headers=self._headers()
        ) as client:
            for server in self.servers:
                found.add(engine_dtype(client, server) or self.config.dtype)
        name = found.pop() if len(found) == 1 else self.config.dtype
        dtype = getattr(torch, name, None)
        return dtype if isinstance(dtype, torch.dtype) else getattr(torch, self.config.dtype)

    def _check_sampling_defaults(self) -> None:
        """Read each server's sampling defaults (`sampling_parity`): refuse one that would change the
        distribution, warn loudly about one that differs from the run's."""
        limit = min(30.0, self.config.request_timeout_s)
        with httpx.Client(timeout=limit, headers=self._headers()) as client:
            for server in self.servers:
                found = server_defaults(client, server, self.config.model)
                if found is None:
                    log.warning(
                        "%s: its sampling defaults could not be read (neither /trialground/info nor vLLM's "
                        "/server_info); every request states the whole distribution, but start vLLM with "
                        "--generation-config vllm so that no default differs",
                        server,
                    )
                    continue
                for warning in check_defaults(server, found[0], found[1], self.config.sampling):
                    log.warning(warning)

    def _discover_model(self) -> str:
        """The first model the first server lists; every server must list it."""
        names: list[list[str]] = []
        for server in self.servers:
            try:
                resp = httpx.get(
                    server + "/v1/models",
                    timeout=min(30.0, self.config.request_timeout_s),
                    headers=self._headers(),
                )
                resp.raise_for_status()
                names.append([str(m["id"]) for m in resp.json()["data"]])
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                raise PolicyError(
                    f"policy.servers: {server}/v1/models did not answer with a model list: {exc}", kind="http"
                ) from exc
        if not names[0]:
            raise PolicyError(f"policy.servers: {self.servers[0]} serves no model", kind="http")
        name = names[0][0]
        missing = [s for s, listed in zip(self.servers, names, strict=True) if name not in listed]
        if missing:
            raise PolicyError(f"policy.servers: {missing} do not serve model {name!r}", kind="config")
        return name


def _choices(server: str, resp: httpx.Response, n: int) -> list[dict[str, Any]]:
    try:
        choices = [dict(c) for c in resp.json()["choices"]]
    except (ValueError, KeyError, TypeError) as exc:
        why = f"{server}: malformed completion answer: {resp.text[:300]}"
        raise PolicyError(why, kind="protocol") from exc
    if len(choices) != n:
        raise PolicyError(f"{server}: {len(choices)} choices for n={n}", kind="protocol")
    return sorted(choices, key=lambda c: int(c.get("index", 0)))


def _token_ids(server: str, choice: Mapping[str, Any]) -> list[int]:
    """The sampled ids: `token_ids` (vLLM >= 0.10.2), else parsed from `logprobs.tokens` entries
    'token_id:N' (`return_tokens_as_token_ids`)."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
        return [int(t) for t in ids]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        try:
            return [int(t[len("token_id:") :]) for t in tokens]
        except ValueError:
            pass
    raise PolicyError(
        f"{server}: the answer has no sampled token ids (neither `token_ids` nor 'token_id:N' tokens); "
        "the remote backend needs a server that returns them (vLLM with return_token_ids or "
        "return_tokens_as_token_ids, or `trialground policy serve`)",
        kind="protocol",
    )


def _eos_ids(config: PolicyConfig, tokenizer: Any) -> frozenset[int]:
    """The tokenizer's eos plus the model's generation config's (chat models end turns with either)."""
    ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    try:
        from transformers import GenerationConfig

        from trialground.policy.tiny import resolve_model_dir

        eos = GenerationConfig.from_pretrained(
            resolve_model_dir(config.model), trust_remote_code=False
        ).eos_token_id
    except (OSError, ValueError):
        eos = None
    if eos is not None:
        ids |= {eos} if isinstance(eos, int) else set(eos)
    return frozenset(ids)
