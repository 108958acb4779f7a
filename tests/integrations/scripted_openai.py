"""A scripted OpenAI-compatible chat server over real HTTP (bound to port 0), for client-side tests.

`ScriptedOpenAI(answers, default=None)` answers `POST .../chat/completions` with `answers[last user
message]`, else `default` (a 404 body when there is none) and records every request body it got. A
request with `"stream": true` gets the answer as server-sent chunks.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedOpenAI:
    def __init__(self, answers: dict[str, str], default: str | None = None) -> None:
        self.answers = answers
        self.default = default
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append(body)
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                users = [m for m in body.get("messages", []) if m.get("role") == "user"]
                content = users[-1].get("content") if users else None
                if isinstance(content, list):  # content parts
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                text = outer.answers.get(content, outer.default) if isinstance(content, str) else None
                if text is None:
                    return self._send(404, {"error": {"message": "unscripted prompt"}})
                if body.get("stream"):
                    return self._stream(body, text)
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(outer.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "scripted"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                                "logprobs": None,
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                    },
                )

            def _stream(self, body: dict[str, Any], text: str) -> None:
                """The answer as server-sent events: one content chunk, the finish (with usage), [DONE]."""
                head = {
                    "id": f"chatcmpl-{len(outer.requests)}",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                }
                delta = {"role": "assistant", "content": text}
                chunks = [
                    {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {
                        **head,
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                    },
                ]
                events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                data = events.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
