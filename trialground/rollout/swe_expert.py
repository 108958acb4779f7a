"""A scripted expert for repository tasks: it works only through the environment's tools.

`solve(env, task)` plays one episode of a `ToolEnv` (the real sandbox, tools and grader) the way a careful
engineer would, one tool call per turn:

1. `run_tests()`: the failing tests as grading runs them, with pytest's tracebacks;
2. it locates the bug from what those runs printed: library frames of the tracebacks (innermost first);
   then the failing tests' own lines (`read_lines`), whose called names it looks up with
   `search("def NAME")`; then the functions those call; last, the functions the modules it has read call
   at import (tables built by module-level calls);
3. at each place, in that order, it reads the file (`read_file`) and tries the edits that undo one
   mutation of the bug catalogue (`trialground.tasks.swe.mutate.inverse_mutations`): nearest the located
   line first; each is applied with `edit_file` and checked by running the failing tests named in the
   prompt (`bash`, the prompt's own test command); an edit that does not make them pass is reverted
   (`write_file` with the text read);
4. when the named tests pass it runs `run_tests()` (every failing and passing test, as graded); if that
   passes it submits, else it reverts and goes on. Out of candidates or budget, it submits what it has.

What it knows is what an agent could know: the prompt, the tools' outputs and the catalogue of bug kinds.
It never reads the task's reference patch, its hidden tests or its metadata: the task is handed to
`env.reset` (the environment needs it to grade) and otherwise only its id is read. A dropped else branch
or a removed guard has no inverse edit in the catalogue, so tasks with those bugs stay unsolved: the
solve share is a floor on what the tools allow, not a ceiling.

`trialground tasks expert swe:<repo>[:<candidates>]` runs it over a task set and prints the solve share
as graded (docs/swe.md).
"""

from __future__ import annotations

import ast
import contextlib
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from trialground import pyast
from trialground.envs.base import Observation
from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.swe.mutate import Mutation, inverse_mutations

# The environment the expert works in: observations that hold a whole file (read_file shows up to 256 KiB)
# and every traceback, one call per turn, enough turns.
EXPERT_ENV = EnvConfig(
    kind="tool",
    max_turns=400,
    max_episode_s=1800.0,
    observation_budget_chars=300_000,
    tool_timeout_s=180.0,
    navigation_tools=True,
    max_calls_per_turn=1,
)

_FRAME = re.compile(r"^([\w./-]+\.py):(\d+)(?::| in )", re.MULTILINE)
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_SKIP_NAMES = frozenset(
    {"assert", "print", "len", "list", "dict", "set", "tuple", "str", "int", "float", "bool", "range",
     "isinstance", "type", "sorted", "repr", "raises", "approx", "getattr", "hasattr", "super", "self",
     "object", "zip", "map", "iter", "next", "enumerate", "min", "max", "sum", "any", "all", "abs", "round",
     "open", "parametrize", "fixture", "mark", "assertEqual", "assertTrue", "assertFalse", "assertRaises",
     "assertIn", "assertIs", "assertIsNone", "assertAlmostEqual", "def", "if", "for", "while", "return",
     "not", "and", "or", "in", "is", "lambda", "with", "pytest", "bytes", "bytearray", "frozenset"}
)  # fmt: skip


@dataclass
class ExpertResult:
    """One episode: whether grading passed, and what the expert did on the way."""

    task_id: str
    passed: bool
    turns: int
    wall_s: float
    tried: list[Mutation] = field(default_factory=list)  # candidate edits applied, in order
    solved_by: Mutation | None = None
    finish_reason: str = ""
    detail: str = ""  # the verdict's detail
    error: str | None = None


class _Budget(Exception):
    pass


class _Episode:
    def __init__(self, env: ToolEnv, max_candidates: int) -> None:
        self.env = env
        self.max_candidates = max_candidates
        self.last: Observation | None = None

    async def call(self, name: str, **arguments: object) -> str:
        if self.last is not None and self.last.done:
            raise _Budget
        obs = await self.env.step(format_tool_call(name, dict(arguments), "json_tags"))
        self.last = obs
        if obs.done and name != "submit":
            raise _Budget  # the environment ended the episode (turns or time)
        return obs.text


def _quick_command(prompt: str, failing: list[str]) -> str | None:
    """The prompt's test command with the named failing tests in place of its paths."""
    m = re.search(r"Run the tests with: (.+)$", prompt, re.MULTILINE)
    if not m or not failing:
        return None
    tokens = shlex.split(m.group(1))
    if not any(t.endswith("pytest.py") for t in tokens):
        return None
    i = next(i for i, t in enumerate(tokens) if t.endswith("pytest.py"))
    keep, rest = tokens[: i + 1], tokens[i + 1 :]
    j = 0
    while j < len(rest):
        if rest[j] in ("-o", "-p") and j + 1 < len(rest):
            keep += rest[j : j + 2]
            j += 2
            continue
        j += 1  # the suite's paths and display flags: replaced by the node ids below
    return shlex.join([*keep, "-q", "-x", "--tb=short", *failing])


def _failing_tests(prompt: str) -> list[str]:
    block = prompt.split("Failing tests:", 1)[-1].split("\n\n", 1)[0]
    return [ln[2:].strip() for ln in block.splitlines() if ln.startswith("- ") and "::" in ln]


def _is_test_file(path: str) -> bool:
    parts = path.split("/")
    return (
        parts[-1].startswith("test_")
        or parts[-1].endswith("_test.py")
        or parts[-1] == "conftest.py"
        or any(p.lower() in ("tests", "test", "testing") for p in parts[:-1])
    )


def _frames(text: str) -> list[tuple[str, int]]:
    """(path, line) of every traceback location in `text`, in order, repeats dropped."""
    out: list[tuple[str, int]] = []
    for path, line in _FRAME.findall(text):
        path = path.removeprefix("/workspace/").removeprefix("./")
        if path.startswith(("/", ".tg/")):
            continue
        if (path, int(line)) not in out:
            out.append((path, int(line)))
    return out


def _enclosing(source: str, line: int) -> tuple[int, int] | None:
    """The line span of the innermost function around `line`."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return None
    best: tuple[int, int] | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start, end = node.lineno, node.end_lineno or node.lineno
            if start <= line <= end and (best is None or end - start < best[1] - best[0]):
                best = (start, end)
    return best


def _import_time_functions(source: str) -> list[int]:
    """Definition lines of the module's functions that its top-level statements call (at import)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return []
    defs = {n.name: n.lineno for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    called: list[int] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defs:
                called.append(defs[node.func.id])
    return list(dict.fromkeys(called))


def _library_hits(hits: str) -> list[tuple[str, int]]:
    """(path, line) of the `search` hits in library files."""
    out = []
    for hit in hits.splitlines():
        parts = hit.split(":", 2)
        if (
            len(parts) == 3
            and parts[1].isdigit()
            and not parts[0].startswith(".tg/")
            and not _is_test_file(parts[0])
        ):
            out.append((parts[0], int(parts[1])))
    return out


def _method_line(source: str, class_line: int, name: str) -> int | None:
    """The line of method `name` of the class defined at `class_line`."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.lineno == class_line:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item.lineno
    return None


def _called_in(source: str, span: tuple[int, int]) -> list[str]:
    lines = source.splitlines()[span[0] - 1 : span[1]]
    return list(dict.fromkeys(n for n in _CALLED.findall("\n".join(lines)) if n not in _SKIP_NAMES))


def _edit_blocks(old: str, new: str) -> tuple[str, str]:
    """The smallest run of whole lines where `old` and `new` differ, widened until it is unique in `old`."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    lo = 0
    while lo < min(len(a), len(b)) and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a, hi_b = hi_a - 1, hi_b - 1
    while True:
        block = "".join(a[lo:hi_a])
        if block and old.count(block) == 1:
            return block, "".join(b[lo:hi_b])
        if lo == 0 and hi_a == len(a):
            return old, new
        lo, hi_a, hi_b = max(0, lo - 1), min(len(a), hi_a + 1), hi_b + (1 if hi_a < len(a) else 0)


class Expert:
    """See the module docstring. `max_candidates`: edits tried per task at most."""

    def __init__(self, max_candidates: int = 60, max_searches: int = 40) -> None:
        self.max_candidates = max_candidates
        self.max_searches = max_searches

    async def solve(self, env: ToolEnv, task: Task) -> ExpertResult:
        t0 = time.monotonic()
        ep = _Episode(env, self.max_candidates)
        obs = await env.reset(task)
        prompt = obs.text
        result = ExpertResult(task.id, False, 0, 0.0)
        with contextlib.suppress(_Budget):
            await self._work(ep, prompt, result)
        with contextlib.suppress(_Budget):
            if ep.last is None or not ep.last.done:
                await ep.call("submit")  # out of ideas: the workspace as it is (every try reverted)
        end = ep.last.end if ep.last is not None else None
        if end is not None:
            result.finish_reason = end.finish_reason
            if end.graded is not None:
                result.passed = end.graded.verdict.passed
                result.detail = end.graded.verdict.detail[:300]
            if end.error is not None:
                result.error = end.error.message
        result.turns = env.state.turn
        result.wall_s = time.monotonic() - t0
        return result

    async def _work(self, ep: _Episode, prompt: str, result: ExpertResult) -> None:
        failing = _failing_tests(prompt)
        quick = _quick_command(prompt, failing)
        report = await ep.call("run_tests")
        frames = _frames(report)
        library_frames = [f for f in frames if not _is_test_file(f[0])][::-1]  # innermost first
        test_frames = [f for f in frames if _is_test_file(f[0])]
        texts: dict[str, str] = {}
        seen: set[tuple[str, str]] = set()
        tried = 0

        async def read(path: str) -> str | None:
            if path not in texts:
                out = await ep.call("read_file", path=path)
                if out.startswith("error:"):
                    return None
                texts[path] = out
            return texts[path]

        async def attempt(path: str, line: int) -> bool:
            """Try the inverse edits around `line` of `path`; True when one passed run_tests."""
            nonlocal tried
            if not path.endswith(".py"):
                return False  # stubs and data: no code runs there
            source = await read(path)
            if source is None:
                return False
            span = _enclosing(source, line) or (max(1, line - 10), line + 10)
            cands = inverse_mutations(path, source, span)
            cands.sort(key=lambda m: (abs(m.line - line), m.line))
            for m in cands:
                if (path, m.text) in seen:
                    continue
                seen.add((path, m.text))
                if tried >= self.max_candidates:
                    raise _Budget
                tried += 1
                result.tried.append(m)
                old, new = _edit_blocks(source, m.text)
                out = await ep.call("edit_file", path=path, old=old, new=new)
                if out.startswith("error:"):
                    continue
                if quick is not None:
                    check = await ep.call("bash", command=quick)
                    good = check.startswith("[exit 0]")
                else:
                    good = True
                if good:
                    full = await ep.call("run_tests")
                    if "FAILED" not in full and "[exit 0]" in full:
                        result.solved_by = m
                        return True
                await ep.call("write_file", path=path, content=source)
            return False

        for path, line in library_frames:
            if await attempt(path, line):
                return await self._submit(ep)
        # The tracebacks end in the tests (a wrong value, not an exception): find what the tests call.
        names: list[str] = [t.rsplit("::", 1)[-1].split("[")[0].removeprefix("test_") for t in failing]
        for path, line in test_frames[:6]:
            page = await ep.call("read_lines", path=path, start=max(1, line - 12), count=14)
            lines = [ln.split("| ", 1)[-1] for ln in page.splitlines()[1:]]
            names = [*_CALLED.findall(lines[-1] if lines else ""), *names]
            names += _CALLED.findall("\n".join(lines))
        queue = [n for n in dict.fromkeys(names) if n and n not in _SKIP_NAMES]
        known = set(queue)
        searches = 0
        visited: set[tuple[str, int]] = set(library_frames)
        while queue and searches < self.max_searches:
            name = queue.pop(0)
            searches += 1
            hits = await ep.call("search", pattern=f"def {name}(")
            if not _library_hits(hits):  # a class: its constructor is where the work starts
                found = _library_hits(await ep.call("search", pattern=f"class {name}"))
                hits = ""
                for path, line in found[:2]:
                    source = await read(path)
                    init = _method_line(source, line, "__init__") if source else None
                    if init is not None:
                        hits += f"{path}:{init}:\n"
            for hit in hits.splitlines():
                parts = hit.split(":", 2)
                if len(parts) < 3 or not parts[1].isdigit():
                    continue
                path, line = parts[0], int(parts[1])
                if path.startswith(".tg/") or _is_test_file(path) or (path, line) in visited:
                    continue
                visited.add((path, line))
                if await attempt(path, line + 1):
                    return await self._submit(ep)
                source = texts.get(path)
                span = _enclosing(source, line + 1) if source else None
                if source and span:
                    more = [n for n in _called_in(source, span) if n not in known]
                    known.update(more)
                    queue += more
        # Last, what the modules read so far run at import (tables built by module-level calls).
        for path, source in list(texts.items()):
            for line in _import_time_functions(source):
                if (path, line) not in visited:
                    visited.add((path, line))
                    if await attempt(path, line + 1):
                        return await self._submit(ep)

    async def _submit(self, ep: _Episode) -> None:
        await ep.call("submit")


@dataclass
class ExpertReport:
    """The expert over a task set: per task, and the share solved as graded."""

    source: str
    results: list[ExpertResult]
    wall_s: float

    @property
    def solved(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def share(self) -> float:
        return self.solved / len(self.results) if self.results else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "tasks": len(self.results),
            "solved": self.solved,
            "share": round(self.share, 4),
            "wall_s": round(self.wall_s, 1),
            "results": [
                {
                    "task_id": r.task_id,
                    "passed": r.passed,
                    "turns": r.turns,
                    "edits_tried": len(r.tried),
                    "solved_by": r.solved_by.description if r.solved_by else None,
                    "finish_reason": r.finish_reason,
                    "wall_s": round(r.wall_s, 1),
                    "error": r.error,
                }
                for r in self.results
            ],
        }


async def run_expert(
    tasks: list[Task],
    *,
    source: str = "",
    sandbox_config: SandboxConfig | None = None,
    expert: Expert | None = None,
    on_result: Callable[[Task, ExpertResult], None] | None = None,
) -> ExpertReport:
    """The expert on each task in turn, each in a fresh `ToolEnv` graded by the real grader."""
    from trialground.verify.grader import make_grader

    config = sandbox_config or SandboxConfig()
    grader = make_grader(config)
    expert = expert or Expert()
    t0 = time.monotonic()
    results: list[ExpertResult] = []
    for task in tasks:
        env = ToolEnv(grader, EXPERT_ENV, config)
        try:
            result = await expert.solve(env, task)
        finally:
            await env.close()
        results.append(result)
        if on_result is not None:
            on_result(task, result)
    return ExpertReport(source, results, time.monotonic() - t0)
