"""`trialground dashboard RUN_DIR`: a live page of the report that refreshes as the run goes.

    GET /            the page (same sections as report.html) with a small inline script
    GET /api/state   JSON {"version", "last_step", "alerts", "updated", "path", "html"}: the script polls it
    GET /report.html a fresh static report

The run directory is re-read only when one of its files changed (size or mtime), so polling is cheap.
FastAPI on uvicorn (on its own thread, or the caller's); bind to loopback unless you mean to share it.
Every answer carries `Cache-Control: no-store`; any other path is a 404.
"""

from __future__ import annotations

import asyncio
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from trialground.monitor.report import render_page, render_sections
from trialground.monitor.rundata import RunData, load_run
from trialground.ports import listen


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


_NO_STORE = {"Cache-Control": "no-store"}


def make_app(state: RunState, refresh_s: float) -> FastAPI:
    """The dashboard's routes over `state` (module docstring)."""
    app = FastAPI(title="trialground dashboard", docs_url=None, redoc_url=None, openapi_url=None)

    def text(body: str, status: int) -> PlainTextResponse:
        return PlainTextResponse(body, status_code=status, headers=_NO_STORE)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        return text("not found" if exc.status_code == 404 else str(exc.detail), exc.status_code)

    # plain `def` routes: reading and rendering the run directory blocks, so they run in the thread pool
    @app.get("/")
    @app.get("/index.html")
    def page() -> Response:
        try:
            data, _html, version = state.current()
        except FileNotFoundError as exc:
            return text(str(exc), 404)
        return HTMLResponse(render_page(data, script=_script(refresh_s, version)), headers=_NO_STORE)

    @app.get("/api/state")
    def api_state() -> Response:
        try:
            data, html, version = state.current()
        except FileNotFoundError as exc:
            return text(str(exc), 404)
        body = {
            "version": version,
            "last_step": data.last_step,
            "alerts": len(data.alerts),
            "updated": time.time(),
            "path": str(data.path),
            "html": html,
        }
        return JSONResponse(body, headers=_NO_STORE)

    @app.get("/report.html")
    def report() -> Response:
        try:
            data, _html, _version = state.current()
        except FileNotFoundError as exc:
            return text(str(exc), 404)
        return HTMLResponse(render_page(data), headers=_NO_STORE)

    return app


class Dashboard:
    """Serves the live dashboard of `run_dir` on host:port (port 0: a free port): `start()` on a daemon
    thread, or `serve_forever()` on the calling one. The port is bound by the constructor (`OSError` when
    it is taken)."""

    def __init__(
        self, run_dir: str | Path, host: str = "127.0.0.1", port: int = 0, refresh_s: float = 3.0
    ) -> None:
        path = Path(run_dir)
        if not path.is_dir():
            raise FileNotFoundError(f"no run directory at {path}")
        self.app = make_app(RunState(path), refresh_s)
        self.sock = listen(host, port, backlog=128)
        self.host = host
        self.port: int = self.sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.serve_forever, name="dashboard", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}/"

    def start(self, timeout_s: float = 30.0) -> Dashboard:
        """Serve from a daemon thread; returns once the server accepts requests."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            raise RuntimeError(f"the dashboard did not start within {timeout_s:g} s")
        return self

    def serve_forever(self) -> None:
        """Serve until `close()` (from another thread) or an interrupt (on the main thread)."""
        asyncio.run(self._server.serve(sockets=[self.sock]))

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.sock.close()
