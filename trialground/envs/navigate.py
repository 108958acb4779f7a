"""Tools that find things in a workspace too large to show: `search` and `read_lines`.

Both run *inside* the task's sandbox as a short Python program whose inputs arrive as argv (never
interpolated into a shell line), so the host reads nothing from the workspace: what it receives is the
program's stdout, which the sandbox caps at `NAV_OUTPUT_BYTES`, within the tool's wall limit. The
programs bound their own work too (bytes scanned, matches shown, characters per line), so a huge or
hostile workspace answers with a short, truthful page and a note of what was left out.

- ``search(pattern, path?)``: fixed-string, case-sensitive search of the regular files under `path`
  (default: the whole workspace; symlinks are not followed). One hit per line: ``file:line:text``, at
  most `SEARCH_MAX_HITS`, then a summary line with the totals.
- ``read_lines(path, start?, count?)``: lines `start` .. `start + count - 1` (1-based; `count` default
  `READ_DEFAULT_LINES`, at most `READ_MAX_LINES`), each prefixed with its number, under a header
  ``path: lines a-b of n``. Paging never reads past the page it shows except to count the total, which
  stops at `READ_COUNT_BYTES` (``of more than n`` after that).

A reference in a page (a name, a clause number, a line number) is followed by searching for it and
reading at the hit: the two tools are the whole of "follow a reference".
"""

from __future__ import annotations

from trialground.sandbox.base import Limits

SEARCH_MAX_HITS = 20
SEARCH_SCAN_BYTES = 64 * 1024 * 1024
SEARCH_FILE_BYTES = 8 * 1024 * 1024
LINE_CHARS = 200
READ_DEFAULT_LINES = 20
READ_MAX_LINES = 200
READ_COUNT_BYTES = 64 * 1024 * 1024
NAV_OUTPUT_BYTES = 64 * 1024

# argv: pattern, path, max_hits, scan_bytes, file_bytes, line_chars. Exit 0 with hits, 1 without, 2 on a
# bad path (as grep does).
SEARCH_PROGRAM = r"""
import os, stat, sys
pattern, root = sys.argv[1].encode(), sys.argv[2]
max_hits, scan_bytes, file_bytes, width = (int(a) for a in sys.argv[3:7])
def shown(p):
    return os.path.normpath(p).removeprefix("./")
try:
    top = os.lstat(root)
except OSError as e:
    print(f"error: {root}: {e.strerror or e}")
    sys.exit(2)
if stat.S_ISDIR(top.st_mode):
    def walk():
        for d, dirs, files in os.walk(root, followlinks=False):
            dirs.sort()
            for f in sorted(files):
                yield os.path.join(d, f)
    paths = walk()
elif stat.S_ISREG(top.st_mode):
    paths = iter([root])
else:
    print(f"error: {root}: not a regular file or directory")
    sys.exit(2)
hits = files_hit = scanned = 0
stopped = False
for p in paths:
    try:
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode):
            continue
        if scanned >= scan_bytes:
            stopped = True
            break
        with open(p, "rb") as fh:
            data = fh.read(min(file_bytes, scan_bytes - scanned))
    except OSError:
        continue
    scanned += len(data)
    if b"\0" in data[:1024] or pattern not in data:
        continue
    files_hit += 1
    for n, line in enumerate(data.split(b"\n"), 1):
        if pattern in line:
            hits += 1
            if hits <= max_hits:
                text = line.decode("utf-8", "replace").rstrip("\r")
                if len(text) > width:
                    text = text[:width] + "..."
                print(f"{shown(p)}:{n}:{text}")
more = f"; first {max_hits} shown" if hits > max_hits else ""
cut = f"; stopped after {scanned} bytes" if stopped else ""
es, s = "es" if hits != 1 else "", "s" if files_hit != 1 else ""
print(f"[{hits} match{es} in {files_hit} file{s}{more}{cut}]")
sys.exit(0 if hits else 1)
"""

# argv: path, start, count, count_bytes, line_chars.
READ_PROGRAM = r"""
import os, stat, sys
path = sys.argv[1]
start, count, count_bytes, width = (int(a) for a in sys.argv[2:6])
try:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        print(f"error: {path}: not a regular file")
        sys.exit(2)
    fh = open(path, "rb")
except OSError as e:
    print(f"error: {path}: {e.strerror or e}")
    sys.exit(2)
page, total, read, more = [], 0, 0, False
with fh:
    for line in fh:
        total += 1
        read += len(line)
        if start <= total < start + count:
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if len(text) > width:
                text = text[:width] + "..."
            page.append(f"{total}| {text}")
        if read >= count_bytes and total >= start + count - 1:
            more = fh.read(1) != b""
            break
of = f"more than {total}" if more else str(total)
if not page:
    print(f"{os.path.normpath(path)}: no line {start} (the file has {of} lines)")
    sys.exit(1)
end = start + len(page) - 1
print(f"{os.path.normpath(path)}: lines {start}-{end} of {of}")
print("\n".join(page))
"""


def nav_limits(limits: Limits) -> Limits:
    """`limits` with the output capped at NAV_OUTPUT_BYTES: a page, never the workspace."""
    return limits.model_copy(update={"output_bytes": min(limits.output_bytes, NAV_OUTPUT_BYTES)})


def page_bounds(start: str | None, count: str | None) -> tuple[int, int] | str:
    """(start, count) of a `read_lines` call, or why they are not usable."""
    try:
        first = int(start) if start not in (None, "") else 1
        n = int(count) if count not in (None, "") else READ_DEFAULT_LINES
    except ValueError:
        return "read_lines: start and count must be whole numbers"
    if first < 1:
        return "read_lines: start is 1-based (the first line is 1)"
    if n < 1:
        return "read_lines: count must be at least 1"
    return first, min(n, READ_MAX_LINES)


def search_argv(python: str, pattern: str, path: str) -> list[str]:
    limits = (SEARCH_MAX_HITS, SEARCH_SCAN_BYTES, SEARCH_FILE_BYTES, LINE_CHARS)
    return [python, "-B", "-c", SEARCH_PROGRAM, pattern, path, *(str(v) for v in limits)]


def read_argv(python: str, path: str, start: int, count: int) -> list[str]:
    return [
        python,
        "-B",
        "-c",
        READ_PROGRAM,
        path,
        str(start),
        str(count),
        str(READ_COUNT_BYTES),
        str(LINE_CHARS),
    ]
