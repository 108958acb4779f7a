"""How the bubblewrap launcher starts a sandbox's supervisor: the interpreter it runs on, and the short
bootstrap given to `python3 -c` that reads the supervisor's code from stdin."""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path

from trialground.sandbox.base import SandboxConfig

# The supervisor's modules, in the order its shipped source concatenates them: one program in the sandbox
# (each part's imports of the others are made only where it is imported on the host as a package module).
SUPERVISOR_PARTS = ("supervisor_wire", "supervisor_python", "supervisor")
SUPERVISOR_SOURCE = "\n".join(Path(__file__).with_name(f"{part}.py").read_text() for part in SUPERVISOR_PARTS)
# The supervisor's code reaches it on its stdin, marshalled when the sandbox runs this very Python version
# (skips compiling it at every start), as source otherwise. The bootstrap reads exactly that many bytes
# (with `posix`: importing `os` would cost ~2 ms).
_BOOT = (
    "import posix,marshal\nb=b''\nwhile len(b)<{n}:\n c=posix.read(0,{n}-len(b))\n"
    " if not c:raise SystemExit(1)\n b+=c\n"
    "exec(marshal.loads(b) if {compiled} else compile(b,'supervisor.py','exec'),{{'__name__':'__main__'}})"
)
_PAYLOADS: dict[str, tuple[str, bytes]] = {}


def python_prefix(config: SandboxConfig) -> str:
    """The prefix of the Python runtime the sandbox's supervisor and commands run on."""
    return config.python_prefix or sys.base_prefix


def supervisor_payload(config: SandboxConfig) -> tuple[str, bytes]:
    """(bootstrap code for `python3 -c`, bytes to write to the supervisor's stdin right after start)."""
    same = not config.rootfs and os.path.realpath(python_prefix(config)) == os.path.realpath(sys.base_prefix)
    key = "compiled" if same else "source"
    if key not in _PAYLOADS:
        code = compile(SUPERVISOR_SOURCE, "supervisor.py", "exec")
        data = marshal.dumps(code) if same else SUPERVISOR_SOURCE.encode()
        _PAYLOADS[key] = (_BOOT.format(n=len(data), compiled=same), data)
    return _PAYLOADS[key]
