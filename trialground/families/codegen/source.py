"""The quickstart code family: short compositional specs -> a Python function `f`, graded by hidden tests.

An instance is a pipeline of 1-3 steps with random constants, on an integer (`f(x)`) or on a list of
integers (`f(xs)`, 1-2 list steps and a final reduction). The prompt states the steps in words; the
reference solution writes one line per step, e.g.

    Write f(x) for an integer x: add 3, then multiply by 2.
    def f(x):
        x = x + 3
        x = x * 2
        return x

The space holds ~2.7 * 10^5 distinct programs (~2 * 10^6 instances counting wordings), far more than the
12,000 pre-training sees, so held-out pass@1 measures composition, not recall. Train and eval splits are
disjoint by construction: an instance's split is a hash of what it computes (`split_of`), so no eval
instance can ever be generated as a train instance, not even reworded.
Hidden tests use inputs derived from the instance key (never shown in the prompt), so one instance always
yields the same `Task` (same id) whatever the seed that drew it.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Literal

from trialground.families.programs import INT_OPS, LIST_OPS, LIST_REDUCERS, Op, outputs, words
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.model import split_of as task_split
from trialground.tasks.sources import SourceRequest

TESTS_PER_TASK = 3  # test functions in test_hidden.py; each checks INPUTS_PER_TEST inputs
INPUTS_PER_TEST = 2
SOLUTION_PATH = "solution.py"


@dataclass(frozen=True)
class Instance:
    """One drawn instance: the prompt, the reference solution and the hidden (input, output) cases."""

    key: str
    shape: Literal["int", "list"]
    prompt: str
    solution: str
    cases: tuple[tuple[object, object], ...]

    @property
    def split(self) -> Split:
        return split_of(self.key)


def split_of(key: str) -> Split:
    """The split of an instance: a hash of what it computes (its wording is ignored), so a rewording of
    an eval instance is an eval instance too."""
    return task_split(key.split("|")[0])


def _lines(steps: list[tuple[Op, int | None, int]], reducer: Op | None) -> list[str]:
    return [op.code.format(c=c) for op, c, _ in steps] + ([reducer.code] if reducer else [])


def _source(shape: str, steps: list[tuple[Op, int | None, int]], reducer: Op | None) -> str:
    body = "".join(f"    {op.code.format(c=c)}\n" for op, c, _ in steps)
    return (
        f"def f(x):\n{body}    return x\n" if reducer is None else f"def f(xs):\n{body}    {reducer.code}\n"
    )


def _draw_steps(rng: random.Random, ops: tuple[Op, ...], k: int) -> list[tuple[Op, int | None, int]]:
    # (op, constant, phrase index)
    steps: list[tuple[Op, int | None, int]] = []
    for _ in range(k):
        op = rng.choice(ops)
        steps.append((op, rng.choice(op.consts) if op.consts else None, rng.randrange(len(op.phrases))))
    return steps


def _key(shape: str, steps: list[tuple[Op, int | None, int]]) -> str:
    # "semantic|wording": the part before "|" decides the split, the whole key identifies the instance
    semantic = ",".join(f"{op.name}{'' if c is None else c}" for op, c, _ in steps)
    return f"{shape}:{semantic}|" + "".join(str(p) for _, _, p in steps)


def draw_instance(rng: random.Random, split: Split | None = None) -> Instance | None:
    """One random instance, or None when it is degenerate (its hidden cases cannot tell answers apart)
    or, with `split` given, of the other split."""
    if rng.random() < 0.6:
        steps = _draw_steps(rng, INT_OPS, rng.choice((1, 2, 2, 3, 3)))
        key = _key("int", steps)
        prompt = f"Write f(x) for an integer x: {words(steps)}."
        reducer: Op | None = None
        shape: Literal["int", "list"] = "int"
    else:
        steps = _draw_steps(rng, LIST_OPS, rng.choice((1, 2, 2)))
        reducer = rng.choice(LIST_REDUCERS)
        key = _key("list", [*steps, (reducer, None, 0)])
        prompt = f"Write f(xs) for a list of integers xs: {words(steps)}, then {reducer.phrases[0]}."
        shape = "list"
    solution = _source(shape, steps, reducer)
    if split is not None and split_of(key) != split:
        return None
    # hidden inputs come from the key alone, so an instance always has the same tests
    case_rng = random.Random("cases:" + key.split("|")[0])
    n_inputs = TESTS_PER_TASK * INPUTS_PER_TEST
    if shape == "int":
        inputs: list[object] = case_rng.sample(range(-20, 41), n_inputs)
    else:
        inputs = [[case_rng.randint(-5, 15) for _ in range(case_rng.randint(3, 6))] for _ in range(n_inputs)]
    want = outputs(_lines(steps, reducer), inputs)
    if len(set(want)) < 3:
        return None  # near-constant on the hidden inputs: a wrong answer could pass
    for i in range(len(steps)):  # every step must matter on the hidden inputs
        if outputs(_lines(steps[:i] + steps[i + 1 :], reducer), inputs) == want:
            return None
    cases = tuple((x, ast.literal_eval(y)) for x, y in zip(inputs, want, strict=True))
    return Instance(key, shape, prompt, solution, cases)


def render_tests(cases: tuple[tuple[object, object], ...]) -> str:
    """A pytest file with TESTS_PER_TASK `test_*` functions that `from solution import f`."""
    parts = ["from solution import f\n"]
    for t in range(TESTS_PER_TASK):
        chunk = cases[t * INPUTS_PER_TEST : (t + 1) * INPUTS_PER_TEST]
        asserts = "".join(f"    assert f({x!r}) == {y!r}\n" for x, y in chunk)
        parts.append(f"\n\ndef test_{t}():\n{asserts}")
    return "".join(parts)


def to_task(inst: Instance) -> Task:
    return Task(
        domain="code",
        prompt=inst.prompt,
        hidden_checks={"test_hidden.py": render_tests(inst.cases)},
        reference=inst.solution,
        verifier=VerifierSpec(
            kind="code_tests", params={"solution_path": SOLUTION_PATH, "expected_tests": TESTS_PER_TASK}
        ),
        split=inst.split,
        metadata={"family": "codegen", "shape": inst.shape, "key": inst.key},
    )


def sample_instances(n: int, seed: int, split: Split) -> list[Instance]:
    """`n` distinct instances of `split`, deterministic in (`n`, `seed`, `split`)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"codegen:{seed}:{split}")
    out: dict[str, Instance] = {}
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not draw {n} distinct {split} instances (space too small?)")
        inst = draw_instance(rng, split)
        if inst is not None and inst.split == split and inst.key not in out:
            out[inst.key] = inst
    return list(out.values())


def generate_codegen_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` distinct code tasks of `split` (verifier `code_tests`, hidden `test_hidden.py`, a reference)."""
    return [to_task(inst) for inst in sample_instances(n, seed, split)]


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return list(generate_codegen_tasks(request.n, request.seed, request.split))
