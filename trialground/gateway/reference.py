"""`trialground policy serve`: the reference inference server, on FastAPI/uvicorn, backed by the project's
HF sampler (`HFPolicy`). It lets decoupled sampling and training run, and be tested, on a machine without
a GPU, and gives the `openai` SDK a local model.

Routes:

- `GET /health`; `GET /v1/models` (one model, `served_name`);
- `POST /v1/chat/completions` and `POST /v1/completions`: the gateway's routes (`trialground.gateway`),
  over one session that records nothing. `/v1/completions` is vLLM's route as the `remote` backend uses
  it: `prompt` as token ids or text, `n`, `max_tokens`, `temperature`, `top_p`, `stop`, `seed`,
  `logprobs`, `return_token_ids`, `return_tokens_as_token_ids`, `include_stop_str_in_output`,
  `skip_special_tokens`; choice `index` is `prompt_index * n + sample_index`; `token_logprobs[i]` is the
  sampling logprob of `token_ids[i]`; a turn ended by eos has `finish_reason` "stop" with the eos id in
  `token_ids`. A prompt plus `max_tokens` beyond the model's context is a 400, as is a `seed` outside
  0..2**63-1. A sampling field the request leaves out (top_k, min_p, temperature, ...) takes the
  server's default: neutral, or what `sampling_defaults` sets (`policy serve --default-top-k`), as vLLM
  fills omitted fields from the model's generation_config.json. Penalties are refused (400). Both stream
  with `stream: true` (`gateway/streaming.py`); `top_logprobs` (chat) and `logprobs: k` (completions)
  list the k likeliest tokens (`policy/top_logprobs.py`, one more forward pass under the same lock);
- `POST /v1/responses`: the Responses API subset of `gateway/responses.py`, through the chat route;
- `POST /collective_rpc` with `{"method": "trialground_load_weights", "args": [DIR]}` loads the
  safetensors weights in DIR (what vLLM does with trialground's worker extension): names and shapes are
  checked from the files' headers first, then each tensor is copied into the model as it is read, so the
  server never holds a second copy of the model; `POST /reset_prefix_cache` (accepted; no cache is
  kept); `POST /pause?mode=wait` (vLLM's drain: no new generation starts, the running one finishes),
  `POST /resume`, `GET /is_paused`; `POST /weight_checker` `{"action": "checksum"}`: SHA-256 of every
  weight under its Hugging Face name; `GET /trialground/info` (model, request, load and pause counts,
  the weights' dtype, and `sampling_defaults`: the defaults that differ from the neutral ones);
- `POST /v1/load_lora_adapter` `{"lora_name", "lora_path"}` (vLLM's runtime LoRA route): the PEFT
  adapter in `lora_path` is merged into the weights, replacing the last adapter (the server keeps a copy
  of each adapted weight as it was, so adapters never accumulate), and `lora_name` becomes another name
  of the model in requests and `/v1/models`; `POST /v1/unload_lora_adapter` `{"lora_name"}` restores the
  weights. Unlike vLLM, which serves the base model and every loaded adapter side by side, this server
  holds one set of weights: after a load every name samples the adapted model.

Authentication: with `api_key`, every route but `/health` needs `Authorization: Bearer KEY` (401 before the
body is read). Without one, inference is open to whoever reaches the address (127.0.0.1 by default) and the
weight routes (`/collective_rpc`, `/weight_checker`, `/reset_prefix_cache`, `/pause`, `/resume`) are
refused with 403: they read any directory the server's user can read, or stop it serving, so they exist
only behind a key.

One generation or weight load at a time; a weight load waits for the generation that is running, so every
request that starts after a load returns uses the loaded weights.
"""

from __future__ import annotations

import asyncio
import hmac
import socket
from collections.abc import Sequence
from typing import Any

import uvicorn
from fastapi import Request

from trialground.errors import PolicyError
from trialground.gateway.app import Sessions, bearer, error_response, guarded, make_app, read_json
from trialground.gateway.logprobs import Alternatives
from trialground.gateway.session import GatewayError, Session
from trialground.policy.adapters import read_adapter
from trialground.policy.base import Generation, SamplingParams
from trialground.policy.top_logprobs import top_logprobs
from trialground.policy.weight_files import RELOAD_METHOD, iter_weights, tensor_digest, weight_headers
from trialground.ports import POLICY_SERVE_PORT, listen

DEFAULT_PORT = POLICY_SERVE_PORT  # every server's default: trialground/ports.py
WEIGHT_ROUTES = (
    "/collective_rpc",
    "/weight_checker",
    "/reset_prefix_cache",
    "/pause",
    "/resume",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
)


class _Locked:
    """The policy as the session's generator, one generation or weight load at a time."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.lock = asyncio.Lock()
        self.open = asyncio.Event()  # cleared by /pause: new generations wait until /resume
        self.open.set()

    @property
    def version(self) -> int:
        return int(self.policy.version)

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if params.penalties():
            raise GatewayError(
                f"this server applies no repetition, presence or frequency penalty: {params.penalties()}"
            )
        await self.open.wait()
        async with self.lock:
            return list(await self.policy.generate(prompts, params))

    async def pause(self) -> None:
        """vLLM's `/pause?mode=wait`: no new generation starts, and the running one finishes first."""
        self.open.clear()
        async with self.lock:
            pass

    async def alternatives(
        self, prompt: Sequence[int], g: Generation, params: SamplingParams, k: int
    ) -> Alternatives:
        """The k most likely tokens at each of `g`'s positions, under the weights that sampled it."""
        async with self.lock:
            if g.version != self.version:
                raise GatewayError(
                    "the weights changed while answering (a push); send the request again",
                    status=503,
                    code="weights_changed",
                )
            return await asyncio.to_thread(top_logprobs, self.policy, prompt, g.token_ids, params, k)


class ReferenceServer:
    """The routes above over one `HFPolicy`. `url` is known once constructed (port 0 picks a free one)."""

    def __init__(
        self,
        policy: Any,
        *,
        served_name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        sock: socket.socket | None = None,
        sampling_defaults: SamplingParams | None = None,
    ) -> None:
        """`sock`: a socket already listening (then `host` and `port` are not used). `sampling_defaults`:
        what a request that leaves a sampling field out gets (vLLM takes them from the model's
        generation_config.json unless started with `--generation-config vllm`); None: the neutral ones."""
        self.policy = policy
        self.sampling_defaults = sampling_defaults or SamplingParams()
        self.served_name = served_name
        self.api_key = api_key or None
        self.requests = 0
        self.weight_loads = 0
        self.pauses = 0
        limit = getattr(policy.model.config, "max_position_embeddings", None)
        self.max_positions: int | None = int(limit) if isinstance(limit, int) else None
        self.sock = sock if sock is not None else listen(host, port, backlog=128)
        self.sock.setblocking(False)
        self._generator: _Locked | None = None
        self._lora_base: dict[str, Any] = {}  # adapted weights as they were before any adapter
        self._session: Session | None = None
        self._server: uvicorn.Server | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def app(self) -> Any:
        generator = _Locked(self.policy)
        self._generator = generator
        session = Session(
            generator,
            self.sampling_defaults,
            self.served_name,
            max_context_tokens=self.max_positions,
            record=False,
            cap_to_budget=False,
            alternatives=generator.alternatives,
        )
        app = make_app(Sessions(), title="trialground policy serve", default=session)

        @app.middleware("http")
        async def count_and_guard(request: Request, call_next: Any) -> Any:
            path = request.url.path
            try:
                if path in WEIGHT_ROUTES and self.api_key is None:
                    raise GatewayError(
                        f"{path}: weight routes need a key; start the server with --api-key-file",
                        status=403,
                        code="forbidden",
                    )
                key = self.api_key
                if (
                    key is not None
                    and path != "/health"
                    and not hmac.compare_digest(bearer(request).encode(), key.encode())
                ):
                    raise GatewayError("invalid API key", status=401, code="invalid_api_key")
            except GatewayError as exc:
                return error_response(exc)
            if path.endswith(("/completions", "/responses")):
                self.requests += 1
            return await call_next(request)

        async def info(_request: Request) -> Any:
            return {
                "model": self.served_name,
                "requests": self.requests,
                "weight_loads": self.weight_loads,
                "pauses": self.pauses,
                "sampling_defaults": self.sampling_defaults.changed(),
                "dtype": str(next(self.policy.model.parameters()).dtype).removeprefix("torch."),
            }

        async def reset(_request: Request) -> Any:
            return {}

        async def pause(request: Request) -> Any:
            mode = request.query_params.get("mode", "abort")
            if mode != "wait":
                raise GatewayError(f"mode: this server pauses only with mode=wait (drain), not {mode!r}")
            await generator.pause()
            self.pauses += 1
            return {"status": "paused"}

        async def resume(_request: Request) -> Any:
            generator.open.set()
            return {"status": "resumed"}

        async def is_paused(_request: Request) -> Any:
            return {"is_paused": not generator.open.is_set()}

        app.add_api_route("/trialground/info", guarded(info), methods=["GET"])
        app.add_api_route("/collective_rpc", guarded(self._collective_rpc), methods=["POST"])
        app.add_api_route("/reset_prefix_cache", guarded(reset), methods=["POST"])
        app.add_api_route("/pause", guarded(pause), methods=["POST"])
        app.add_api_route("/resume", guarded(resume), methods=["POST"])
        app.add_api_route("/is_paused", guarded(is_paused), methods=["GET"])
        app.add_api_route("/weight_checker", guarded(self._weight_checker), methods=["POST"])
        app.add_api_route("/v1/load_lora_adapter", guarded(self._load_lora), methods=["POST"])
        app.add_api_route("/v1/unload_lora_adapter", guarded(self._unload_lora), methods=["POST"])
        self._session = session
        return app

    @property
    def session(self) -> Session:
        """The one session every request is answered by (made by `app()`)."""
        assert self._session is not None, "app() first"
        return self._session

    async def _lora_body(self, request: Request, *fields: str) -> list[str]:
        body = await read_json(request)
        if not isinstance(body, dict):
            raise GatewayError("body: expected a JSON object")
        values = [body.get(f) for f in fields]
        for name, value in zip(fields, values, strict=True):
            if not isinstance(value, str) or not value:
                raise GatewayError(f"{name}: expected a non-empty string")
        return [str(v) for v in values]

    async def _load_lora(self, request: Request) -> Any:
        """vLLM's runtime LoRA route: the adapter in `lora_path` (PEFT's format) is merged into the weights
        (replacing the last one) and `lora_name` is served as another name of the model."""
        name, path = await self._lora_body(request, "lora_name", "lora_path")
        try:
            adapter = await asyncio.to_thread(read_adapter, path)
            deltas = dict(await asyncio.to_thread(lambda: list(adapter.deltas())))
        except PolicyError as exc:
            raise GatewayError(f"lora_path: {exc}") from exc
        own = self.policy.model.state_dict()
        unknown = sorted(set(deltas) - set(own))
        if unknown:
            raise GatewayError(
                f"lora_path: the adapter changes weights this model does not have: {unknown[:5]}"
            )
        wrong = [k for k, d in deltas.items() if tuple(d.shape) != tuple(own[k].shape)]
        if wrong:
            raise GatewayError(f"lora_path: the adapter's deltas do not fit these weights: {wrong[:5]}")
        await self._merge(deltas)
        self.session.aliases = frozenset({name})
        return {"status": "loaded", "lora_name": name, "weights_changed": len(deltas)}

    async def _unload_lora(self, request: Request) -> Any:
        (name,) = await self._lora_body(request, "lora_name")
        if name not in self.session.aliases:
            raise GatewayError(f"lora_name: no adapter {name!r} is loaded", status=404, code="not_found")
        await self._merge({})
        self.session.aliases = frozenset()
        return {"status": "unloaded", "lora_name": name}

    async def _merge(self, deltas: dict[str, Any]) -> None:
        """The starting weights of what the last adapter changed, and base + delta for what this one
        changes (`_lora_base` keeps a copy of each adapted weight as it was before any adapter)."""
        own = self.policy.model.state_dict()
        for name in deltas:
            if name not in self._lora_base:
                self._lora_base[name] = own[name].detach().clone()

        def merged() -> Any:
            for name, base in self._lora_base.items():
                delta = deltas.get(name)
                yield name, base if delta is None else (base.float() + delta).to(base.dtype)

        assert self._generator is not None
        async with self._generator.lock:
            self.weight_loads += 1
            await asyncio.to_thread(self.policy.load_weight_stream, merged(), self.weight_loads)

    async def _collective_rpc(self, request: Request) -> Any:
        body = await read_json(request)
        if not isinstance(body, dict):
            raise GatewayError("collective_rpc: expected a JSON object")
        method, args = body.get("method"), body.get("args", [])
        if method != RELOAD_METHOD:
            raise GatewayError(f"method: this server implements only {RELOAD_METHOD!r}, not {method!r}")
        if not (isinstance(args, list) and len(args) == 1 and isinstance(args[0], str)):
            raise GatewayError(f"args: {RELOAD_METHOD} takes one argument, the weights directory")
        try:
            headers = await asyncio.to_thread(weight_headers, args[0])
        except PolicyError as exc:
            raise GatewayError(f"args[0]: {exc}") from exc
        own = self.policy.model.state_dict()
        unknown = sorted(set(headers) - set(own))
        if unknown:
            raise GatewayError(f"args[0]: weights this model does not have: {unknown[:5]}")
        wrong = [k for k, (_, shape) in headers.items() if shape != tuple(own[k].shape)]
        if wrong:
            raise GatewayError(f"args[0]: weights of the wrong shape: {wrong[:5]}")
        assert self._generator is not None
        async with self._generator.lock:  # no generation is running: the load applies at once
            self.weight_loads += 1
            stream = iter_weights(args[0])  # bucket by bucket, one tensor in memory at a time
            try:
                count = await asyncio.to_thread(self.policy.load_weight_stream, stream, self.weight_loads)
            except PolicyError as exc:
                raise GatewayError(f"args[0]: {exc}") from exc
            self._lora_base = {}  # full weights replace the base any adapter was merged into
            self.session.aliases = frozenset()
        return {"results": [count]}

    async def _weight_checker(self, request: Request) -> Any:
        body = await read_json(request)
        action = body.get("action") if isinstance(body, dict) else None
        if action != "checksum":
            raise GatewayError(f"action: this server implements only 'checksum', not {action!r}")
        assert self._generator is not None
        async with self._generator.lock:
            state = self.policy.model.state_dict()
            return {"checksums": {name: tensor_digest(t) for name, t in state.items()}}

    def serve_forever(self) -> None:
        """Serve until `shutdown()` (from another thread) or an interrupt."""
        config = uvicorn.Config(
            self.app(), log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        if self._stopped:
            return
        asyncio.run(self._server.serve(sockets=[self.sock]))

    def shutdown(self) -> None:
        self._stopped = True
        if self._server is not None:
            self._server.should_exit = True

    def close(self) -> None:
        self.shutdown()
        self.sock.close()
