"""Sandboxes opened ahead and made ready for a Python program, for one-shot requests (`/run_code`).

A sandbox's first Python command pays for `site` (sys.path, the runtime's .pth files), which on some hosts
costs more than the rest of the sandbox together. `ReadyPool` keeps `size` sandboxes made ready with
`Sandbox.warm_python`: for the local backend the supervisor loads `site` itself, no command run
(`sandbox/backends/bwrap/supervisor.py`), and every Python command's process is then forked from an
interpreter that holds it, so a request gets a sandbox whose first Python command starts at once. Nothing
ran in them, so each is as new for its request as a fresh sandbox. A request that finds none ready opens a
fresh one (the prewarm spare of `SandboxConfig.prewarm`, or a new one); each one taken is replaced in the
background.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox


class ReadyPool:
    """See the module docstring. Belongs to the event loop that first uses it."""

    def __init__(self, config: SandboxConfig, size: int = 2) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self.config, self.size = config, size
        self._ready: list[Sandbox] = []
        self._filling: set[asyncio.Task[None]] = set()
        self._closed = False
        self.served_ready = 0  # requests that got a ready sandbox
        self.served_fresh = 0  # requests that found none ready

    async def open(self, files: Mapping[str, str | bytes]) -> Sandbox:
        """A sandbox holding `files`: a ready one if there is one, else a fresh one. The caller closes it."""
        sandbox = self._claim()
        self._refill()
        if sandbox is None:
            self.served_fresh += 1
            return await open_sandbox(self.config, files)
        self.served_ready += 1
        try:
            for path, data in files.items():
                await sandbox.write(path, data)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _claim(self) -> Sandbox | None:
        while self._ready:
            sandbox = self._ready.pop()
            if getattr(sandbox, "alive", lambda: True)():
                return sandbox
            asyncio.get_running_loop().create_task(sandbox.close())
        return None

    def _refill(self) -> None:
        while not self._closed and len(self._ready) + len(self._filling) < self.size:
            task = asyncio.get_running_loop().create_task(self._make())
            self._filling.add(task)
            task.add_done_callback(self._filling.discard)

    async def _make(self) -> None:
        try:
            sandbox = await open_sandbox(self.config)
        except Exception:  # no spare this time: requests open their own meanwhile
            return
        try:
            await sandbox.warm_python()
        except Exception:  # not made ready: requests open their own meanwhile
            await sandbox.close()
            return
        except BaseException:
            await sandbox.close()
            raise
        if self._closed:
            await sandbox.close()
            return
        self._ready.append(sandbox)

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._filling)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ready, self._ready = self._ready, []
        for sandbox in ready:
            with contextlib.suppress(Exception):
                await sandbox.close()
