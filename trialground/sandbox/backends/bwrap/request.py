"""What one command asks of the sandbox's supervisor: its argv, environment, working directory, wall
limit and output cap, and the rlimits its `Limits` come to where no cgroup enforces them."""

from __future__ import annotations

from collections.abc import Mapping

from trialground.errors import SandboxError
from trialground.sandbox.backends.bwrap import bwrap_cmd
from trialground.sandbox.base import WORKSPACE, Command, Limits, SandboxConfig


def exec_request(
    config: SandboxConfig,
    cmd: Command,
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    limits: Limits,
    rlimits: Mapping[str, int],
) -> dict:
    """The request for one command (a string runs as a bash script); `SandboxError` for an empty argv."""
    argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise SandboxError("empty command", kind="bad_command")
    return {
        "argv": argv,
        "env": {**bwrap_cmd.default_env(config), **(env or {})},
        "cwd": WORKSPACE if cwd is None else cwd if cwd.startswith("/") else f"{WORKSPACE}/{cwd}",
        "wall_s": limits.wall_s,
        "output_bytes": limits.output_bytes,
        "rlimits": dict(rlimits),
        "python_fast": config.python_fast,
    }


def rlimits(limits: Limits, enforced: frozenset[str], preload_vm_bytes: int) -> dict[str, int]:
    """The command's rlimits: CPU, file size and no core always; an address-space cap where the cgroup
    does not enforce memory (plus what a preload mapped, inherited), and a process cap where it does not
    enforce pids."""
    rl = {
        "RLIMIT_CPU": max(1, int(limits.cpu_s + 0.999)),
        "RLIMIT_FSIZE": limits.file_size_mb << 20,
        "RLIMIT_CORE": 0,
    }
    if "memory" not in enforced:
        rl["RLIMIT_AS"] = (limits.memory_mb << 20) + preload_vm_bytes
    if "pids" not in enforced:
        # RLIMIT_NPROC, counted per uid in the sandbox's own user namespace (its processes), plus the
        # supervisor and the process it keeps forked for the next command
        rl["RLIMIT_NPROC"] = limits.pids + 2
    return rl
