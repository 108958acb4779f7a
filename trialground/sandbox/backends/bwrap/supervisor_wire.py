"""The supervisor's wire: frames over its stdin and stdout (part of the supervisor's shipped source,
`boot.SUPERVISOR_PARTS`; the host's end is `channel.py`). Standard library built-ins only."""

import posix

HEADER_SIZE = 5  # payload size (4 bytes, big-endian), then the frame kind (1 byte)
# host -> supervisor: R request (marshal), I stdin bytes (may repeat, then an empty one).
# supervisor -> host: H hello (marshal), O stdout bytes, E stderr bytes, X exit report (marshal).
MAX_FRAME = 1 << 20


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + kind + payload


def decode_header(header: bytes) -> "tuple[int, str]":
    """(payload size, kind) of a frame's first HEADER_SIZE bytes."""
    return int.from_bytes(header[:4], "big"), chr(header[4])


def read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = posix.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> "tuple[str, bytes]":
    size, kind = decode_header(read_exact(fd, HEADER_SIZE))
    return kind, read_exact(fd, size)


def read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := posix.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[posix.write(fd, view) :]
