"""The `intervals` family's scripted expert: recognises the question and writes its own program, which
marks every minute of the week on a grid (the reference merges and sweeps intervals instead)."""

from __future__ import annotations

from trialground.families.experts import by_rules
from trialground.tasks.model import Task

_COMMON = """import csv, sys

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri"]
rows = list(csv.DictReader(open(sys.argv[1])))


def mins(s):
    return int(s[:2]) * 60 + int(s[3:])


def hhmm(t):
    return "%02d:%02d" % (t // 60, t % 60)


rooms = sorted({r["room"] for r in rows})
grid = {}
for r in rows:
    for t in range(mins(r["start"]), mins(r["end"])):
        grid.setdefault((r["room"], r["day"]), set()).add(t)
    r["span"] = set(range(mins(r["start"]), mins(r["end"])))


def free_runs(room, day):
    taken = grid.get((room, day), set())
    runs, begin = [], None
    for t in range(480, 1081):
        if t < 1080 and t not in taken:
            begin = t if begin is None else begin
        elif begin is not None:
            runs.append((begin, t))
            begin = None
    return runs


"""
_BODIES = (
    (r"for each room that has bookings, in alphabetical order, print `ROOM MINUTES`",
     "for room in rooms:\n    print(room, sum(len(grid.get((room, d), ())) for d in DAYS))\n"),
    (r"every free slot of the room (\w+) lasting at least (\d+) minutes",
     "for d in DAYS:\n    for a, b in free_runs({0!r}, d):\n        if b - a >= {1}:\n"
     "            print(d, hhmm(a) + '-' + hhmm(b))\n"),
    (r"every pair of bookings of the same room on the same day that overlap",
     "found = set()\nfor x in rows:\n    for y in rows:\n"
     "        if x is not y and (x['room'], x['day']) == (y['room'], y['day']) and x['span'] & y['span']:\n"
     "            found.add(tuple(sorted((int(x['id']), int(y['id'])))))\n"
     "for a, b in sorted(found):\n    print(a, b)\n"),
    (r"the largest number N of bookings in progress at the same moment",
     "best = None\nfor d in DAYS:\n    for t in range(1440):\n"
     "        n = sum(1 for r in rows if r['day'] == d and t in r['span'])\n"
     "        if best is None or n > best[0]:\n            best = (n, d, t)\n"
     "print(best[1], hhmm(best[2]), best[0])\n"),
    (r"is free for at least the next (\d+) minutes",
     "def first():\n    for d in DAYS:\n        for t in range(480, 1080):\n            for room in rooms:\n"
     "                taken = grid.get((room, d), ())\n"
     "                if t + {0} <= 1080 and all(u not in taken for u in range(t, t + {0})):\n"
     "                    return d, t, room\n"
     "d, t, room = first()\nprint(d, hhmm(t), room)\n"),
)  # fmt: skip


def solve(task: Task) -> str | None:
    """The expert's rooms.py for `task`, or None when it does not recognise the question."""
    return by_rules(task.prompt, _BODIES, head=_COMMON)
