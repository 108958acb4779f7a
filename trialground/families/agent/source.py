"""agent: task families for multi-turn tool use, where what must be done is only learnt through the tools.

Each family hides what the fix or the answer is from the prompt; the episode has to run something and
read the result:

- ``repair`` (domain code): `solution.py` computes a pipeline with one wrong step. The prompt says only
  that it is broken; the visible test's failure message states what `f` must do. Graded by hidden tests
  (other inputs) with the `code_tests` verifier.
- ``lookup`` (domain data): the price of the item of one order, found by joining `orders.csv` and
  `prices.csv` in the workspace. Graded `exact` against the gold price (never in the workspace as an
  answer); the submission is `submit(answer=...)`.
- ``config`` (domain ops): `app.py` refuses to start; the error it prints names the bad line of
  `settings.ini` (a wrong value, or a misspelt key) against the deployment's `manifest.json`. Graded by a
  hidden `check_program` that applies the service's own rules, with its own copy of the manifest (an edited
  manifest does not help), to the repaired `settings.ini`.

An instance's split is a hash of what it asks (its `key`; 20% eval), so held-out instances are never
generated for training. Deterministic in (seed, n, split). The expected tool sequence of an instance is in
`metadata` (`family`, `key`) and in `expert_actions`, which `scripts/pretrain_agent.py` uses to make
training traces.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from trialground.families.programs import INT_OPS, Op, outputs, words
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.model import split_of as task_split
from trialground.tasks.sources import SourceRequest

Family = Literal["repair", "lookup", "config"]
FAMILIES: tuple[Family, ...] = ("repair", "lookup", "config")

Step = tuple[Op, int | None, int]  # (op, constant, phrase index), as in the codegen family


@dataclass(frozen=True)
class Instance:
    """One drawn instance: its task and the expert's tool calls (name, arguments), which solve it."""

    key: str
    family: Family
    task: Task
    expert: tuple[tuple[str, dict[str, str]], ...]


def split_of(key: str) -> Split:
    return task_split(key, namespace="agent:")


# --- repair ---------------------------------------------------------------------------------------------

_REPAIR_PROMPT = "solution.py is broken. Run the tests to learn what f must do, fix solution.py, then submit."


def _program(steps: list[Step]) -> str:
    body = "".join(f"    {op.code.format(c=c)}\n" for op, c, _ in steps)
    return f"def f(x):\n{body}    return x\n"


def _mutate(rng: random.Random, steps: list[Step]) -> list[Step]:
    """The same pipeline with one step's constant (or, for constant-free steps, its op) changed."""
    i = rng.randrange(len(steps))
    op, c, p = steps[i]
    if op.consts and rng.random() < 0.7:
        others = [v for v in op.consts if v != c]
        new: Step = (op, rng.choice(others), p)
    else:
        alt = rng.choice([o for o in INT_OPS if o.name != op.name])
        new = (alt, rng.choice(alt.consts) if alt.consts else None, 0)
    return [*steps[:i], new, *steps[i + 1 :]]


def _repair(rng: random.Random) -> Instance | None:
    steps: list[Step] = []
    for _ in range(rng.choice((2, 2, 3))):
        op = rng.choice(INT_OPS)
        steps.append((op, rng.choice(op.consts) if op.consts else None, rng.randrange(len(op.phrases))))
    buggy = _mutate(rng, steps)
    lines = [op.code.format(c=c) for op, c, _ in steps]
    bad_lines = [op.code.format(c=c) for op, c, _ in buggy]
    key = "repair:" + ";".join(lines) + "|" + ";".join(bad_lines)
    case_rng = random.Random("cases:" + key)
    inputs: list[object] = list(case_rng.sample(range(-9, 31), 8))
    visible, hidden = inputs[:2], inputs[2:]
    want, got = outputs(lines, inputs), outputs(bad_lines, inputs)
    if want[:2] == got[:2] or want[2:] == got[2:] or len(set(want[2:])) < 3:
        return None  # the visible tests must show the bug, the hidden ones must catch it
    if want[2:] == [repr(x) for x in hidden] or any(
        outputs(lines[:i] + lines[i + 1 :], hidden) == want[2:] for i in range(len(lines))
    ):
        return None  # every step must matter on the hidden inputs (and f(x) = x must fail)
    stated = words(steps)
    pairs = ", ".join(f"({x}, {y})" for x, y in zip(visible, want[:2], strict=True))
    visible_test = (
        "from solution import f\n\n\n"
        "def test_f():\n"
        f"    for x, want in ({pairs}):\n"
        "        got = f(x)\n"
        f'        assert got == want, f"f({{x}}) is {{got}}, expected {{want}}: f must {stated}"\n'
    )
    hidden_test = "from solution import f\n" + "".join(
        f"\n\ndef test_{t}():\n"
        + "".join(
            f"    assert f({x!r}) == {y}\n"
            for x, y in zip(hidden[2 * t : 2 * t + 2], want[2 + 2 * t : 4 + 2 * t], strict=True)
        )
        for t in range(3)
    )
    reference = _program(steps)
    task = Task(
        domain="code",
        prompt=_REPAIR_PROMPT,
        files={"solution.py": _program(buggy)},
        visible_checks={"test_solution.py": visible_test},
        hidden_checks={"test_hidden.py": hidden_test},
        reference=reference,
        verifier=VerifierSpec(
            kind="code_tests", params={"solution_path": "solution.py", "expected_tests": 3}
        ),
        split=split_of(key),
        metadata={"family": "agent:repair", "key": key},
    )
    expert: tuple[tuple[str, dict[str, str]], ...] = (
        ("run_tests", {}),
        ("write_file", {"path": "solution.py", "content": reference}),
        ("run_tests", {}),
        ("submit", {}),
    )
    return Instance(key, "repair", task, expert)


# --- lookup ---------------------------------------------------------------------------------------------

ITEMS = (
    "apple", "banana", "cherry", "grape", "lemon", "mango", "melon", "olive", "peach", "pear",
    "plum", "quince", "fig", "lime", "kiwi", "papaya", "guava", "date", "apricot", "orange",
)  # fmt: skip
_LOOKUP_PROMPT = (
    "orders.csv lists orders and prices.csv lists prices. What does the item of order {order} cost? "
    "Find it with the tools, then submit(answer=PRICE)."
)


def _lookup(rng: random.Random) -> Instance | None:
    items = rng.sample(ITEMS, 6)
    prices = {item: rng.randint(10, 99) for item in items}
    orders = [f"{rng.choice('ABCDEFGH')}{n}" for n in rng.sample(range(10, 100), 8)]
    if len({o[1:] for o in orders}) != len(orders):
        return None
    placed = {order: rng.choice(items) for order in orders}
    asked = rng.choice(orders)
    key = (
        "lookup:"
        + ",".join(f"{o}={placed[o]}" for o in orders)
        + ";"
        + ",".join(f"{i}={prices[i]}" for i in items)
        + ";"
        + asked
    )
    item, price = placed[asked], str(prices[placed[asked]])
    task = Task(
        domain="data",
        prompt=_LOOKUP_PROMPT.format(order=asked),
        files={
            "orders.csv": "order,item\n" + "".join(f"{o},{placed[o]}\n" for o in orders),
            "prices.csv": "item,price\n" + "".join(f"{i},{prices[i]}\n" for i in items),
        },
        reference=price,
        verifier=VerifierSpec(kind="exact", params={"answer": price}),
        split=split_of(key),
        metadata={"family": "agent:lookup", "key": key},
    )
    expert = (
        ("bash", {"command": f"grep {asked} orders.csv"}),
        ("bash", {"command": f"grep {item} prices.csv"}),
        ("submit", {"answer": price}),
    )
    return Instance(key, "lookup", task, expert)


# --- config ---------------------------------------------------------------------------------------------

NAMES = ("billing", "catalog", "search", "ledger", "gateway", "metrics", "mailer", "auth")
LEVELS = ("debug", "info", "warning", "error")
MISSPELT = {"port": "prot", "workers": "wokers", "log_level": "loglevel", "name": "nmae"}
_CONFIG_PROMPT = "app.py does not start. Find out why, fix settings.ini, then submit."
# The service's own rules; app.py and the hidden check share this text, so they can never disagree. The
# check carries its own copy of the manifest.
_RULES = """import configparser
import difflib
import json
import sys

REQUIRED = @REQUIRED@


def problems(path):
    cp = configparser.ConfigParser()
    try:
        cp.read_string(open(path, encoding="utf-8").read())
    except (OSError, configparser.Error) as e:
        return [f"cannot read {path}: {e}"]
    if not cp.has_section("service"):
        return [f"{path} has no [service] section"]
    found = dict(cp["service"])
    out = []
    for key in found:
        if key not in REQUIRED:
            near = difflib.get_close_matches(key, list(REQUIRED), n=1, cutoff=0.6)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            out.append(f"unknown setting '{key}'{hint}")
    for key, value in REQUIRED.items():
        if key not in found:
            out.append(f"setting '{key}' is missing")
        elif found[key] != value:
            out.append(f"{key} = {found[key]} is invalid; {key} must be {value}")
    return out
"""
_APP = (
    _RULES.replace("@REQUIRED@", 'json.load(open("manifest.json", encoding="utf-8"))')
    + """

bad = problems("settings.ini")
if bad:
    print("error: " + bad[0], file=sys.stderr)
    sys.exit(1)
print(f"{REQUIRED['name']} started on port {REQUIRED['port']} with {REQUIRED['workers']} workers")
"""
)
_CHECK = (
    _RULES
    + """
sys.exit(1 if problems("settings.ini") else 0)
"""
)


def _ini(settings: dict[str, str]) -> str:
    return "[service]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())


def _config(rng: random.Random) -> Instance | None:
    good = {
        "name": rng.choice(NAMES),
        "port": str(rng.randrange(8000, 9000, 10)),
        "workers": str(rng.randint(2, 9)),
        "log_level": rng.choice(LEVELS),
    }
    key_name = rng.choice(list(good))
    broken = dict(good)
    if rng.random() < 0.3:
        wrong = MISSPELT[key_name]
        broken = {(wrong if k == key_name else k): v for k, v in good.items()}
        old, new = f"{wrong} =", f"{key_name} ="
    else:
        value = good[key_name]
        pool: dict[str, Callable[[], str]] = {
            "name": lambda: rng.choice([n for n in NAMES if n != value]),
            "port": lambda: str(rng.choice([p for p in range(8000, 9000, 10) if str(p) != value])),
            "workers": lambda: str(rng.choice([w for w in range(1, 10) if str(w) != value])),
            "log_level": lambda: rng.choice([lv for lv in LEVELS if lv != value]),
        }
        broken[key_name] = pool[key_name]()
        old, new = f"{key_name} = {broken[key_name]}", f"{key_name} = {value}"
    required = json.dumps(good, indent=1) + "\n"
    key = "config:" + json.dumps([good, broken], sort_keys=True)
    task = Task(
        domain="ops",
        prompt=_CONFIG_PROMPT,
        files={"app.py": _APP, "manifest.json": required, "settings.ini": _ini(broken)},
        hidden_checks={"check_settings.py": _CHECK.replace("@REQUIRED@", f"json.loads({required!r})")},
        reference=_ini(good),
        verifier=VerifierSpec(kind="check_program", params={"solution_path": "settings.ini"}),
        split=split_of(key),
        metadata={"family": "agent:config", "key": key},
    )
    expert: tuple[tuple[str, dict[str, str]], ...] = (
        ("bash", {"command": "python3 app.py"}),
        ("edit_file", {"path": "settings.ini", "old": old, "new": new}),
        ("bash", {"command": "python3 app.py"}),
        ("submit", {}),
    )
    return Instance(key, "config", task, expert)


_DRAW: dict[Family, Callable[[random.Random], Instance | None]] = {
    "repair": _repair,
    "lookup": _lookup,
    "config": _config,
}


def agent_instances(
    n: int, seed: int, split: Split, families: tuple[Family, ...] = FAMILIES
) -> list[Instance]:
    """`n` distinct instances of `split`, the families in turn; deterministic in its arguments."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    unknown = [f for f in families if f not in _DRAW]
    if unknown or not families:
        raise ValueError(f"unknown agent families {unknown}; known: {', '.join(FAMILIES)}")
    rng = random.Random(f"agent:{seed}:{split}:{','.join(families)}")
    out: dict[str, Instance] = {}
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise ValueError(f"could not draw {n} distinct {split} agent instances")
        inst = _DRAW[families[len(out) % len(families)]](rng)
        if inst is not None and inst.task.split == split and inst.key not in out:
            out[inst.key] = inst
    return list(out.values())


def parse_families(arg: str) -> tuple[Family, ...]:
    """'' -> every family; 'repair,lookup' -> those."""
    if not arg:
        return FAMILIES
    names = tuple(a.strip() for a in arg.split(",") if a.strip())
    bad = [a for a in names if a not in FAMILIES]
    if bad:
        raise ValueError(f"unknown agent families {bad}; known: {', '.join(FAMILIES)}")
    return names  # type: ignore[return-value]


def agent_tasks(n: int, seed: int, split: Split, families: str = "") -> list[Task]:
    return [inst.task for inst in agent_instances(n, seed, split, parse_families(families))]


def expert_actions(inst: Instance) -> list[tuple[str, dict[str, Any]]]:
    return [(name, dict(args)) for name, args in inst.expert]


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return agent_tasks(request.n, request.seed, request.split, request.arg)
