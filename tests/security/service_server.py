"""Run the sandbox service in its own process on 127.0.0.1, port 0; print the port, then serve.

    python service_server.py TOKEN MAX_BODY_BYTES HEADER_TIMEOUT_S BODY_TIMEOUT_S

A process of its own so that the tests can read the server's memory from /proc/<pid>/status.
"""

from __future__ import annotations

import socket
import sys

import uvicorn

from trialground.sandbox.service.app import create_app, uvicorn_config


def main() -> None:
    token, max_body, header_timeout, body_timeout = sys.argv[1:5]
    app = create_app(
        token, max_sessions=4, idle_s=120, max_body_bytes=int(max_body), body_timeout_s=float(body_timeout)
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn_config(app, header_timeout_s=float(header_timeout), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
