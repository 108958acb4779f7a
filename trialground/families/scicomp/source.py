"""The `scicomp` family: numerical methods and physical units, checked by tolerance and invariants.

Each task asks for one function `f` of plain numbers, for a problem whose constants are random per task:

- `integral`: the integral of `(c2 x^2 + c1 x + c0) exp(-k x)` from `a` to `b`;
- `root`: the root of `x^3 + p x - c` (monotone, so unique) in `[lo, hi]`, checked by the residual;
- `ode`: `y(T)` for `y' = -k y + s sin(w t)`, `y(0) = y0`;
- `units`: a physical quantity (kinetic energy, momentum, fall speed, pressure) from inputs in stated
  units, answered in another stated unit;
- `decay`: the amount left of a sample after a time, from its half-life, in mixed time units.

The hidden check (`check_numeric.py`) calls `f` in a child interpreter that has site-packages (the
reference uses numpy and scipy) on six inputs derived from the instance key (never shown), and compares
each answer, a finite Python float, with the value the generator computed independently (Simpson's rule,
RK4, exact formulas) within a relative 1e-6, or checks an invariant (`|g(root)|` and the interval).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "solution.py"
_CHECK = check_source(Path(__file__).parent, "check_numeric.py")
G = 9.80665
MASS = {"g": 1e-3, "kg": 1.0, "lb": 0.45359237}
LENGTH = {"m": 1.0, "cm": 0.01, "ft": 0.3048}
SPEED = {"m/s": 1.0, "km/h": 1 / 3.6, "mph": 0.44704}
ENERGY = {"J": 1.0, "kJ": 1e3, "cal": 4.184}
TIME = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
PRESSURE = {"Pa": 1.0, "kPa": 1e3, "bar": 1e5, "psi": 6894.757293168}
AREA = {"m^2": 1.0, "cm^2": 1e-4}
FORCE = {"N": 1.0, "kN": 1e3, "lbf": 4.4482216152605}
TOL = "Your answer must be within a relative error of 1e-6 (absolute 1e-9)."
FLOAT = "Return a Python float (convert numpy results with float()); numpy and scipy are available."


@dataclass(frozen=True)
class Problem:
    key: str
    text: str  # what f(...) must compute
    signature: str  # f(a, b)
    reference: str  # the reference solution module
    truth: Callable[..., float]  # the generator's own computation
    inputs: Callable[[random.Random], tuple[float, ...]]
    invariant: str = ""  # a check on `got` instead of closeness (uses the call's arguments)


def _simpson(fn: Callable[[float], float], a: float, b: float, n: int = 4000) -> float:
    h = (b - a) / n
    total = fn(a) + fn(b) + sum((4 if i % 2 else 2) * fn(a + i * h) for i in range(1, n))
    return total * h / 3


def _bisect(fn: Callable[[float], float], lo: float, hi: float) -> float:
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fn(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def _rk4(k: float, s: float, w: float, y0: float, t_end: float, steps: int = 4000) -> float:
    def d(t: float, y: float) -> float:
        return -k * y + s * math.sin(w * t)

    h, t, y = t_end / steps, 0.0, y0
    for _ in range(steps):
        k1 = d(t, y)
        k2 = d(t + h / 2, y + h * k1 / 2)
        k3 = d(t + h / 2, y + h * k2 / 2)
        k4 = d(t + h, y + h * k3)
        y += h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        t += h
    return y


def integral(rng: random.Random) -> Problem:
    c2, c1, c0 = (rng.randint(-5, 5) for _ in range(3))
    k = rng.choice((0.5, 1.0, 1.5, 2.0, 0.25))
    poly = f"{c2} * x**2 + {c1} * x + {c0}"
    ref = (
        "import numpy as np\nfrom scipy.integrate import quad\n\n\ndef f(a, b):\n"
        f"    value, _ = quad(lambda x: ({poly}) * np.exp(-{k} * x), a, b, epsabs=1e-12, epsrel=1e-12)\n"
        "    return float(value)\n"
    )
    return Problem(
        f"integral:{c2}:{c1}:{c0}:{k}",
        f"the integral from a to b of ({c2}*x^2 + {c1}*x + {c0}) * exp(-{k}*x) dx",
        "f(a, b)",
        ref,
        lambda a, b: _simpson(lambda x: (c2 * x * x + c1 * x + c0) * math.exp(-k * x), a, b),
        lambda r: (round(r.uniform(-2, 1), 3), round(r.uniform(1.5, 6), 3)),
    )


def root(rng: random.Random) -> Problem:
    p = rng.randint(1, 9)
    ref = (
        "from scipy.optimize import brentq\n\n\ndef f(c):\n"
        f"    return float(brentq(lambda x: x**3 + {p} * x - c, -100.0, 100.0, xtol=1e-14))\n"
    )
    return Problem(
        f"root:{p}",
        f"the real root x of x^3 + {p}*x - c = 0 (it is unique); c is between -500 and 500",
        "f(c)",
        ref,
        lambda c: _bisect(lambda x: x**3 + p * x - c, -100.0, 100.0),
        lambda r: (round(r.uniform(-500, 500), 2),),
        invariant=f"abs(got**3 + {p} * got - args[0]) <= 1e-7 * max(1.0, abs(args[0])) "
        "and -100 <= got <= 100",
    )


def ode(rng: random.Random) -> Problem:
    k, s, w, y0 = (
        rng.choice((0.3, 0.7, 1.2, 2.0)),
        rng.randint(1, 5),
        rng.choice((1.0, 2.0, 3.0)),
        rng.randint(-3, 6),
    )
    ref = (
        "import numpy as np\nfrom scipy.integrate import solve_ivp\n\n\ndef f(T):\n"
        f"    sol = solve_ivp(lambda t, y: -{k} * y + {s} * np.sin({w} * t), (0.0, T), [{float(y0)}],\n"
        "                    rtol=1e-11, atol=1e-12)\n"
        "    return float(sol.y[0][-1])\n"
    )
    return Problem(
        f"ode:{k}:{s}:{w}:{y0}",
        f"y(T) where y'(t) = -{k}*y + {s}*sin({w}*t) and y(0) = {y0}, for 0 < T <= 8",
        "f(T)",
        ref,
        lambda t: _rk4(k, s, w, float(y0), t),
        lambda r: (round(r.uniform(0.5, 8), 3),),
    )


def units(rng: random.Random) -> Problem:
    kind = rng.randrange(4)
    if kind == 0:
        mu, vu, eu = rng.choice(list(MASS)), rng.choice(list(SPEED)), rng.choice(list(ENERGY))
        m, v, e = MASS[mu], SPEED[vu], ENERGY[eu]
        return Problem(
            f"units:ke:{mu}:{vu}:{eu}",
            f"the kinetic energy in {eu} of a body of mass `mass` in {mu} moving at `speed` in {vu} "
            "(1 cal = 4.184 J, 1 lb = 0.45359237 kg, 1 mph = 0.44704 m/s)",
            "f(mass, speed)",
            f"def f(mass, speed):\n    return float(0.5 * mass * {m!r} * (speed * {v!r}) ** 2 / {e!r})\n",
            lambda a, b: 0.5 * a * m * (b * v) ** 2 / e,
            lambda r: (round(r.uniform(0.1, 900), 3), round(r.uniform(0.1, 120), 3)),
        )
    if kind == 1:
        hu, vu = rng.choice(list(LENGTH)), rng.choice(list(SPEED))
        h, v = LENGTH[hu], SPEED[vu]
        return Problem(
            f"units:fall:{hu}:{vu}",
            f"the speed in {vu} at which a body dropped from rest hits the ground after falling `height` "
            f"in {hu}, without air resistance, g = {G} m/s^2 (1 ft = 0.3048 m, 1 mph = 0.44704 m/s)",
            "f(height)",
            "import math\n\n\ndef f(height):\n"
            f"    return float(math.sqrt(2 * {G!r} * height * {h!r}) / {v!r})\n",
            lambda a: math.sqrt(2 * G * a * h) / v,
            lambda r: (round(r.uniform(0.1, 500), 3),),
        )
    if kind == 2:
        fu, au, pu = rng.choice(list(FORCE)), rng.choice(list(AREA)), rng.choice(list(PRESSURE))
        f, a, p = FORCE[fu], AREA[au], PRESSURE[pu]
        return Problem(
            f"units:pressure:{fu}:{au}:{pu}",
            f"the pressure in {pu} of a force `force` in {fu} spread evenly over `area` in {au} "
            "(1 lbf = 4.4482216152605 N, 1 psi = 6894.757293168 Pa, 1 bar = 100000 Pa)",
            "f(force, area)",
            f"def f(force, area):\n    return float(force * {f!r} / (area * {a!r}) / {p!r})\n",
            lambda x, y: x * f / (y * a) / p,
            lambda r: (round(r.uniform(1, 5000), 3), round(r.uniform(0.5, 400), 3)),
        )
    mu, vu = rng.choice(list(MASS)), rng.choice(list(SPEED))
    m, v = MASS[mu], SPEED[vu]
    return Problem(
        f"units:momentum:{mu}:{vu}",
        f"the momentum in kg*m/s of a body of mass `mass` in {mu} moving at `speed` in {vu} "
        "(1 lb = 0.45359237 kg, 1 mph = 0.44704 m/s)",
        "f(mass, speed)",
        f"def f(mass, speed):\n    return float(mass * {m!r} * speed * {v!r})\n",
        lambda a, b: a * m * b * v,
        lambda r: (round(r.uniform(0.1, 900), 3), round(r.uniform(0.1, 120), 3)),
    )


def decay(rng: random.Random) -> Problem:
    hu, tu = rng.choice(list(TIME)), rng.choice(list(TIME))
    half = rng.choice((1.5, 2.0, 3.7, 5.0, 8.0, 12.5, 30.0))
    ratio = TIME[tu] / TIME[hu]
    ref = (
        "import numpy as np\n\n\ndef f(amount, elapsed):\n"
        f"    return float(amount * np.exp(-np.log(2) * elapsed * {ratio!r} / {half!r}))\n"
    )
    return Problem(
        f"decay:{half}:{hu}:{tu}",
        f"the amount left of a sample of `amount` grams with a half-life of {half} {hu} after `elapsed` {tu}",
        "f(amount, elapsed)",
        ref,
        lambda a, t: a * 0.5 ** (t * ratio / half),
        lambda r: (round(r.uniform(1, 1000), 3), round(r.uniform(0, 5 * half / ratio), 4)),
    )


TEMPLATES = (integral, root, ode, units, decay)


def make_task(problem: Problem, split: Split) -> Task:
    rng = random.Random(f"scicomp-inputs:{problem.key}")
    cases = []
    for _ in range(6):
        args = problem.inputs(rng)
        cases.append({"args": list(args), "want": None if problem.invariant else problem.truth(*args)})
    spec = {"solution": SOLUTION, "cases": cases, "invariant": problem.invariant, "rel_tol": 1e-6,
            "abs_tol": 1e-9, "timeout_s": 40}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    examples = []
    for _ in range(2):  # visible examples: other inputs than the check's
        args = problem.inputs(rng)
        examples.append(f"f({', '.join(repr(a) for a in args)}) = {problem.truth(*args):.10g}")
    prompt = (
        f"Write {problem.signature} in {SOLUTION} returning {problem.text}. For example "
        f"{' and '.join(examples)}. {TOL} {FLOAT}"
    )
    return Task(
        domain="scicomp",
        prompt=prompt,
        files={SOLUTION: f"def {problem.signature}:\n    raise NotImplementedError\n"},
        hidden_checks={"check_numeric.py": check},
        reference=problem.reference,
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 60}
        ),
        split=split,
        metadata={"family": "scicomp", "template": problem.key.split(":")[0], "key": problem.key},
    )


def scicomp_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance's split is a hash of its key."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        problem = rng.choice(TEMPLATES)(rng)
        return problem.key, lambda: make_task(problem, split)

    return draw_tasks("scicomp", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return scicomp_tasks(request.n, request.seed, request.split)
