"""Scripted experts of the task families, and their solve share measured through the real grader.

An expert is `solve(task) -> str | None`: the submission it writes from what the agent sees (prompt and
workspace files), never the reference or the hidden checks. `EXPERTS` maps a task's `metadata["family"]`
(or, for a family that names itself in `metadata["source"]`, that) to the dotted path of its expert, so
`trialground tasks expert SOURCE` finds it without the core naming a family.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.verify.grader import make_grader

Solver = Callable[[Task], "str | None"]
EXPERTS: dict[str, str] = {
    "codegen": "trialground.families.codegen.expert:solve",
    "data": "trialground.families.data.expert:solve",
    "sql": "trialground.families.sql.expert:solve",
    "scicomp": "trialground.families.scicomp.expert:solve",
    "shell": "trialground.families.shell.expert:solve",
    "cleaning": "trialground.families.cleaning.expert:solve",
    "gitrepair": "trialground.families.gitrepair.expert:solve",
    "httpdiag": "trialground.families.httpdiag.expert:solve",
    "regex": "trialground.families.regex.expert:solve",
    "stats": "trialground.families.stats.expert:solve",
    "depgraph": "trialground.families.depgraph.expert:solve",
    "jsonxform": "trialground.families.jsonxform.expert:solve",
    "cron": "trialground.families.cron.expert:solve",
    "configfix": "trialground.families.configfix.expert:solve",
    "csvjoin": "trialground.families.csvjoin.expert:solve",
    "intervals": "trialground.families.intervals.expert:solve",
}


def by_rules(prompt: str, rules: Sequence[tuple[str, str]], head: str = "") -> str | None:
    """`head` and the body of the first rule whose pattern (a regular expression) the prompt matches,
    formatted with the pattern's groups; None when none matches (the expert does not recognise the task)."""
    for pattern, body in rules:
        found = re.search(pattern, prompt, re.S)
        if found is not None:
            return head + body.format(*found.groups())
    return None


def expert_for(task: Task) -> Solver | None:
    family = str(task.metadata.get("family", ""))
    path = EXPERTS.get(family) or EXPERTS.get(str(task.metadata.get("source", "")))
    if path is None:
        return None
    module, _, attr = path.partition(":")
    solver: Solver = getattr(importlib.import_module(module), attr)
    return solver


@dataclass(frozen=True)
class Share:
    tasks: int
    solved: int
    unrecognised: int
    failed_ids: tuple[str, ...]

    @property
    def share(self) -> float:
        return self.solved / self.tasks if self.tasks else 0.0


async def expert_share(
    tasks: Sequence[Task], *, concurrency: int = 8, sandbox: SandboxConfig | None = None
) -> Share:
    """Each task's expert submission graded by a `make_grader` grader (as a single-turn submission)."""
    grader = make_grader(sandbox or SandboxConfig())
    sem = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> bool | None:
        solver = expert_for(task)
        text = solver(task) if solver is not None else None
        if text is None:
            return None
        async with sem:
            verdict = (await grader.grade(task, text)).verdict
        return verdict.passed and verdict.error is None

    try:
        results = await asyncio.gather(*(one(t) for t in tasks))
    finally:
        await grader.close()
    return Share(
        tasks=len(tasks),
        solved=sum(r is True for r in results),
        unrecognised=sum(r is None for r in results),
        failed_ids=tuple(t.id for t, r in zip(tasks, results, strict=True) if r is not True),
    )
