"""Host side of the supervisor protocol: send one request, collect its bounded output and exit report."""

from __future__ import annotations

import asyncio
import marshal

from trialground.sandbox.backends.bwrap.supervisor_wire import (
    HEADER_SIZE,
    MAX_FRAME,
    decode_header,
    encode_frame,
)
from trialground.sandbox.results import Collected


class ChannelClosed(Exception):
    """The supervisor went away (it was killed, or the sandbox died)."""


async def read_frame(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    try:
        size, kind = decode_header(await reader.readexactly(HEADER_SIZE))
        if size > MAX_FRAME:
            raise ChannelClosed(f"oversized frame from the supervisor ({size} bytes)")
        return kind, await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise ChannelClosed("the supervisor closed its channel") from exc


async def send_request(writer: asyncio.StreamWriter, request: dict, stdin: bytes) -> None:
    try:
        writer.write(encode_frame(b"R", marshal.dumps(request)))
        for i in range(0, len(stdin), MAX_FRAME):
            writer.write(encode_frame(b"I", stdin[i : i + MAX_FRAME]))
        writer.write(encode_frame(b"I", b""))
        await writer.drain()
    except (ConnectionError, RuntimeError) as exc:
        raise ChannelClosed("cannot write to the supervisor") from exc


async def collect(reader: asyncio.StreamReader, out: Collected) -> dict:
    """Read frames until the exit report; output goes into `out`."""
    while True:
        kind, payload = await read_frame(reader)
        if kind in ("O", "E"):
            out.add(kind, payload)
        elif kind == "X":
            report: dict = marshal.loads(payload)
            return report
