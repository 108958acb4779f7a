"""The sandbox service in a process of its own, so a test can kill it by pid and start it again.

    python service_process.py TOKEN PORT MAX_SESSIONS

PORT 0 picks a free port; the port is printed once the socket is bound (SO_REUSEADDR, so a restarted
service takes the same port back at once).
"""

from __future__ import annotations

import socket
import sys

import uvicorn

from trialground.sandbox.service.app import create_app, uvicorn_config


def main() -> None:
    token, port, max_sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    app = create_app(token, max_sessions=max_sessions, idle_s=120)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn_config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
