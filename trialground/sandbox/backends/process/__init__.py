"""The process sandbox backend: plain subprocesses, NO isolation. Its modules are private to this folder
(an import-linter contract): the rest of the package, and a plugin that builds on it, use `ProcessSandbox`
from here."""

from trialground.sandbox.backends.process.process import ProcessSandbox

__all__ = ["ProcessSandbox"]
