"""Real `trialground ... serve` processes on 127.0.0.1, port 0, for the integration tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

TRIALGROUND = str(Path(sys.executable).parent / "trialground")
LISTENING = re.compile(r"listening on (http://\S+)")


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)  # what the server printed (uvicorn's log), as it comes


@contextmanager
def serve(
    args: list[str],
    *,
    start_timeout_s: float = 120.0,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[Served]:
    """Run `trialground ARGS` (a `serve` command with `--port 0`; or `command` + ARGS) until the block
    ends; its URL is read from the line it prints once it listens."""
    proc = subprocess.Popen(
        [*(command or [TRIALGROUND]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    assert proc.stdout is not None and proc.stderr is not None
    served = Served("", proc)
    started = threading.Event()

    def drain(stream: IO[str], watch: bool) -> None:
        for line in stream:
            served.log.append(line)
            match = LISTENING.search(line) if watch and not served.url else None
            if match:
                served.url = match.group(1)
                started.set()
        started.set()  # ended: the server is not coming

    threading.Thread(target=drain, args=(proc.stdout, True), daemon=True).start()
    threading.Thread(target=drain, args=(proc.stderr, False), daemon=True).start()
    try:
        started.wait(start_timeout_s)
        assert served.url, f"the server did not start: {''.join(served.log)[-2000:]}"
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
