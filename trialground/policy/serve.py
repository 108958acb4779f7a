"""`trialground policy serve`: a small inference server with the vLLM OpenAI-compatible API that the
remote backend uses, backed by trialground's own HF sampler (`HFPolicy`). A reference implementation:
it lets decoupled sampling and training run, and be tested, on a machine without a GPU.

Routes (request and answer fields as vLLM's server has them):

- `GET /health`, `GET /v1/models` (one model, `served_name`).
- `POST /v1/completions`: `prompt` is token ids (`[1, 2, 3]` or a list of such lists) or text;
  `n`, `max_tokens`, `temperature`, `top_p`, `stop`, `seed`, `logprobs`, `return_token_ids`,
  `return_tokens_as_token_ids`, `include_stop_str_in_output`, `skip_special_tokens`. Choice `index` is
  `prompt_index * n + sample_index`. `logprobs.token_logprobs[i]` is the sampling logprob of
  `token_ids[i]` under the HF policy's contract (after temperature and top-p); `top_logprobs` holds only
  the sampled token (no alternatives are computed). A turn ended by the model's eos has
  `finish_reason` "stop" and `stop_reason` null, with the eos token in `token_ids`, as vLLM reports it.
  Streaming is refused.
- `POST /collective_rpc` with `{"method": "trialground_load_weights", "args": [DIR]}`: load the
  safetensors weights in DIR (what vLLM does with trialground's worker extension). Other methods: 400.
- `POST /reset_prefix_cache`: accepted; this sampler keeps no cache between requests.
- `POST /weight_checker` with `{"action": "checksum"}`: SHA-256 of every weight under its Hugging Face
  name (vLLM's route has the same shape but digests vLLM's internal, fused parameters).
- `GET /trialground/info`: model, requests served, weight loads.

One request generates at a time (the sampler batches the `n` samples and the prompts of one request);
a weight load waits for the generation that is running, so every request that starts after a load
returns uses the loaded weights. Bad requests get HTTP 400 naming the field; the server never dies on
one. It binds 127.0.0.1 unless told otherwise and has no authentication: the load route reads any
directory the server's user can read.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trialground.errors import PolicyError
from trialground.policy.base import Generation, SamplingParams
from trialground.policy.weight_files import RELOAD_METHOD, read_weights, tensor_digest

MAX_BODY_BYTES = 64 * 1024 * 1024


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class CompletionRequest(BaseModel):
    """The fields of vLLM's completion request that this server honours (others are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str | None = None
    prompt: list[int] | list[list[int]] | str | list[str]
    n: int = Field(1, ge=1, le=256)
    max_tokens: int = Field(16, ge=1, le=131072)
    temperature: float = Field(1.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    stream: bool = False


class ReferenceServer:
    """The routes above over one `HFPolicy`. `url` is known once constructed (port 0 picks a free one)."""

    def __init__(self, policy: Any, *, served_name: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.policy = policy
        self.served_name = served_name
        self.requests = 0
        self.weight_loads = 0
        self._lock = threading.Lock()  # one generation or weight load at a time
        self._counts = threading.Lock()
        limit = getattr(policy.model.config, "max_position_embeddings", None)
        self.max_positions: int | None = int(limit) if isinstance(limit, int) else None
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ------------------------------------------------------------------ routes

    def route(self, method: str, path: str, body: Any) -> dict[str, Any]:
        if method == "GET" and path == "/health":
            return {}
        if method == "GET" and path == "/v1/models":
            return {"object": "list", "data": [{"id": self.served_name, "object": "model"}]}
        if method == "GET" and path == "/trialground/info":
            return {"model": self.served_name, "requests": self.requests, "weight_loads": self.weight_loads}
        if method == "POST" and path == "/v1/completions":
            return self.complete(body)
        if method == "POST" and path == "/collective_rpc":
            return self.collective_rpc(body)
        if method == "POST" and path == "/reset_prefix_cache":
            return {}
        if method == "POST" and path == "/weight_checker":
            return self.weight_checker(body)
        if path in ("/health", "/v1/models", "/trialground/info", "/v1/completions", "/collective_rpc"):
            raise BadRequest(f"{method} is not allowed on {path}", status=405)
        raise BadRequest(f"no route {path}", status=404)

    def complete(self, body: Any) -> dict[str, Any]:
        try:
            req = CompletionRequest.model_validate(body)
        except ValidationError as exc:
            raise BadRequest(_describe(exc)) from exc
        if req.stream:
            raise BadRequest("stream: streaming is not supported by this server")
        if req.model is not None and req.model != self.served_name:
            raise BadRequest(
                f"model: the model `{req.model}` does not exist (this server has `{self.served_name}`)",
                status=404,
            )
        prompts = self._prompts(req)
        stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        try:
            params = SamplingParams(
                temperature=req.temperature,
                top_p=req.top_p,
                max_new_tokens=req.max_tokens,
                stop=stops,
                seed=req.seed,
            )
        except ValidationError as exc:
            raise BadRequest(_describe(exc)) from exc
        rows = [p for p in prompts for _ in range(req.n)]
        with self._lock:
            try:
                gens: list[Generation] = self.policy.generate_sync(rows, params)
            except PolicyError as exc:
                raise BadRequest(f"generation failed: {exc}", status=500) from exc
        with self._counts:
            self.requests += 1
        choices = [self._choice(i, g, req, stops) for i, g in enumerate(gens)]
        completion_tokens = sum(len(g.token_ids) for g in gens)
        prompt_tokens = sum(len(p) for p in prompts)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.served_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _prompts(self, req: CompletionRequest) -> list[list[int]]:
        raw: Any = req.prompt
        if isinstance(raw, str) or (raw and isinstance(raw[0], int)):
            raw = [raw]
        if not raw:
            raise BadRequest("prompt: empty")
        tok = self.policy.tokenizer
        vocab = len(tok)
        prompts = []
        for i, p in enumerate(raw):
            ids = list(tok.encode(p, add_special_tokens=False)) if isinstance(p, str) else list(p)
            if not ids:
                raise BadRequest(f"prompt[{i}]: no tokens")
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise BadRequest(f"prompt[{i}]: token ids outside the vocabulary (0..{vocab - 1}): {bad[:5]}")
            if self.max_positions is not None and len(ids) + req.max_tokens > self.max_positions:
                raise BadRequest(
                    f"prompt[{i}]: {len(ids)} prompt tokens + max_tokens {req.max_tokens} exceed the "
                    f"model's maximum context length of {self.max_positions} tokens"
                )
            prompts.append(ids)
        return prompts

    def _choice(
        self, index: int, g: Generation, req: CompletionRequest, stops: tuple[str, ...]
    ) -> dict[str, Any]:
        tok = self.policy.tokenizer
        text = tok.decode(list(g.token_ids), skip_special_tokens=req.skip_special_tokens)
        stop_reason: str | None = None
        finish = "length" if g.finish_reason == "length" else "stop"
        if g.finish_reason == "stop":
            hits = [(text.find(s), s) for s in stops if s in text]
            at, stop_reason = min(hits)
            if not req.include_stop_str_in_output:
                text = text[:at]
        choice: dict[str, Any] = {
            "index": index,
            "text": text,
            "finish_reason": finish,
            "stop_reason": stop_reason,
            "logprobs": None,
        }
        if req.logprobs is not None:
            pieces = [tok.decode([t], skip_special_tokens=False) for t in g.token_ids]
            names = [f"token_id:{t}" for t in g.token_ids] if req.return_tokens_as_token_ids else pieces
            offsets, at = [], 0
            for piece in pieces:
                offsets.append(at)
                at += len(piece)
            choice["logprobs"] = {
                "tokens": names,
                "token_logprobs": list(g.logprobs),
                "top_logprobs": [{name: lp} for name, lp in zip(names, g.logprobs, strict=True)],
                "text_offset": offsets,
            }
        if req.return_token_ids:
            choice["token_ids"] = list(g.token_ids)
        return choice

    def collective_rpc(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("collective_rpc: expected a JSON object")
        method, args = body.get("method"), body.get("args", [])
        if method != RELOAD_METHOD:
            raise BadRequest(f"method: this server implements only {RELOAD_METHOD!r}, not {method!r}")
        if not (isinstance(args, list) and len(args) == 1 and isinstance(args[0], str)):
            raise BadRequest(f"args: {RELOAD_METHOD} takes one argument, the weights directory")
        try:
            weights = read_weights(args[0])
        except PolicyError as exc:
            raise BadRequest(f"args[0]: {exc}") from exc
        own = self.policy.model.state_dict()
        unknown = sorted(set(weights) - set(own))
        if unknown:
            raise BadRequest(f"args[0]: weights this model does not have: {unknown[:5]}")
        wrong = [k for k, v in weights.items() if tuple(v.shape) != tuple(own[k].shape)]
        if wrong:
            raise BadRequest(f"args[0]: weights of the wrong shape: {wrong[:5]}")
        with self._lock:  # no generation is running: the load applies at once
            self.weight_loads += 1
            self.policy.load_weights(weights, self.weight_loads)
        return {"results": [len(weights)]}

    def weight_checker(self, body: Any) -> dict[str, Any]:
        action = body.get("action") if isinstance(body, dict) else None
        if action != "checksum":
            raise BadRequest(f"action: this server implements only 'checksum', not {action!r}")
        with self._lock:
            state = self.policy.model.state_dict()
            return {"checksums": {name: tensor_digest(t) for name, t in state.items()}}


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())


def _handler(server: ReferenceServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a request log per generation would drown the trainer's output

        def do_GET(self) -> None:
            self._answer("GET", None)

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                return self._send(400, _error("Content-Length: not a number", 400))
            if length > MAX_BODY_BYTES:
                return self._send(413, _error(f"body: over {MAX_BODY_BYTES} bytes", 413))
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
            except (ValueError, UnicodeDecodeError) as exc:
                return self._send(400, _error(f"body: not JSON ({exc})", 400))
            self._answer("POST", body)

        def _answer(self, method: str, body: Any) -> None:
            path = self.path.split("?", 1)[0]
            try:
                self._send(200, server.route(method, path, body))
            except BadRequest as exc:
                self._send(exc.status, _error(str(exc), exc.status))
            except Exception as exc:  # a bug must answer 500, not kill the connection silently
                self._send(500, _error(f"{type(exc).__name__}: {exc}", 500))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _error(message: str, code: int) -> dict[str, Any]:
    kind = "BadRequestError" if code < 500 else "InternalServerError"
    return {"object": "error", "message": message, "type": kind, "code": code}
