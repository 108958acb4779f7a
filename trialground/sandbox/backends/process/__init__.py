"""The process sandbox backend: plain subprocesses, NO isolation."""
