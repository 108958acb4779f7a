"""Host side of the supervisor protocol: send one request, collect its bounded output and exit report."""

from __future__ import annotations

import asyncio
import marshal
from dataclasses import dataclass, field

from trialground.sandbox.backends.bwrap.supervisor import HEADER_SIZE, MAX_FRAME, decode_header, encode_frame


class ChannelClosed(Exception):
    """The supervisor went away (it was killed, or the sandbox died)."""


@dataclass
class Collected:
    """Output of one command, cut at `cap` bytes per stream whatever the supervisor sends."""

    cap: int
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    seen: dict[str, int] = field(default_factory=lambda: {"O": 0, "E": 0})

    def add(self, kind: str, data: bytes) -> None:
        buf = self.stdout if kind == "O" else self.stderr
        self.seen[kind] += len(data)
        room = self.cap - len(buf)
        if room > 0:
            buf += data[:room]


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
