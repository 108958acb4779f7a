"""Repair tools for repository tasks: `fixes()` and `apply_fix(n?)`.

``fixes()`` ranks the library lines the failing tests point at by spectrum-based fault localization and
lists the one-place edits that would undo a common mistake there, numbered:

1. In the task's sandbox, `LOCALIZE_PROGRAM` runs the task's failing tests (FAIL_TO_PASS) and the rest of
   its suite (PASS_TO_PASS) with the workspace's bundled pytest, in one process, under a line tracer limited
   to the repository's library files: which lines each test executed, and whether it passed. Each executed
   line gets the Ochiai score ``failed(line) / sqrt(failed * (failed(line) + passed(line)))``: 1 for a line
   every failing test runs and no passing test does. The program's own stdout and stderr go to /dev/null
   while pytest runs; it writes one result line at the end.
2. On the host, for the highest-ranked lines (`MAX_LINES`) it reads the file (at most
   `HOST_PARSE_MAX_BYTES`; a larger file is skipped) and lists the edits of
   `trialground.tasks.swe.mutate.inverse_mutations` at that line: an operator or comparison flipped back,
   a constant lowered, a `not` restored, two arguments swapped back. The first `MAX_FIXES` are shown as
   ``n. path:line: old -> new`` (``n. line L: old -> new`` under a header naming the file when they are all
   in one), each edit by its changed words.

``apply_fix(n)`` writes candidate `n` of the last listing, undoing the candidate applied before it when
the file still holds exactly what that one wrote; a file changed since the listing is left alone (an error
observation asks for a new listing). ``apply_fix()`` without a number writes the candidate after the one
applied last (the first when none was), so an agent that tries them in order never counts; past the last
one it answers that every candidate was applied. Which candidate is right is for the tests to say
(``run_tests``).

A listing's localization is kept by task and workspace digest (`LOCALIZED`): another episode of the
same task, or the same episode again, whose workspace is byte for byte the same reuses it.

What the localization reports is advice: it runs in the process the workspace's code controls, so code
under test can make it say anything, which at worst misleads the agent. Grading never reads it.
Measured on `swe:inflection:140` in docs/swe.md.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass, field

from trialground.tasks.model import Task

MAX_LINES = 8  # ranked lines whose candidate edits are listed
MAX_FIXES = 6  # candidates shown (and applicable) per listing
HOST_PARSE_MAX_BYTES = 64 << 10  # a library file larger than this is not parsed on the host
RESULT_PREFIX = "TGLOC "
_SHOWN_CHARS = 40  # of each side of an edit
_MIN_SPAN = 10  # an edit's shown span is widened to this many characters where the line has them

LOCALIZE_PROGRAM = r"""
import json, math, os, sys
cfg = json.loads(sys.stdin.read())
root = os.getcwd()
sys.path[:0] = [os.path.join(root, ".tg", "site"), root]
sys.dont_write_bytecode = True
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
out = os.dup(1)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
os.dup2(null, 2)
import pytest
prefixes = tuple(os.path.join(root, p) for p in cfg["library"])
kept = {}
lines = set()
def wanted(name):
    r = kept.get(name)
    if r is None:
        r = kept[name] = name.startswith(prefixes) and "/.tg/" not in name
    return r
def local(frame, event, arg):
    if event == "line":
        lines.add((frame.f_code.co_filename, frame.f_lineno))
    return local
def glob(frame, event, arg):
    if wanted(frame.f_code.co_filename):
        lines.add((frame.f_code.co_filename, frame.f_lineno))
        return local
    return None
covered, outcome = {}, {}
class Spectrum:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        lines.clear()
        sys.settrace(glob)
        try:
            yield
        finally:
            sys.settrace(None)
            covered[item.nodeid] = set(lines)
    def pytest_runtest_logreport(self, report):
        if report.failed:
            outcome[report.nodeid] = "failed"
        elif report.when == "call" and report.nodeid not in outcome:
            outcome[report.nodeid] = "passed" if report.passed else "skipped"
args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--color=no", *cfg["args"], *cfg["tests"]]
try:
    pytest.main(args, plugins=[Spectrum()])
except BaseException as e:
    os.write(out, ("TGLOC " + json.dumps({"error": type(e).__name__}) + "\n").encode())
    os._exit(0)
failed = [t for t, o in outcome.items() if o == "failed"]
passed = [t for t, o in outcome.items() if o == "passed"]
ef, ep = {}, {}
for t in failed:
    for ln in covered.get(t, ()):
        ef[ln] = ef.get(ln, 0) + 1
for t in passed:
    for ln in covered.get(t, ()):
        if ln in ef:
            ep[ln] = ep.get(ln, 0) + 1
score = {ln: n / math.sqrt(len(failed) * (n + ep.get(ln, 0))) for ln, n in ef.items()}
ranked = sorted(score, key=lambda ln: (-score[ln], ln))[: cfg["top"]]
shown = [[os.path.relpath(f, root), n, round(score[(f, n)], 4)] for f, n in ranked]
result = {"failed": len(failed), "passed": len(passed), "lines": shown}
os.write(out, ("TGLOC " + json.dumps(result) + "\n").encode())
os._exit(0)
"""


class _Kept:
    """Localization results by (task id, workspace digest), least recently used first: the same workspace
    of the same task ranks the same lines, so the samples of a task share one run of its suite."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], Localized] = OrderedDict()

    def get(self, key: tuple[str, str]) -> Localized | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def put(self, key: tuple[str, str], result: Localized) -> None:
        self._items[key] = result
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


LOCALIZED = _Kept()


@dataclass(frozen=True)
class Fix:
    """One listed candidate: `path`'s whole text before and after the edit at `line`."""

    path: str
    line: int
    label: str  # the edit, as `old -> new` (its changed words)
    before: str
    after: str


@dataclass
class RepairMemo:
    """What `fixes()` listed and which candidate `apply_fix` wrote last; part of the episode state, so a
    snapshot or fork carries it."""

    fixes: list[Fix] = field(default_factory=list)
    applied: Fix | None = None


def localize_input(task: Task, top: int = 40) -> str:
    """The program's stdin: the task's test node ids (failing first), the repository's pytest arguments and
    library folders."""
    from trialground.tasks.swe.repos import repo_spec
    from trialground.tasks.verifiers import SweTestsParams

    params = task.verifier.params_as(SweTestsParams)
    spec = repo_spec(params.repo)
    return json.dumps(
        {
            "tests": [*params.fail_to_pass, *params.pass_to_pass],
            "args": list(spec.pytest_args),
            "library": [p.rstrip("/") + ("/" if not p.endswith(".py") else "") for p in spec.library],
            "top": top,
        }
    )


@dataclass(frozen=True)
class Localized:
    """What the localization program reported: the ranked (path, line) pairs and the test counts."""

    ranked: list[tuple[str, int]]
    failed: int
    passed: int


def parse_result(stdout: str) -> Localized | None:
    """The program's last result line, or None when it wrote none that parses or reported an error. The
    line comes from a process the workspace's code controls: anything malformed is no result."""
    line = next((x for x in reversed(stdout.splitlines()) if x.startswith(RESULT_PREFIX)), None)
    if line is None:
        return None
    try:
        data = json.loads(line[len(RESULT_PREFIX) :])
        if "error" in data:
            return None
        ranked = [(str(p), int(n)) for p, n, _ in data["lines"]]
        return Localized(ranked, int(data["failed"]), int(data["passed"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _shown(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _changed_line(before: str, after: str, line: int) -> tuple[str, str]:
    """The first line that differs (from `line` on), before and after."""
    a, b = before.split("\n"), after.split("\n")
    for i in range(max(0, line - 1), min(len(a), len(b))):
        if a[i] != b[i]:
            return a[i], b[i]
    return (a[line - 1] if line - 1 < len(a) else ""), ""


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def changed_span(old: str, new: str) -> tuple[str, str]:
    """The part of two lines that differs, widened to whole words and brackets' contents: `group(2)` ->
    `group(1)` rather than the whole line."""
    from trialground.tasks.swe.mutate import common_ends

    p, s = common_ends(old, new)
    lo, ho, hn = p, len(old) - s, len(new) - s
    while lo > 0 and (_word(old[lo - 1]) or old[lo - 1] in "([."):
        lo -= 1
    while ho < len(old) and (_word(old[ho]) or old[ho] in ")]:"):
        ho, hn = ho + 1, hn + 1
    while ho - lo < _MIN_SPAN and (lo > 0 or ho < len(old)):  # too short to recognise: a token each side
        while lo > 0 and old[lo - 1] == " ":
            lo -= 1
        while lo > 0 and old[lo - 1] != " ":
            lo -= 1
        while ho < len(old) and old[ho] == " ":
            ho, hn = ho + 1, hn + 1
        while ho < len(old) and old[ho] != " ":
            ho, hn = ho + 1, hn + 1
    return old[lo:ho].strip(), new[lo:hn].strip()


def candidates_at(path: str, text: str, line: int) -> list[Fix]:
    """The inverse edits at `line` of `path` (parsing on the host: call off the event loop)."""
    from trialground.tasks.swe.mutate import inverse_mutations

    out = []
    for m in inverse_mutations(path, text, (line, line)):
        old, new = changed_span(*_changed_line(text, m.text, line))
        out.append(Fix(path, line, f"{_shown(old)} -> {_shown(new)}", text, m.text))
    return out


async def list_fixes(ranked: list[tuple[str, int]], read: object) -> tuple[list[Fix], list[str]]:
    """Candidates for the ranked lines, at most `MAX_FIXES`; `read(path)` gives a file's text or None.
    Also the files skipped (unreadable or too large to parse here)."""
    texts: dict[str, str | None] = {}
    fixes: list[Fix] = []
    skipped: list[str] = []
    for path, line in ranked[:MAX_LINES]:
        if path not in texts:
            text = await read(path)  # type: ignore[operator]
            if (
                text is not None
                and len(text.encode("utf-8", errors="surrogateescape")) > HOST_PARSE_MAX_BYTES
            ):
                skipped.append(path)
                text = None
            texts[path] = text
        text = texts[path]
        if text is None:
            continue
        found = await asyncio.to_thread(candidates_at, path, text, line)
        fixes += [f for f in found if all(f.after != g.after for g in fixes)]
        if len(fixes) >= MAX_FIXES:
            break
    return fixes[:MAX_FIXES], skipped


def render_fixes(fixes: list[Fix], failed: int, passed: int) -> str:
    if not fixes:
        return f"no candidate fixes at the lines the {failed} failing tests point at"
    paths = {f.path for f in fixes}
    if len(paths) == 1:  # the path once, in the header
        head = f"{len(fixes)} fixes in {fixes[0].path} for {failed} failing tests ({passed} passing):"
        return "\n".join([head, *(f"{i}. line {f.line}: {f.label}" for i, f in enumerate(fixes, 1))])
    head = f"{len(fixes)} fixes for {failed} failing tests ({passed} passing):"
    return "\n".join([head, *(f"{i}. {f.path}:{f.line}: {f.label}" for i, f in enumerate(fixes, 1))])


def choose(memo: RepairMemo, n: str | None) -> Fix | str:
    """Candidate `n` of the last listing (the one after the last applied when `n` is None or blank), or
    why there is none."""
    if not memo.fixes:
        return "no candidate fixes listed: call fixes() first"
    if n is None or not str(n).strip():
        k = 1 if memo.applied is None else memo.fixes.index(memo.applied) + 2
        if k > len(memo.fixes):
            return f"all {len(memo.fixes)} candidates of the last fixes() were applied"
        return memo.fixes[k - 1]
    try:
        k = int(str(n).strip())
    except ValueError:
        return f"apply_fix needs a number from 1 to {len(memo.fixes)}, got {n!r}"
    if not 1 <= k <= len(memo.fixes):
        return f"apply_fix needs a number from 1 to {len(memo.fixes)}, got {k}"
    return memo.fixes[k - 1]


def rewrite(memo: RepairMemo, fix: Fix, current: str | None) -> str | None:
    """The file's new text for applying `fix` to `current`, undoing the candidate applied before it; None
    when the file is not what the listing saw (nor that plus the last applied candidate)."""
    if current == fix.before:
        return fix.after
    last = memo.applied
    if last is not None and last.path == fix.path and current == last.after and last.before == fix.before:
        return fix.after
    return None
