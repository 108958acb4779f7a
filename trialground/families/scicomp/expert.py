"""The `scicomp` family's scripted expert: reads the constants and units from the prompt and writes its
own pure-Python method (composite Simpson, bisection, classic RK4, unit factors), never the reference."""

from __future__ import annotations

import re

from trialground.families.scicomp.source import ENERGY, FORCE, LENGTH, MASS, PRESSURE, SPEED, TIME, G
from trialground.tasks.model import Task

_NUM = r"(-?\d+(?:\.\d+)?)"


def _integral(m: re.Match[str]) -> str:
    c2, c1, c0, k = m.groups()
    return (
        "import math\n\n\ndef f(a, b):\n    n = 20000\n    h = (b - a) / n\n"
        f"    g = lambda x: ({c2} * x * x + {c1} * x + {c0}) * math.exp(-{k} * x)\n"
        "    s = g(a) + g(b) + sum((4 if i % 2 else 2) * g(a + i * h) for i in range(1, n))\n"
        "    return float(s * h / 3)\n"
    )


def _root(m: re.Match[str]) -> str:
    return (
        "def f(c):\n    lo, hi = -100.0, 100.0\n    for _ in range(200):\n        mid = (lo + hi) / 2\n"
        f"        if mid**3 + {m.group(1)} * mid - c < 0:\n"
        "            lo = mid\n        else:\n            hi = mid\n"
        "    return float((lo + hi) / 2)\n"
    )


def _ode(m: re.Match[str]) -> str:
    k, s, w, y0 = m.groups()
    return (
        "import math\n\n\ndef f(T):\n    n = 8000\n    h, t, y = T / n, 0.0, float(" + y0 + ")\n"
        f"    d = lambda t, y: -{k} * y + {s} * math.sin({w} * t)\n"
        "    for _ in range(n):\n        a = d(t, y)\n        b = d(t + h / 2, y + h * a / 2)\n"
        "        c = d(t + h / 2, y + h * b / 2)\n        e = d(t + h, y + h * c)\n"
        "        y += h * (a + 2 * b + 2 * c + e) / 6\n        t += h\n    return float(y)\n"
    )


def _units(prompt: str) -> str | None:
    m = re.search(
        r"kinetic energy in (\S+) of a body of mass `mass` in (\S+) moving at `speed` in (\S+) ", prompt
    )
    if m:
        e, mass, v = ENERGY[m.group(1)], MASS[m.group(2)], SPEED[m.group(3)]
        return f"def f(mass, speed):\n    return float(0.5 * mass * {mass} * (speed * {v}) ** 2 / {e})\n"
    m = re.search(r"speed in (\S+) at which .* falling `height` in (\S+),", prompt)
    if m:
        v, h = SPEED[m.group(1)], LENGTH[m.group(2)]
        return f"def f(height):\n    return float((2 * {G} * height * {h}) ** 0.5 / {v})\n"
    m = re.search(
        r"pressure in (\S+) of a force `force` in (\S+) spread evenly over `area` in (\S+) ", prompt
    )
    if m:
        from trialground.families.scicomp.source import AREA

        p, f, a = PRESSURE[m.group(1)], FORCE[m.group(2)], AREA[m.group(3)]
        return f"def f(force, area):\n    return float(force * {f} / (area * {a}) / {p})\n"
    m = re.search(
        r"momentum in kg\*m/s of a body of mass `mass` in (\S+) moving at `speed` in (\S+) ", prompt
    )
    if m:
        mass, v = MASS[m.group(1)], SPEED[m.group(2)]
        return f"def f(mass, speed):\n    return float(mass * {mass} * speed * {v})\n"
    return None


def solve(task: Task) -> str | None:
    """The expert's solution.py for `task`, or None when it does not recognise the problem."""
    p = task.prompt
    m = re.search(rf"integral from a to b of \({_NUM}\*x\^2 \+ {_NUM}\*x \+ {_NUM}\) \* exp\(-{_NUM}\*x\)", p)
    if m:
        return _integral(m)
    m = re.search(rf"root x of x\^3 \+ {_NUM}\*x - c", p)
    if m:
        return _root(m)
    m = re.search(rf"y'\(t\) = -{_NUM}\*y \+ {_NUM}\*sin\({_NUM}\*t\) and y\(0\) = {_NUM}", p)
    if m:
        return _ode(m)
    m = re.search(rf"half-life of {_NUM} (\w+) after `elapsed` (\w+)", p)
    if m:
        half, hu, tu = float(m.group(1)), TIME[m.group(2)], TIME[m.group(3)]
        return (
            f"def f(amount, elapsed):\n    return float(amount * 0.5 ** (elapsed * {tu} / {hu} / {half}))\n"
        )
    return _units(p)
