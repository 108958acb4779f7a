"""Server-sent events as OpenAI's streaming routes frame them.

Chat and completions streams are `data: {json}\\n\\n` events ended by `data: [DONE]\\n\\n`; the Responses
API names each event (`event: response.output_text.delta\\ndata: {json}\\n\\n`) and sends no `[DONE]`. The
`openai` SDK's `stream=True` reads both. Every answer is generated whole before its first event is sent
(the policy's `generate` returns finished rows), so a refusal or a failed generation is still an ordinary
HTTP error with its status, never an error in the middle of a stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.responses import StreamingResponse

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"


def frame(payload: dict[str, Any], *, event: str | None = None) -> bytes:
    """One event. JSON is written on one line (no newline can end the event early)."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


def _data_events(chunks: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for chunk in chunks:
        yield frame(chunk)
    yield DONE


def _named_events(events: Iterable[tuple[str, dict[str, Any]]]) -> Iterator[bytes]:
    for name, payload in events:
        yield frame(payload, event=name)


def _respond(body: Iterator[bytes]) -> StreamingResponse:
    # no-cache and no proxy buffering: a relay in between passes each event on as it comes
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type=MEDIA_TYPE, headers=headers)


def data_stream(chunks: Iterable[dict[str, Any]]) -> StreamingResponse:
    """A chat or completions stream: each chunk as a `data:` event, then `[DONE]`."""
    return _respond(_data_events(chunks))


def event_stream(events: Iterable[tuple[str, dict[str, Any]]]) -> StreamingResponse:
    """A Responses API stream: each `(type, payload)` as a named event."""
    return _respond(_named_events(events))
