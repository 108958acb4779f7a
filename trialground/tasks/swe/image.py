"""A repository's workspace image: sandboxes holding its pristine tree, snapshotted once, restored per use.

`RepoImage(config, files)` writes the files into a sandbox once and snapshots it; `async with
image.lease() as sandbox:` hands out a sandbox restored to that snapshot (with overlays a restore swaps
layers: its cost does not grow with the number of files, `benchmarks/swe_restore.py`), so every test run
of task building and every grading starts from the same bytes. Up to `keep` idle sandboxes are kept; a
lease that raised closes its sandbox instead of keeping it. One image belongs to the event loop that first
used it (sandboxes are that loop's).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from trialground.sandbox.base import Sandbox, SandboxConfig


class RepoImage:
    def __init__(self, config: SandboxConfig, files: Mapping[str, str], *, keep: int = 4) -> None:
        self.config = config
        self.files = dict(files)
        self.keep = keep
        self._idle: list[tuple[Sandbox, str]] = []
        self.created = 0

    async def _new(self) -> tuple[Sandbox, str]:
        from trialground.sandbox.factory import open_sandbox  # late: the factory pulls in every backend

        sandbox = await open_sandbox(self.config, self.files)
        try:
            sid = await sandbox.snapshot()
        except BaseException:
            await sandbox.close()
            raise
        self.created += 1
        return sandbox, sid

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Sandbox]:
        if self._idle:
            sandbox, sid = self._idle.pop()
            try:
                await sandbox.hand_over(sid)
            except BaseException:
                await sandbox.close()
                raise
        else:
            sandbox, sid = await self._new()
        try:
            yield sandbox
        except BaseException:
            await sandbox.close()
            raise
        if len(self._idle) < self.keep:
            self._idle.append((sandbox, sid))
        else:
            await sandbox.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for sandbox, _ in idle:
            await sandbox.close()
