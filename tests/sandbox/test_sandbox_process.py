"""The `process` backend: explicit only, loud about not isolating, limits still enforced."""

from __future__ import annotations

import logging
import time

import pytest

from trialground.errors import SandboxError
from trialground.sandbox.base import ExecStatus, Limits, SandboxConfig
from trialground.sandbox.factory import open_sandbox

CFG = SandboxConfig(backend="process", limits=Limits(wall_s=5, output_bytes=4096))


async def test_warns_that_it_does_not_isolate(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        async with await open_sandbox(CFG) as sb:
            assert (await sb.exec(["echo", "hi"])).stdout == "hi\n"
    assert "does NOT isolate" in caplog.text


async def test_limits_and_results() -> None:
    async with await open_sandbox(CFG, {"in.txt": "data"}) as sb:
        r = await sb.exec("cat in.txt; cat; exit 2", stdin="+in")
        assert r.status is ExecStatus.NONZERO_EXIT and r.stdout == "data+in"
        start = time.monotonic()
        r = await sb.exec("sleep 10", limits=Limits(wall_s=0.3))
        assert r.status is ExecStatus.TIMEOUT and time.monotonic() - start < 8  # not the 10 s sleep
        r = await sb.exec(["head", "-c", "1G", "/dev/zero"])
        assert r.status is ExecStatus.OUTPUT_LIMIT and len(r.stdout) == 4096
        r = await sb.exec(["no-such-program"])
        assert r.exit_code == 127


async def test_snapshot_restore_fork_by_copying() -> None:
    async with await open_sandbox(CFG, {"f": "1"}) as sb:
        sid = await sb.snapshot()
        await sb.exec("echo 2 > f; touch g")
        child = await sb.fork()
        await sb.restore(sid)
        assert (await sb.exec("ls; cat f")).stdout == "f\n1"
        assert (await child.exec("cat f")).stdout == "2\n"
        await child.close()


async def test_warm_python_runs_a_trusted_interpreter_start() -> None:
    """The default `warm_python` (the process and remote backends): one `python3 -c pass`, after which the
    sandbox runs Python as before; a closed sandbox says so instead."""
    sb = await open_sandbox(CFG)
    async with sb:
        await sb.warm_python()
        assert (await sb.exec(["python3", "-c", "print(6 * 7)"])).stdout == "42\n"
    with pytest.raises(SandboxError):
        await sb.warm_python()
