"""The `stats` family's scripted expert: reads the statistic and the group names from the prompt and writes
its own pure-Python analysis (sums of squares in one pass, U from rank sums, chi-square as sum O^2/E - n),
never the reference (which uses scipy)."""

from __future__ import annotations

import re

from trialground.tasks.model import Task

_READ = """import csv
import math
import sys

rows = list(csv.DictReader(open(sys.argv[1], newline="")))
"""
_GROUPS = """a = [float(r["value"]) for r in rows if r["group"] == {0!r}]
b = [float(r["value"]) for r in rows if r["group"] == {1!r}]
n1, n2 = len(a), len(b)
m1, m2 = sum(a) / n1, sum(b) / n2
v1 = (sum(v * v for v in a) - n1 * m1 * m1) / (n1 - 1)
v2 = (sum(v * v for v in b) - n2 * m2 * m2) / (n2 - 1)
"""
_PAIRS = """x = [float(r["x"]) for r in rows]
y = [float(r["y"]) for r in rows]


def corr(p, q):
    n = len(p)
    sp, sq = sum(p), sum(q)
    spq = sum(u * v for u, v in zip(p, q)) - sp * sq / n
    return spq / math.sqrt((sum(u * u for u in p) - sp * sp / n) * (sum(v * v for v in q) - sq * sq / n))


def ranked(p):
    s = sorted(p)
    first = {{}}
    for i, v in enumerate(s):
        first.setdefault(v, i)
    return [first[v] + (s.count(v) + 1) / 2 for v in p]
"""
_RULES: tuple[tuple[str, str], ...] = (
    (r"Welch's t statistic of group `(\w+)` against group `(\w+)`",
     _GROUPS + "print((m1 - m2) / math.sqrt(v1 / n1 + v2 / n2))\n"),
    (r"Cohen's d of group `(\w+)` against group `(\w+)`",
     _GROUPS + "print((m1 - m2) / math.sqrt(((n1 - 1) * v1 + (n2 - 1) * v2) / (n1 + n2 - 2)))\n"),
    (r"Mann-Whitney U statistic of group `(\w+)` against group `(\w+)`",
     _GROUPS + "pooled = sorted(a + b)\nrank = {{}}\nfor v in set(pooled):\n"
     "    lo = pooled.index(v)\n    rank[v] = lo + (pooled.count(v) + 1) / 2\n"
     "print(sum(rank[v] for v in a) - n1 * (n1 + 1) / 2)\n"),
    (r"Pearson's correlation coefficient r", _PAIRS + "print(corr(x, y))\n"),
    (r"least-squares line of y on x", _PAIRS + "n = len(x)\nsx, sy = sum(x), sum(y)\n"
     "print((sum(u * v for u, v in zip(x, y)) - sx * sy / n) / (sum(u * u for u in x) - sx * sx / n))\n"),
    (r"Spearman's rank correlation", _PAIRS + "print(corr(ranked(x), ranked(y)))\n"),
    (r"chi-square statistic of independence",
     "from collections import Counter\n\ncells = Counter((r['region'], r['outcome']) for r in rows)\n"
     "left = Counter(r['region'] for r in rows)\nright = Counter(r['outcome'] for r in rows)\nn = len(rows)\n"
     "print(sum(cells[(p, q)] ** 2 * n / (left[p] * right[q]) for p in left for q in right) - n)\n"),
)  # fmt: skip


def solve(task: Task) -> str | None:
    """The expert's analysis.py for `task`, or None when it does not recognise the statistic."""
    for pattern, body in _RULES:
        m = re.search(pattern, task.prompt)
        if m:
            return _READ + body.format(*m.groups())
    return None
