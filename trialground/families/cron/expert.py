"""The `cron` family's scripted expert: reads the moment, the window and the question from the prompt and
writes its own program (minute by minute over the window, a day skipped at once when it cannot match)."""

from __future__ import annotations

from trialground.families.experts import by_rules
from trialground.tasks.model import Task

_COMMON = """import sys
from datetime import datetime, timedelta

LIMITS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def values(spec, lo, hi):
    got = set()
    for item in spec.split(","):
        rng, step = (item.split("/") + ["1"])[:2]
        if rng == "*":
            a, b = lo, hi
        else:
            a, _, b = rng.partition("-")
            a, b = int(a), int(b or a)
        got |= set(range(a, b + 1, int(step)))
    return got


jobs = []
for line in open(sys.argv[1]):
    words = line.split("#")[0].split()
    if words:
        sets = [values(w, *LIMITS[i]) for i, w in enumerate(words[:5])]
        sets[4] = {7 if d == 0 else d for d in sets[4]}
        jobs.append((words[5], sets, words[2] != "*" and words[4] != "*"))


def day_ok(job, t):
    _, s, either = job
    if t.month not in s[3]:
        return False
    a, b = t.day in s[2], t.isoweekday() in s[4]
    return a or b if either else a and b


def runs(job, t):
    return day_ok(job, t) and t.hour in job[1][1] and t.minute in job[1][0]


def between(job, a, b):
    t = a
    while t < b:
        if not day_ok(job, t):
            t = (t + timedelta(days=1)).replace(hour=0, minute=0)
            continue
        if runs(job, t):
            yield t
        t += timedelta(minutes=1)


def show(t):
    return t.strftime("%Y-%m-%d %H:%M")


"""
_BODIES = (
    (r"the first minute strictly after (\S+ \S+) at which",
     "start = datetime.strptime({0!r}, '%Y-%m-%d %H:%M') + timedelta(minutes=1)\n"
     "for job in jobs:\n    print(job[0], show(next(between(job, start, start + timedelta(days=900)))))\n"),
    (r"how many times it fires from (\S+ \S+) \(included\) to (\S+ \S+) \(excluded\)",
     "a, b = (datetime.strptime(x, '%Y-%m-%d %H:%M') for x in ({0!r}, {1!r}))\n"
     "for job in jobs:\n    print(job[0], sum(1 for _ in between(job, a, b)))\n"),
    (r"print the first (\d+) firings .*? from (\S+ \S+) \(included\) to (\S+ \S+) \(excluded\)",
     "a, b = (datetime.strptime(x, '%Y-%m-%d %H:%M') for x in ({1!r}, {2!r}))\n"
     "ev = sorted((t, i) for i, job in enumerate(jobs) for t in between(job, a, b))\n"
     "for t, i in ev[:{0}]:\n    print(show(t), jobs[i][0])\n"),
    (r"the minute from (\S+ \S+) \(included\) to (\S+ \S+) \(excluded\) at which the most",
     "a, b = (datetime.strptime(x, '%Y-%m-%d %H:%M') for x in ({0!r}, {1!r}))\n"
     "tally = {{}}\nfor job in jobs:\n    for t in between(job, a, b):\n"
     "        tally[t] = tally.get(t, 0) + 1\n"
     "top = max(tally.values())\nprint(show(min(t for t in tally if tally[t] == top)), top)\n"),
)  # fmt: skip


def solve(task: Task) -> str | None:
    """The expert's cron.py for `task`, or None when it does not recognise the question."""
    return by_rules(task.prompt, _BODIES, head=_COMMON)
