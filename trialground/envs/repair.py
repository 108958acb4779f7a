"""Repair tools for repository tasks: `fixes()` and `apply_fix(n?)`.

``fixes()`` ranks the library lines the failing tests point at by spectrum-based fault localization and
lists the one-place edits that would undo a common mistake there, numbered:

1. In the task's sandbox, `LOCALIZE_PROGRAM` runs the task's failing tests (FAIL_TO_PASS) and the rest of
   its suite (PASS_TO_PASS) with the workspace's bundled pytest, in one process, under a line tracer limited
   to the repository's library files: which lines each test executed, and whether it passed. Each executed
   line gets the Ochiai score ``failed(line) / sqrt(failed * (failed(line) + passed(line)))``: 1 for a line
   every failing test runs and no passing test does. Ties go to lines that mention more failing tests'
   words (below). The program's own stdout and stderr go to /dev/null while pytest runs; it writes one
   result line at the end.

   Code that runs when a library module is imported (tables, registrations, module-level calls) runs
   before any test, so no test's lines hold it. The tracer is on during collection too and files each line
   run by an import under the module-level statement that ran it, callees included. A test whose
   parameters (pytest's `callspec`, as words of three or more letters or digits) share a word with the
   string constants of such a statement counts as running the statement and those lines, except a line
   that names module-level data (a name the module assigns) that none of the test's own lines names: a
   table's lines count for the tests whose code reads that table. A module-level call with swapped or
   wrong words then ranks first for the tests of those words, and a wrong line in the helper it calls
   ranks with the lines of the function the failing tests ran.
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

from trialground import plainjson
from trialground.tasks.model import Task

MAX_LINES = 8  # ranked lines whose candidate edits are listed
MAX_FIXES = 6  # candidates shown (and applicable) per listing
HOST_PARSE_MAX_BYTES = 64 << 10  # a library file larger than this is not parsed on the host
RESULT_PREFIX = "TGLOC "
_SHOWN_CHARS = 40  # of each side of an edit
_MIN_SPAN = 10  # an edit's shown span is widened to this many characters where the line has them

LOCALIZE_PROGRAM = r"""
import ast, json, math, os, re, sys
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
at = []  # the line each library module being imported is at, innermost last
ran = {}  # (file, line) of a module frame -> the library lines run under it, its callees' included
def imp_module(frame, event, arg):
    if event == "line":
        at[-1] = (frame.f_code.co_filename, frame.f_lineno)
        ran.setdefault(at[-1], set()).add(at[-1])
    elif event == "return":
        at.pop()
    return imp_module
def imp_inner(frame, event, arg):
    if event == "line" and at and at[-1] is not None:
        ran[at[-1]].add((frame.f_code.co_filename, frame.f_lineno))
    return imp_inner
def imp_glob(frame, event, arg):
    if not wanted(frame.f_code.co_filename):
        return None
    if frame.f_code.co_name == "<module>":
        at.append(None)
        return imp_module
    return imp_inner if at else None
WORD = re.compile(r"[A-Za-z0-9]{3,}")
def words(values):
    found = set()
    for v in values:
        if isinstance(v, (str, int, float)) and not isinstance(v, bool):
            found.update(w.lower() for w in WORD.findall(str(v)))
    return found
asked = {}
covered, outcome = {}, {}
class Spectrum:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        spec = getattr(item, "callspec", None)
        asked[item.nodeid] = words(spec.params.values()) if spec is not None else set()
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
    sys.settrace(imp_glob)
    pytest.main(args, plugins=[Spectrum()])
except BaseException as e:
    os.write(out, ("TGLOC " + json.dumps({"error": type(e).__name__}) + "\n").encode())
    os._exit(0)
sys.settrace(None)
# Code run at import (tables, registrations) runs before any test, so no test's lines hold it. A test
# whose parameters share a word with the string constants of a module-level statement counts as running
# that statement and the library lines it ran, except lines about module-level data (names the module
# assigns) that none of the test's own lines name: a table's lines count for the tests whose code reads it.
trees = {}
def tree(path):
    if path not in trees:
        try:
            with open(path, "rb") as f:
                trees[path] = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            trees[path] = None
    return trees[path]
BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
def own_nodes(stmt):
    todo = [v for k, v in ast.iter_fields(stmt) if k not in BODIES]
    while todo:
        v = todo.pop()
        if isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, ast.AST) and not isinstance(v, ast.stmt):
            yield v
            todo.extend(ast.iter_child_nodes(v))
data_names = set()
line_names = {}  # (file, line) -> module-level data names its innermost statement names
indexed = set()
def index(path):
    t = tree(path)
    if t is None or path in indexed:
        return
    indexed.add(path)
    data = set()
    for n in t.body:
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in n.targets if isinstance(n, ast.Assign) else [n.target]:
                data.update(x.id for x in ast.walk(target) if isinstance(x, ast.Name))
    data_names.update(data)
    span = {}
    for node in ast.walk(t):
        if isinstance(node, ast.stmt):
            size = (node.end_lineno or node.lineno) - node.lineno
            names = {x.id for x in own_nodes(node) if isinstance(x, ast.Name)}
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                if n not in span or size < span[n]:
                    span[n] = size
                    line_names[(path, n)] = names
def statements(path):
    t = tree(path)
    skip = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return [n for n in (t.body if t else []) if not isinstance(n, skip)
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
mentions = {}
def link():
    if not any(asked.values()):
        return
    linked = []  # (its words, its own lines, the lines it ran) of each module-level statement with words
    for path in sorted({f for f, _ in ran}):
        for node in statements(path):
            own = {(path, n) for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)} & ran.keys()
            said = words(c.value for c in ast.walk(node) if isinstance(c, ast.Constant)) if own else set()
            if said:
                linked.append((said, own, set().union(*(ran[k] for k in own))))
    if not linked:
        return
    for f in {f for lns in covered.values() for f, _ in lns} | {f for _, _, u in linked for f, _ in u}:
        index(f)
    for t, said_t in asked.items():
        found = [(own, under) for said, own, under in linked if said_t & said]
        if not found:
            continue
        reads = set().union(*(line_names.get(ln, ()) for ln in covered.get(t, ()))) & data_names
        mine = covered.setdefault(t, set())
        for own, under in found:
            for ln in under:
                about = line_names.get(ln, set()) & data_names
                if not about or about & reads:
                    mine.add(ln)
            if outcome.get(t) == "failed":
                for ln in own:
                    mentions[ln] = mentions.get(ln, 0) + 1
try:
    link()
except Exception:
    pass  # the tests' own lines still rank
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
ranked = sorted(score, key=lambda ln: (-score[ln], -mentions.get(ln, 0), ln))[: cfg["top"]]
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
        data = plainjson.loads(line[len(RESULT_PREFIX) :], plainjson.REQUEST_BODY)
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
