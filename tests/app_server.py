"""A real HTTP server for a test: an ASGI app served by uvicorn on 127.0.0.1, in a thread of the test's
process, on a port the kernel picks (bound here and handed to uvicorn, so no other process takes it)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


@contextlib.contextmanager
def serve(app: Any, *, force_exit: bool = False, **config: Any) -> Iterator[str]:
    """Serve `app` until the block ends; yields its base URL `http://127.0.0.1:PORT`. `config`: more
    `uvicorn.Config` fields; `force_exit` stops without waiting for open connections."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # generous: a busy machine starts it slowly
    while not server.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    try:
        assert server.started, "the test's HTTP server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        server.force_exit = force_exit
        thread.join(10)
        sock.close()
