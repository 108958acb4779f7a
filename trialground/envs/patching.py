"""The ``apply_patch(patch)`` tool: a unified diff applied to the workspace by ``git apply`` in the sandbox.

The host never parses a patch to write files: it only refuses one that is empty, over `PATCH_MAX_BYTES`,
or names an absolute or ``..`` path in a ``---``/``+++`` header (git refuses those too; the host says so
plainly, and stops ``-p1`` from quietly turning ``/etc/x`` into ``etc/x``). Everything else happens inside
the sandbox in one program (`PATCH_PROGRAM`, the patch on stdin), bounded by the call's limits:

1. ``git apply --check`` finds how the patch applies: ``-p1`` when the headers have ``a/`` ``b/``
   prefixes (as ``git diff`` writes them), else ``-p0`` (bare paths) then ``-p1``; each as written, then
   with ``--recount`` (hunk line counts recomputed: models often miscount them), then also with
   ``--unidiff-zero`` (a hunk without trailing context need not sit at the end of the file). The
   hunks' lines must match the file either way. Nothing is written until one whole patch checks; when
   none does, the error is git's for the likeliest reading (which file and line, and the lines it
   searched for).
2. ``git apply --numstat`` lists the files; they are hashed (content, mode, link target) before and after
   ``git apply``, so the outcome says whether the workspace changed.

``git apply`` is all or nothing, refuses paths outside the working directory (``..``, absolute) and
never writes through a symlink: a path beyond one (``link/x`` with ``link -> /elsewhere``) is refused,
and a patch to a symlink itself rewrites the link, not its target. It runs outside any repository
(``GIT_DIR`` names none, so a ``.git`` planted in the workspace changes nothing) and without the
system's or the user's git configuration.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from trialground import plainjson

PATCH_MAX_BYTES = 256 << 10  # = tools.READ_FILE_MAX_BYTES: the most the host holds of one file
ERROR_CHARS = 2000  # of git's explanation shown when a patch does not apply
FILES_SHOWN = 20
# The report names every file the patch touches; the names come from the patch, so this bounds it (each
# byte of a name is at most 3 in the report, one that is not UTF-8 becoming U+FFFD).
REPORT_BYTES = 4 * PATCH_MAX_BYTES

# argv: strip levels to try ("1" or "0,1"), error chars. stdin: the patch. Prints one JSON object:
# {"ok": true, "files": [...], "changed": bool} or {"ok": false, "error": "..."}.
PATCH_PROGRAM = r"""
import hashlib, json, os, stat, subprocess, sys
levels, error_chars = [int(p) for p in sys.argv[1].split(",")], int(sys.argv[2])
patch = sys.stdin.buffer.read()
env = dict(os.environ, LC_ALL="C", GIT_DIR="/nonexistent/.git", GIT_CONFIG_NOSYSTEM="1",
           GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0")
def done(**out):
    print(json.dumps(out, ensure_ascii=False))
    sys.exit(0)
def git(*args):
    try:
        return subprocess.run(["git", "apply", "--whitespace=nowarn", *args], input=patch,
                              capture_output=True, env=env)
    except FileNotFoundError:
        done(ok=False, error="apply_patch needs git, which this sandbox does not have")
def said(res):
    return (res.stdout + res.stderr).decode("utf-8", "replace").strip()
loose = ((), ("--recount",), ("--recount", "--unidiff-zero"))
readings = [(p, extra) for p in levels for extra in loose]
errors = {}
for p, extra in readings:
    res = git("--check", "-v", f"-p{p}", *extra)
    if res.returncode == 0:
        break
    errors[(p, extra)] = said(res)
else:
    why = errors[(levels[0], ())]
    if "corrupt patch" in why or "No valid patches" in why:
        why = errors[(levels[0], ("--recount",))] or why
    done(ok=False, error=why[-error_chars:])
listed = git("--numstat", "-z", f"-p{p}", *extra).stdout.split(b"\0")
files, i = [], 0
while i < len(listed):
    record, i = listed[i], i + 1
    if not record:
        continue
    name = record.split(b"\t", 2)[-1]
    if name:
        files.append(name)
    else:  # a rename or copy: the source and the destination follow
        files += [n for n in listed[i:i + 2] if n]
        i += 2
files = list(dict.fromkeys(files))
def state(path):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if not stat.S_ISREG(st.st_mode):
        return ("other", st.st_mode)
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return ("unreadable", st.st_mode, st.st_size, st.st_mtime_ns)
    return ("file", st.st_mode & 0o777, h.hexdigest())
before = [state(f) for f in files]
res = git("-v", f"-p{p}", *extra)
after = [state(f) for f in files]
shown = [f.decode("utf-8", "replace") for f in files]
if res.returncode != 0:
    done(ok=False, error=said(res)[-error_chars:], changed=before != after, files=shown)
done(ok=True, files=shown, changed=before != after)
"""


@dataclass(frozen=True)
class PatchResult:
    """What the in-sandbox program reported."""

    ok: bool
    files: tuple[str, ...] = ()
    changed: bool | None = False
    error: str = ""


def patch_bytes(patch: str) -> bytes:
    """The patch as the sandbox receives it (a lone surrogate, which no file holds, becomes `?`)."""
    return patch.encode("utf-8", errors="replace")


def _header_path(line: str) -> str:
    name = line[4:].split("\t", 1)[0].strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = name[1:-1]
    return name


def _headers(patch: str) -> list[tuple[str, str]]:
    """(old, new) names of each ``---``/``+++`` header pair (a ``---`` line right above a ``+++`` one)."""
    lines = patch.splitlines()
    return [
        (_header_path(a), _header_path(b))
        for a, b in itertools.pairwise(lines)
        if a.startswith("--- ") and b.startswith("+++ ")
    ]


def refusal(patch: str) -> str | None:
    """Why a patch is refused before it reaches the sandbox, or None."""
    size = len(patch_bytes(patch))
    if size > PATCH_MAX_BYTES:
        return f"the patch is {size} bytes; apply_patch takes {PATCH_MAX_BYTES} at most (split it)"
    if not patch.strip():
        return "apply_patch needs a non-empty unified diff"
    for pair in _headers(patch):
        for name in pair:
            if name == "/dev/null":
                continue
            if name.startswith("/") or ".." in name.split("/"):
                return f"{name!r} is outside the workspace: patch paths are relative to /workspace"
    return None


def strip_levels(patch: str) -> str:
    """The ``-p`` levels to try: only 1 when every old name starts ``a/`` and every new one ``b/`` (as
    ``git diff`` writes them; ``b/new.py`` must never become a folder ``b``), else 0 (bare paths, as
    ``diff -u`` writes them), then 1 (``diff -ur old/ new/``)."""
    for old, new in _headers(patch):
        if not (old == "/dev/null" or old.startswith("a/")) or not (
            new == "/dev/null" or new.startswith("b/")
        ):
            return "0,1"
    return "1"


def patch_argv(python: str, patch: str) -> list[str]:
    return [python, "-B", "-c", PATCH_PROGRAM, strip_levels(patch), str(ERROR_CHARS)]


def parse_result(stdout: str) -> PatchResult | None:
    """The program's report, or None when it printed none (killed, no Python)."""
    try:
        out = plainjson.loads(stdout.strip().splitlines()[-1], plainjson.REQUEST_BODY)
    except (ValueError, IndexError):
        return None
    if not isinstance(out, dict) or not isinstance(out.get("ok"), bool):
        return None
    files = tuple(str(f) for f in out.get("files", ()))
    changed = out.get("changed", False)
    return PatchResult(
        out["ok"], files, changed if isinstance(changed, bool) else None, str(out.get("error", ""))
    )


def summary(files: tuple[str, ...], changed: bool | None) -> str:
    """``applied patch: 2 files changed (a.py, b.py)``."""
    names = ", ".join(files[:FILES_SHOWN]) + (
        f", and {len(files) - FILES_SHOWN} more" if len(files) > FILES_SHOWN else ""
    )
    noun = "file" if len(files) == 1 else "files"
    if changed is False:
        return f"applied patch: {len(files)} {noun}, contents unchanged ({names})"
    return f"applied patch: {len(files)} {noun} changed ({names})"
