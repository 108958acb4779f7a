"""A files-in, files-out task, built the same way for every family that grades a program by its output.

A family describes an instance as the solution file the agent writes, the workspace files it starts from,
and `Case`s: the inputs a case's program run gets, the arguments it is called with, where its output is
read (a file or `-` for stdout), how that output is parsed (`json`, `toml`, `ini`, `text` lines, `csv`:
the parsers of `check_files.PARSE`, the one shipped check program) and what it must equal. The first case
is normally the workspace's own input; the others are hidden inputs of the same kind, so a program that
writes the visible answer down fails. A family whose answer is a file (a repaired configuration) runs
nothing: its single case compares the solution file itself.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from trialground.families.check_files import PARSE
from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec

Input = TypeVar("Input")
_CHECK = check_source(Path(__file__).parent, "check_files.py")
CHECK_NAME = "check_files.py"


@dataclass(frozen=True)
class Case:
    """One graded run: `files` written beside the program, `args` after its name, the output read at
    `output` (`-`: stdout) and parsed by `compare`, which must give what `expected` (the same kind of
    text, written by the generator) gives."""

    label: str
    expected: str
    compare: str
    files: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    output: str = "-"

    def spec(self) -> dict[str, object]:
        if self.compare not in PARSE:
            raise ValueError(f"case {self.label!r}: unknown comparison {self.compare!r} ({list(PARSE)})")
        want = PARSE[self.compare](self.expected)
        return {"label": self.label, "files": dict(self.files), "args": list(self.args),
                "output": self.output, "compare": self.compare, "want": want}  # fmt: skip


def files_task(
    *,
    domain: str,
    prompt: str,
    solution: str,
    files: Mapping[str, str],
    cases: tuple[Case, ...],
    reference: str,
    split: Split,
    metadata: Mapping[str, str | int],
    run: bool = True,
    timeout_s: float = 20,
) -> Task:
    """The task: `files` (which must hold the starting `solution`) in the workspace, one hidden check
    (`check_files.py` with the cases embedded) graded with `check_program`."""
    if solution not in files:
        raise ValueError(f"{domain}: the workspace must hold the starting {solution}")
    spec = {"solution": solution, "run": run, "timeout_s": timeout_s, "cases": [c.spec() for c in cases]}
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    return Task(
        domain=domain,
        prompt=prompt,
        files=dict(files),
        hidden_checks={CHECK_NAME: check},
        reference=reference,
        verifier=VerifierSpec(
            kind="check_program",
            params={"solution_path": solution, "check_timeout_s": 30 + timeout_s * len(cases)},
        ),
        split=split,
        metadata={"family": domain, **metadata},
    )


def program_task(
    *,
    domain: str,
    prompt: str,
    solution: str,
    starter: str,
    inputs: Sequence[Mapping[str, str]],
    expected: Callable[[Mapping[str, str]], str],
    labels: tuple[str, str],
    compare: str,
    args: tuple[str, ...],
    output: str = "-",
    reference: str,
    split: Split,
    metadata: Mapping[str, str | int],
) -> Task:
    """A task whose program runs on each of `inputs` (the workspace's first, then the hidden ones) and must
    produce what `expected` computes from them; `labels` names the workspace case and, numbered, the
    hidden ones in the check's messages; the workspace starts with the first input and `starter`."""
    cases = tuple(
        Case(label=labels[0] if i == 0 else f"{labels[1]} {i}", expected=expected(files), compare=compare,
             files=files, args=args, output=output)
        for i, files in enumerate(inputs)
    )  # fmt: skip
    return files_task(
        domain=domain,
        prompt=prompt,
        solution=solution,
        files={**inputs[0], solution: starter},
        cases=cases,
        reference=reference,
        split=split,
        metadata=metadata,
    )


def filled(module: str, name: str, value: object) -> str:
    """A reference module's text with its `NAME = ...  # filled in` line set to `value` (a Python literal)."""
    head, found, tail = module.partition(f"\n{name} = ")
    if not found:
        raise ValueError(f"the reference module has no line `{name} = ...`")
    return f"{head}\n{name} = {value!r}  # filled in\n{tail.partition(chr(10))[2]}"


def question_tasks(
    family: str,
    n: int,
    seed: int,
    split: Split,
    *,
    question: Callable[[random.Random], tuple[dict[str, Any], str]],
    make_input: Callable[[random.Random], Input],
    make_task: Callable[[dict[str, Any], str, list[Input], Split], Task],
    keep: Callable[[dict[str, Any], Input], bool] = lambda q, x: True,
    inputs: int = 3,
) -> list[Task]:
    """`n` tasks of `split` (`draw_tasks`): an instance is a question (its parameters and words) and a
    seed from which its `inputs` inputs are drawn, the first the workspace's; an input `keep` refuses
    (one that would make the answer empty) is drawn again. The instance's key is the question's JSON and
    the seed."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        q, words = question(rng)
        data_seed = rng.getrandbits(48)

        def build() -> Task:
            g = random.Random(data_seed)
            drawn: list[Input] = []
            while len(drawn) < inputs:
                x = make_input(g)
                if keep(q, x):
                    drawn.append(x)
            return make_task(q, words, drawn, split)

        return f"{json.dumps(q, sort_keys=True)}|{data_seed}", build

    return draw_tasks(family, n, seed, split, instance)
