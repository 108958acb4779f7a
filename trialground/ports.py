"""Default ports of trialground's servers, and the listening socket they all start from.

One default per server, pairwise distinct, so any of them can run side by side on one machine:

| server                               | default port                                      |
|--------------------------------------|---------------------------------------------------|
| `trialground env serve`              | 8002                                              |
| `trialground policy serve`           | 8001                                              |
| `trialground sandbox serve`          | 8765                                              |
| `trialground dashboard`              | 8766                                              |
| Prometheus exporter (`monitor.prometheus_port`) | off unless set; 9108 is the documented choice |

8000 is left to vLLM (`vllm serve`'s default), which the `remote` and `openai` policy backends and the
judges talk to. The OpenAI-compatible gateway of agentic episodes listens on a per-run unix socket and
takes no TCP port. Every server also takes port 0: any free port, printed at start.
"""

from __future__ import annotations

import errno
import socket

ENV_SERVE_PORT = 8002
POLICY_SERVE_PORT = 8001
SANDBOX_SERVE_PORT = 8765
DASHBOARD_PORT = 8766
PROMETHEUS_PORT = 9108

DEFAULT_PORTS = {
    "env serve": ENV_SERVE_PORT,
    "policy serve": POLICY_SERVE_PORT,
    "sandbox serve": SANDBOX_SERVE_PORT,
    "dashboard": DASHBOARD_PORT,
    "prometheus": PROMETHEUS_PORT,
}


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 takes any free port (read it from the socket).
    Raises `OSError` (errno EADDRINUSE when another process holds the port; see `listen_error`)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def listen_error(host: str, port: int, exc: OSError, option: str = "--port") -> str:
    """One line saying why (host, port) could not be listened on, and what to do about it (`option`
    names the setting that chooses the port)."""
    where = f"{f'[{host}]' if ':' in host else host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is already in use (another process holds it); "
            f"choose another with {option}, or 0 for any free port"
        )
    if exc.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need privileges)"
    return f"cannot listen on {where}: {exc.strerror or exc}"
