"""Turning what the host observed about one command into an `ExecResult`: its output cut at a cap
(`Collected`) and its exit report (`build_result`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from trialground.sandbox.base import ExecResult, ExecStatus


@dataclass
class Collected:
    """Output of one command, cut at `cap` bytes per stream whatever the command (or supervisor) sends;
    `kind` is "O" (stdout) or "E" (stderr)."""

    cap: int
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    seen: dict[str, int] = field(default_factory=lambda: {"O": 0, "E": 0})

    def add(self, kind: str, data: bytes) -> None:
        buf = self.stdout if kind == "O" else self.stderr
        self.seen[kind] += len(data)
        room = self.cap - len(buf)
        if room > 0:
            buf += data[:room]


def build_result(
    report: dict,
    stdout: bytes,
    stderr: bytes,
    *,
    cap: int,
    oom: bool = False,
    pids_hit: bool = False,
    peak_memory_bytes: int = 0,
    limit_warnings: tuple[str, ...] = (),
) -> ExecResult:
    """`report` holds reason ("", "timeout", "output_limit"), exit_code or signal, sizes and times.

    The most specific cause wins: timeout, output limit, memory, CPU (reported as timeout), pids,
    other signals (killed), non-zero exit, ok.
    """
    sig = report.get("signal")
    code = report.get("exit_code")
    reason = report.get("reason", "")
    if reason == "timeout":
        status = ExecStatus.TIMEOUT
    elif reason == "output_limit":
        status = ExecStatus.OUTPUT_LIMIT
    elif oom:
        status = ExecStatus.MEMORY_LIMIT
    elif sig == signal.SIGXCPU:
        status = ExecStatus.TIMEOUT
    elif pids_hit:
        status = ExecStatus.PIDS_LIMIT
    elif sig is not None:
        status = ExecStatus.KILLED
    elif code is None:
        status = ExecStatus.SANDBOX_ERROR
    elif code != 0:
        status = ExecStatus.NONZERO_EXIT
    else:
        status = ExecStatus.OK
    peak = max(peak_memory_bytes / 2**20, float(report.get("maxrss_kb", 0)) / 1024)
    return ExecResult(
        status=status,
        exit_code=code,
        signal=sig,
        stdout=stdout.decode("utf-8", errors="replace"),
        stderr=stderr.decode("utf-8", errors="replace"),
        stdout_truncated=int(report.get("stdout_bytes", 0)) > cap,
        stderr_truncated=int(report.get("stderr_bytes", 0)) > cap,
        wall_s=round(float(report.get("wall_s", 0.0)), 6),
        cpu_s=round(float(report.get("cpu_s", 0.0)), 6),
        peak_memory_mb=round(peak, 3),
        limit_warnings=limit_warnings,
    )


def error_result(message: str, wall_s: float = 0.0) -> ExecResult:
    return ExecResult(status=ExecStatus.SANDBOX_ERROR, stderr=message, wall_s=wall_s)
