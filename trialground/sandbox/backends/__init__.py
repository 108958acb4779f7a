"""Sandbox backends: `sandbox.backend` names one (or a plugin's `package.module:NAME`), `sandbox.params`
holds its own settings.

A backend's `factory` is its `Sandbox` class (or the class's dotted path), whose `create(config, files)`
opens one sandbox; the core asks its `SandboxCaps`, never its name.
"""

from __future__ import annotations

from dataclasses import dataclass

from trialground.errors import SandboxError
from trialground.plugin import Plugin, Requirement
from trialground.registry import Registry


@dataclass(frozen=True)
class SandboxCaps:
    """What a sandbox backend can do, for the parts that choose what to run in it."""

    isolated: bool
    """The command cannot reach the host's files, processes or network (namespaces, seccomp, limits)."""
    private_scratch: bool
    """Each sandbox has a /workspace, /tmp and /dev/shm of its own that the grading runner may empty, so a
    restored sandbox is as fresh as a new one (grading reuses sandboxes only then)."""
    host_views: bool
    """It shows host directories and sockets read-only inside (`sandbox.views`; the harness environment's
    gateway socket and program)."""
    host_descriptors: bool
    """Each open sandbox holds file descriptors in this process (the pool raises the open-files limit)."""


@dataclass(frozen=True)
class SandboxBackend(Plugin[SandboxCaps]):
    """A sandbox backend (see the module docstring)."""


BACKENDS: Registry[SandboxBackend] = Registry(
    "sandbox backend", SandboxBackend, SandboxError, error_kind="config"
)
for _b in (
    SandboxBackend(
        "bwrap",
        "trialground.sandbox.backends.bwrap.sandbox:BwrapSandbox",
        SandboxCaps(isolated=True, private_scratch=True, host_views=True, host_descriptors=True),
        requires=(
            Requirement(
                program="bwrap",
                why="the sandbox's namespaces",
                install="apt-get install bubblewrap (Debian/Ubuntu) or dnf install bubblewrap (Fedora), or "
                "choose sandbox.backend=process (NO isolation)",
            ),
        ),
        doc="namespaces, seccomp, cgroups",
    ),
    SandboxBackend(
        "process",
        "trialground.sandbox.backends.process.process:ProcessSandbox",
        SandboxCaps(isolated=False, private_scratch=False, host_views=False, host_descriptors=True),
        doc="plain subprocesses: no isolation",
    ),
    SandboxBackend(
        "remote",
        "trialground.sandbox.backends.remote.remote:RemoteSandbox",
        # the sandbox service's sessions are bubblewrap sandboxes on its machine
        SandboxCaps(isolated=True, private_scratch=True, host_views=False, host_descriptors=False),
        doc="the sandbox service over HTTP",
    ),
):
    BACKENDS.register(_b)
