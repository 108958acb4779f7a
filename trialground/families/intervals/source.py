"""The `intervals` family: meeting-room bookings over a working week, and questions about time windows.

`bookings.csv` holds 12-30 bookings (id, room, day Mon-Fri, start, end as HH:MM, title; random per task,
some overlapping). The agent writes `rooms.py`, run as `python3 rooms.py bookings.csv`, that prints the
answer to one of five questions: each room's busy minutes (overlaps merged), a room's free slots of at least
L minutes within opening hours, the pairs of bookings that conflict, the earliest moment of the week with
the most meetings at once, and the earliest slot of L free minutes in any room. Intervals are half-open, so
a meeting ending at 10:00 does not overlap one starting then. The hidden check (the shared
`check_files.py`) runs the program on the workspace's file and two hidden ones and compares its lines with
the reference (`slots.py`, a merge of sorted intervals and a sweep over start and end events).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from trialground.families.filetask import filled, program_task, question_tasks
from trialground.families.intervals.slots import DAYS, answer
from trialground.tasks.model import Split, Task
from trialground.tasks.sources import SourceRequest

SOLUTION = "rooms.py"
_REFERENCE = (Path(__file__).parent / "slots.py").read_text(encoding="utf-8")
ROOMS = ("Atlas", "Borealis", "Cirrus", "Delta")
TITLES = ("standup", "review", "planning", "1:1", "interview", "retro", "demo", "sync")
RULES = (
    "Each row of bookings.csv (columns id,room,day,start,end,title) books a room on a weekday (Mon-Fri) "
    "from start to end (HH:MM, the same day). A booking occupies [start, end): one ending at 10:00 does not "
    "overlap one starting at 10:00. Rooms are open from 08:00 to 18:00."
)


def bookings(rng: random.Random) -> str:
    rows = ["id,room,day,start,end,title"]
    for i in rng.sample(range(1, 500), rng.randint(12, 30)):
        start = 8 * 60 + 15 * rng.randrange(36)
        end = min(18 * 60, start + 15 * rng.randint(1, 12))
        rows.append(f"{i},{rng.choice(ROOMS)},{rng.choice(DAYS)},{start // 60:02d}:{start % 60:02d},"
                    f"{end // 60:02d}:{end % 60:02d},{rng.choice(TITLES)}")  # fmt: skip
    return "\n".join(rows) + "\n"


def question(rng: random.Random) -> tuple[dict[str, object], str]:
    kind = rng.choice(("busy", "free", "conflicts", "peak", "first_fit"))
    if kind == "busy":
        return {"kind": kind}, (
            "for each room that has bookings, in alphabetical order, print `ROOM MINUTES`: the minutes of "
            "the week during which it is booked (overlapping bookings counted once)."
        )
    if kind == "free":
        room, length = rng.choice(ROOMS), rng.choice((30, 45, 60, 90, 120))
        return {"kind": kind, "room": room, "length": length}, (
            f"print every free slot of the room {room} lasting at least {length} minutes: a maximal time "
            f"within opening hours when it is not booked, one per line as `DAY HH:MM-HH:MM`, Mon to Fri, "
            "earliest first."
        )
    if kind == "conflicts":
        return {"kind": kind}, (
            "print every pair of bookings of the same room on the same day that overlap, one per line as "
            "`ID1 ID2` with the smaller id first, pairs in ascending order (by ID1, then ID2)."
        )
    if kind == "peak":
        return {"kind": kind}, (
            "print `DAY HH:MM N`: the largest number N of bookings in progress at the same moment (all "
            "rooms together) and the earliest moment of the week (Mon first) at which it is reached."
        )
    length = rng.choice((60, 90, 120, 180))
    return {"kind": kind, "length": length}, (
        f"print `DAY HH:MM ROOM`: the earliest moment of the week (Mon first) at which some room that has "
        f"bookings is free for at least the next {length} minutes within opening hours, and that room "
        "(alphabetically first on ties)."
    )


def make_task(q: dict[str, object], words: str, inputs: list[str], split: Split) -> Task:
    prompt = (
        f"{RULES}\n\nWrite {SOLUTION} so that `python3 {SOLUTION} bookings.csv` answers this: {words}\n\n"
        "It is also run on other bookings of the same kind, so compute the answer, do not write it down. "
        "Use the standard library only."
    )
    return program_task(
        domain="intervals",
        prompt=prompt,
        solution=SOLUTION,
        starter="import csv\nimport sys\n",
        inputs=[{"bookings.csv": text} for text in inputs],
        expected=lambda files: answer(q, files["bookings.csv"]),
        labels=("workspace bookings.csv", "hidden bookings"),
        compare="text",
        args=("bookings.csv",),
        reference=filled(_REFERENCE, "QUESTION", q),
        split=split,
        metadata={"question": str(q["kind"]), "key": json.dumps(q, sort_keys=True)},
    )


def intervals_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its question and bookings.
    Bookings that give an empty answer are drawn again."""
    return question_tasks("intervals", n, seed, split, question=question, make_input=bookings,
                          make_task=make_task, keep=_answered)  # fmt: skip


def _answered(q: dict[str, object], text: str) -> bool:
    try:
        return bool(answer(q, text).strip())
    except ValueError:  # no room has the free time asked for
        return False


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return intervals_tasks(request.n, request.seed, request.split)
