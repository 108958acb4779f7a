"""The bwrap backend: namespaces, seccomp and cgroups around a Python supervisor (`sandbox.py`,
`BwrapSandbox`), and its internals: the supervisor program and its bootstrap, the fork-server template,
cgroups, seccomp, views, network, teardown, prewarming.

Its modules are private to this folder (an import-linter contract): the rest of the package uses only what
is named here.
"""

from __future__ import annotations

from pathlib import Path

from trialground.sandbox.backends.bwrap.boot import python_prefix
from trialground.sandbox.backends.bwrap.supervisor import PRELOAD_KEEP
from trialground.sandbox.backends.bwrap.supervisor_python import split_python

RESET_SOURCE = Path(__file__).with_name("reset.py").read_text()
"""The program that empties a sandbox's scratch (/workspace, /tmp, /dev/shm) and IPC objects from inside
it: the supervisor runs it on restore, and the grading runner ships it to reset a reused sandbox."""

__all__ = ["PRELOAD_KEEP", "RESET_SOURCE", "python_prefix", "split_python"]
