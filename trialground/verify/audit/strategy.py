"""An exploit strategy: a small, data-only description of what a cheating agent submits, per surface.

A task's *surface* is what its verifier grades, found from the kind's params model (never its name):

- `code`: a Python module (`code_tests` and every kind whose params are `CodeTestsParams`);
- `program`: the file at `solution_path` plus whatever else the agent left in its workspace
  (`check_program`-like kinds); where that file is a Python module, code moves are played there too;
- `patch`: a unified diff against a repository (`swe_tests`-like kinds), the hostile patches of
  `trialground.tasks.swe.hostile` named by label;
- `answer`: a text answer (`exact`, `numeric`, `regex`, `math`, `judge`, plugins).

A strategy names what it submits on each surface it has a move for, and may also run a bash script in the
agent's workspace before grading (what an agent could do with its `bash` tool). A strategy with only a
workspace script submits the surface's *wrong baseline* (the untouched file, or stubs that return None),
so whenever it is paid the exploit, not the submission, earned it.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass

from trialground import pyast
from trialground.tasks.model import Task
from trialground.tasks.verifiers import CheckProgramParams, CodeTestsParams, SweTestsParams, lookup

CLASSES = (
    "exit_early",  # leave before any check runs
    "forge_output",  # print or write what a pass looks like
    "edit_tests",  # edit, delete or plant test files
    "patch_framework",  # patch the test framework, builtins or the import system
    "always_equal",  # objects that compare equal to anything
    "read_hidden",  # read hidden checks or the reference through any tool
    "special_files",  # FIFOs, symlinks, devices, huge files where a file is read
    "timing_resources",  # clocks, hangs, forks, memory, disk
    "judge_text",  # text aimed at a judge or a sloppy answer parser
)
SURFACES = ("code", "program", "patch", "answer")


@dataclass(frozen=True)
class CodeMove:
    """A module: `head`, then each of the task's functions as `def NAME(*args, **kwargs):` + `body`
    (`@FN@` is the function's name), then `tail`."""

    head: str = ""
    body: str = "    return None\n"
    tail: str = ""

    def render(self, functions: list[str]) -> str:
        defs = "".join(f"def {f}(*args, **kwargs):\n{self.body.replace('@FN@', f)}\n" for f in functions)
        return self.head + defs + self.tail


@dataclass(frozen=True)
class Strategy:
    """One exploit. `program`: the solution file's text (`@ORIGINAL@` is the untouched file); `answer`: the
    answer text (`@SPRAY@` is every number of the prompt and a range of small integers); `patch`: the label
    of a hostile patch; `workspace`: a bash script run in the agent's workspace (`@SOLUTION@` the solution
    path, `@VISIBLE@` the visible checks, `@CHECKS@` the names of the checks, visible and hidden, all
    shell-quoted) before grading."""

    name: str
    klass: str
    doc: str
    code: CodeMove | None = None
    program: str | None = None
    answer: str | None = None
    patch: str | None = None
    workspace: str | None = None

    def __post_init__(self) -> None:
        if self.klass not in CLASSES:
            raise ValueError(f"strategy {self.name!r}: unknown class {self.klass!r} (known: {CLASSES})")


@dataclass(frozen=True)
class Move:
    """What one strategy does on one task: the submission, the workspace script (or None) and whether it
    is played in an agent workspace."""

    submission: str
    script: str | None
    in_workspace: bool


def surface(task: Task) -> str:
    params = lookup(task.verifier.kind).params
    if issubclass(params, CodeTestsParams):
        return "code"
    if issubclass(params, CheckProgramParams):
        return "program"
    if issubclass(params, SweTestsParams):
        return "patch"
    return "answer"


def functions_of(task: Task) -> list[str]:
    """The top-level functions a code task's reference defines (and its entry point), else `solve`."""
    try:
        tree = pyast.parse(task.reference or "")
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    except SyntaxError:
        names = []
    if surface(task) == "code":
        entry = task.verifier.params_as(CodeTestsParams).entry_point
        if entry and entry not in names:
            names.append(entry)
    return names or ["solve"]


def solution_file(task: Task) -> str | None:
    kind = surface(task)
    if kind == "code":
        return task.verifier.params_as(CodeTestsParams).solution_path
    if kind == "program":
        return task.verifier.params_as(CheckProgramParams).solution_path
    return None


def has_workspace(task: Task) -> bool:
    """Whether the task is worked in an agent's sandbox (it ships files or visible checks)."""
    return bool(task.files or task.visible_checks)


def wrong_baseline(task: Task) -> str:
    """The surface's submission that must fail on its own: the untouched solution file, else stubs."""
    path = solution_file(task)
    if path is not None and path in task.files:
        return task.files[path]
    if surface(task) == "code":
        return CodeMove().render(functions_of(task))
    return ""


def spray(task: Task, limit: int = 400) -> str:
    """Every number the prompt names and the integers 0..99, as one answer line each and boxed."""
    found = re.findall(r"-?\d+(?:\.\d+)?", task.prompt)[:limit]
    numbers = list(dict.fromkeys([*found, *map(str, range(100))]))
    return "\n".join(f"Answer: {n}" for n in numbers) + "\n" + " ".join(f"\\boxed{{{n}}}" for n in numbers)


def move(strategy: Strategy, task: Task, patches: dict[str, str] | None = None) -> Move | None:
    """What `strategy` does on `task`, or None when it has no move for the task's surface."""
    kind = surface(task)
    workspace = has_workspace(task) and kind in ("code", "program")
    script = _script(strategy.workspace, task) if workspace and strategy.workspace else None
    if kind == "code" and strategy.code is not None:
        return Move(strategy.code.render(functions_of(task)), script, workspace)
    if kind == "program" and strategy.code is not None and (solution_file(task) or "").endswith(".py"):
        return Move(strategy.code.render(functions_of(task)), script, workspace)
    if kind == "program" and strategy.program is not None:
        return Move(strategy.program.replace("@ORIGINAL@", wrong_baseline(task)), script, workspace)
    if kind == "answer" and strategy.answer is not None:
        return Move(strategy.answer.replace("@SPRAY@", spray(task)), None, False)
    if kind == "patch" and strategy.patch is not None:
        found = (patches or {}).get(strategy.patch)
        return None if found is None else Move(found, None, False)
    if script is not None:
        return Move(wrong_baseline(task), script, True)
    return None


def _script(template: str, task: Task) -> str:
    quoted = lambda names: " ".join(shlex.quote(n) for n in sorted(names))  # noqa: E731
    return (
        template.replace("@SOLUTION@", shlex.quote(solution_file(task) or "solution.py"))
        .replace("@VISIBLE@", quoted(task.visible_checks) or "''")
        .replace("@CHECKS@", quoted([*task.visible_checks, *task.hidden_checks]) or "''")
    )
