"""Unified diffs of workspace files: made for gold patches, parsed and applied for submitted patches.

`make_patch(old, new)` writes a git-style diff (`--- a/PATH` / `+++ b/PATH`, `/dev/null` for created and
deleted files, `\\ No newline at end of file` where it applies). `apply_patch(files, text)` applies one to
{path: text} and returns {path: new text, or None for deleted}; a hunk whose context does not match, a
malformed header or an unsafe path raises `PatchError` naming the file and line. Applying is strict (no
fuzz): a patch either applies exactly or not at all.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from trialground.tasks.swe.paths import valid_path

_HUNK = re.compile(r"^@@ -(\d{1,9})(?:,(\d{1,9}))? \+(\d{1,9})(?:,(\d{1,9}))? @@")  # 9 digits: no int limit
_NO_NL = "\\ No newline at end of file"


class PatchError(ValueError):
    """The patch is malformed or does not apply."""


def make_patch(old: Mapping[str, str], new: Mapping[str, str | None]) -> str:
    """The diff that turns `old` into `new` (paths in `new` only; None deletes)."""
    out: list[str] = []
    for path in sorted(new):
        before, after = old.get(path), new[path]
        if before == after:
            continue
        a = (before or "").splitlines(keepends=True)
        b = (after or "").splitlines(keepends=True)
        src = f"a/{path}" if before is not None else "/dev/null"
        dst = f"b/{path}" if after is not None else "/dev/null"
        lines = list(difflib.unified_diff(a, b, fromfile=src, tofile=dst, n=3))
        for line in lines:
            if line.endswith("\n"):
                out.append(line)
            else:
                out.append(line + "\n" + _NO_NL + "\n")
    return "".join(out)


def _path(header: str, where: str) -> str | None:
    name = header.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    if not valid_path(name):
        raise PatchError(f"{where}: unsafe or malformed path {name!r}")
    return name


def apply_patch(files: Mapping[str, str], text: str) -> dict[str, str | None]:
    """The files the patch changes, as they are after it (None: deleted). See the module docstring."""
    lines = text.splitlines(keepends=True)
    out: dict[str, str | None] = {}
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError(f"line {i + 1}: '---' without '+++'")
        src = _path(lines[i][4:], f"line {i + 1}")
        dst = _path(lines[i + 1][4:], f"line {i + 2}")
        target = dst or src
        if target is None:
            raise PatchError(f"line {i + 1}: both sides are /dev/null")
        if src is None:
            current: list[str] = []
        else:
            base = out[src] if src in out else files.get(src)
            if base is None:
                raise PatchError(f"{src}: patched, but no such file")
            current = base.splitlines(keepends=True)
        i += 2
        result: list[str] = []
        pos = 0
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchError(f"line {i + 1}: malformed hunk header")
            start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
            if start < pos or start > len(current):
                raise PatchError(f"{target}: hunk at line {i + 1} is out of order or out of range")
            result += current[pos:start]
            pos = start
            i += 1
            while (
                i < len(lines) and lines[i][:1] in (" ", "-", "+", "\\") and not lines[i].startswith("--- ")
            ):
                line = lines[i]
                if line.startswith("\\"):
                    if result and result[-1].endswith("\n") and lines[i - 1][:1] in (" ", "+"):
                        result[-1] = result[-1][:-1]
                    elif lines[i - 1][:1] == "-" and pos > 0:
                        pass  # the removed line had no newline: nothing to do
                    i += 1
                    continue
                body = line[1:]
                if line[0] in (" ", "-"):
                    if pos >= len(current) or current[pos].rstrip("\n") != body.rstrip("\n"):
                        raise PatchError(f"{target}: hunk context does not match at patch line {i + 1}")
                    pos += 1
                if line[0] in (" ", "+"):
                    result.append(body if line[0] == "+" else current[pos - 1])
                i += 1
        result += current[pos:]
        out[target] = None if dst is None else "".join(result)
    return out
