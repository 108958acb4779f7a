"""Finding host processes by their command line, and this process's sockets by kind, for tests that check
what a sandbox left behind."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path


def processes_with(*markers: str) -> list[int]:
    """Live processes whose command line contains one of `markers` (a zombie has no command line)."""
    wanted = [m.encode() for m in markers]
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and any(m in Path(f"/proc/{entry}/cmdline").read_bytes() for m in wanted):
                found.append(int(entry))
        except OSError:
            continue
    return found


def describe_fd(fd: int) -> str:
    """What descriptor `fd` of this process points at ("?" once it is closed)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def socket_kind(fd: int) -> str:
    """Empty for a descriptor that is not a socket, else its family and type. The launchers' only sockets are
    AF_UNIX SOCK_SEQPACKET pairs (a template's, a request's report channel); the test process's other
    threads (an HTTP client's pool, a library's own event loop left by an earlier test) open stream and
    inet sockets of their own at any time, which are not a sandbox's to leak."""
    found = re.fullmatch(r"socket:\[(\d+)\]", describe_fd(fd))
    if found is None:
        return ""
    with contextlib.suppress(OSError), open("/proc/net/unix") as f:
        for line in list(f)[1:]:
            fields = line.split()
            if len(fields) > 6 and fields[6] == found.group(1):
                kind = {"0001": "stream", "0002": "dgram", "0005": "seqpacket"}.get(fields[4], fields[4])
                return f"unix {kind}"
    return "other"
