"""The `depgraph` family: questions about a build's dependency graph, answered by a Python program.

`deps.txt` holds 8-14 targets of a build (`target [minutes]: dep dep ...`, random per task), one of them
`all`; the agent writes `deps.py`, run as `python3 deps.py deps.txt [changed.txt]`, that prints the answer
to one of six questions: the serial build order of `all` (dependencies first, ties alphabetical), the
targets on a dependency cycle, what must be rebuilt after some targets changed (in build order), the
earliest finish of `all` with unlimited parallel workers (the critical path), the parallel stages, and how
many targets depend on each. The hidden check (the shared `check_files.py`) runs the program on the
workspace's graph and on two hidden graphs of the same kind, and compares its output lines with what the
reference program (`graphs.py`) computes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from trialground.families.depgraph.graphs import GOAL, answer, needed
from trialground.families.draw import draw_tasks
from trialground.families.filetask import filled, program_task
from trialground.tasks.model import Split, Task
from trialground.tasks.sources import SourceRequest

SOLUTION = "deps.py"
_REFERENCE = (Path(__file__).parent / "graphs.py").read_text(encoding="utf-8")
WORDS = ("api", "auth", "cache", "cli", "codec", "config", "core", "db", "docs", "fonts", "gui", "http",
         "i18n", "io", "json", "kernel", "lexer", "log", "math", "net", "orm", "parser", "plugins", "queue",
         "render", "rpc", "schema", "search", "shell", "sql", "storage", "tests", "theme", "util", "web",
         "xml", "zip")  # fmt: skip
FORMAT = (
    "Each line of deps.txt is `target [minutes]: dependency dependency ...` (a target builds in that many "
    "minutes, after all its dependencies are built); blank lines and `# comments` are ignored."
)
QUESTIONS = {
    "order": "print every target needed to build `all` (including `all`), one per line, in the order a "
    "serial build runs them: a target only after all of its dependencies, and whenever several targets "
    "are ready, the alphabetically first one next.",
    "cycles": "the graph has dependency cycles: print, one per line in alphabetical order, every target that "
    "lies on a cycle (it depends on itself, directly or through other targets).",
    "rebuild": "changed.txt lists targets whose sources changed (separated by white space): print every "
    "target that must be rebuilt (the changed ones and each target that depends on one of them, directly "
    "or not), one per line, in serial build order: a target only after those of its dependencies that are "
    "rebuilt too, and whenever several are ready, the alphabetically first one next.",
    "critical": "with as many parallel workers as you like, a target starts as soon as all of its "
    "dependencies are built: print the minute at which `all` is built, starting at 0 (one integer).",
    "stages": "print the parallel build stages of `all`: a target needed by `all` (including `all`) with no "
    "dependencies is in stage 0, any other target in stage 1 + the largest stage of its dependencies; one "
    "line per stage, stage 0 first, holding that stage's targets in alphabetical order separated by one "
    "space.",
    "users": "for every target, in alphabetical order, print a line `target N`, where N is the number of "
    "other targets that depend on it, directly or through other targets.",
}


def graph(rng: random.Random, question: str) -> tuple[str, str]:
    """A random `deps.txt` for `question`, and a `changed.txt` (empty unless it asks for one)."""
    names = rng.sample(WORDS, rng.randint(7, 13))
    deps = {t: rng.sample(names[:i], rng.randint(0, min(3, i))) for i, t in enumerate(names)}
    if not any(deps.values()):
        deps[names[1]] = [names[0]]
    used = {d for ds in deps.values() for d in ds}
    roots = [t for t in names if t not in used]
    deps[GOAL] = sorted(rng.sample(roots, rng.randint(max(1, len(roots) // 2), len(roots))))
    if question == "cycles":
        for _ in range(rng.randint(1, 3)):
            t = rng.choice([t for t in names if deps[t]])
            below = sorted(needed(deps, t) - {t})
            d = rng.choice(below)
            if t not in deps[d]:
                deps[d].append(t)  # t needs d, directly or not, and now d needs t: a cycle
    minutes = {t: rng.randint(1, 9) for t in names} | {GOAL: 0}
    order = [GOAL, *rng.sample(names, len(names))]
    lines = [f"{t} [{minutes[t]}]:" + "".join(f" {d}" for d in deps[t]) for t in order]
    if rng.random() < 0.3:
        lines.insert(rng.randint(1, len(lines)), "")
    changed = " ".join(rng.sample(names, rng.randint(1, 3))) + "\n" if question == "rebuild" else ""
    return "# target [minutes]: dependencies\n" + "\n".join(lines) + "\n", changed


def make_task(question: str, inputs: list[tuple[str, str]], split: Split) -> Task:
    args = ("deps.txt", "changed.txt") if question == "rebuild" else ("deps.txt",)
    prompt = (
        f"{FORMAT}\n\nWrite {SOLUTION} so that `python3 {SOLUTION} {' '.join(args)}` answers this about the "
        f"graph in the file(s): {QUESTIONS[question]}\n\nIt is also run on other graphs of the same kind, so "
        "compute the answer, do not write it down. Use the standard library only."
    )
    return program_task(
        domain="depgraph",
        prompt=prompt,
        solution=SOLUTION,
        starter="import sys\n\n# python3 deps.py " + " ".join(args) + "\n",
        inputs=[{"deps.txt": d} | ({"changed.txt": c} if c else {}) for d, c in inputs],
        expected=lambda files: answer(question, files["deps.txt"], files.get("changed.txt", "")),
        labels=("workspace deps.txt", "hidden graph"),
        compare="text",
        args=args,
        reference=filled(_REFERENCE, "QUESTION", question),
        split=split,
        metadata={"question": question},
    )


def depgraph_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its question and its graphs."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        question = rng.choice(sorted(QUESTIONS))
        data_seed = rng.getrandbits(48)

        def build() -> Task:
            g = random.Random(data_seed)
            return make_task(question, [graph(g, question) for _ in range(3)], split)

        return f"{question}|{data_seed}", build

    return draw_tasks("depgraph", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return depgraph_tasks(request.n, request.seed, request.split)
