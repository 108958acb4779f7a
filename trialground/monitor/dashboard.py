"""`trialground dashboard RUN_DIR`: a live page of the report that refreshes as the run goes.

    GET /            the page (same sections as report.html) with a small inline script
    GET /api/state   JSON {"version", "last_step", "alerts", "updated", "path", "html"}: the script polls it
    GET /report.html a fresh static report

The run directory is re-read only when one of its files changed (size or mtime), so polling is cheap.
Standard-library HTTP server on its own thread; bind to loopback unless you mean to share it.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from trialground.monitor.report import render_page, render_sections
from trialground.monitor.rundata import RunData, load_run


class RunState:
    """The run directory's parsed content, reloaded when its files change."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._sig: tuple[Any, ...] | None = None
        self._data: RunData | None = None
        self._html = ""

    def _signature(self) -> tuple[Any, ...]:
        files = [
            self.run_dir / n
            for n in ("metrics.jsonl", "alerts.jsonl", "flagged.jsonl", "regressions.jsonl", "config.yaml")
        ]
        files += sorted((self.run_dir / "trajectories").glob("*.parquet"))
        sig = []
        for f in files:
            try:
                st = f.stat()
                sig.append((f.name, st.st_size, st.st_mtime_ns))
            except OSError:
                continue
        return tuple(sig)

    def current(self) -> tuple[RunData, str, str]:
        """(data, rendered sections, version) — re-rendered only after a change."""
        with self._lock:
            sig = self._signature()
            if sig != self._sig or self._data is None:
                self._data = load_run(self.run_dir)
                self._html = render_sections(self._data)
                self._sig = sig
            return self._data, self._html, str(hash(self._sig))


def _script(refresh_s: float, version: str) -> str:
    js = resources.files("trialground.monitor").joinpath("static/dashboard.js").read_text()
    ms = int(refresh_s * 1000)
    init = f"document.body.dataset.refreshMs='{ms}';document.body.dataset.version='{version}';"
    return f"<script>{init}{js}</script>"


def make_handler(state: RunState, refresh_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep the console for the run
            return

        def _send(self, body: bytes, ctype: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            route = self.path.split("?", 1)[0]
            try:
                data, html, version = state.current()
            except FileNotFoundError as exc:
                self._send(str(exc).encode(), "text/plain; charset=utf-8", 404)
                return
            if route in ("/", "/index.html"):
                page = render_page(data, script=_script(refresh_s, version))
                self._send(page.encode(), "text/html; charset=utf-8")
            elif route == "/api/state":
                body = {
                    "version": version,
                    "last_step": data.last_step,
                    "alerts": len(data.alerts),
                    "updated": time.time(),
                    "path": str(data.path),
                    "html": html,
                }
                self._send(json.dumps(body).encode(), "application/json")
            elif route == "/report.html":
                self._send(render_page(data).encode(), "text/html; charset=utf-8")
            else:
                self._send(b"not found", "text/plain", 404)

    return Handler


class Dashboard:
    """Serves the live dashboard of `run_dir` on host:port (port 0: a free port) from a daemon thread."""

    def __init__(
        self, run_dir: str | Path, host: str = "127.0.0.1", port: int = 0, refresh_s: float = 3.0
    ) -> None:
        path = Path(run_dir)
        if not path.is_dir():
            raise FileNotFoundError(f"no run directory at {path}")
        self.server = ThreadingHTTPServer((host, port), make_handler(RunState(path), refresh_s))
        self.server.daemon_threads = True
        self.host = host
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="dashboard", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self) -> Dashboard:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def close(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self._thread.join(timeout=5)
        self.server.server_close()
