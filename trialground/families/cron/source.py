"""The `cron` family: questions about a crontab, answered by a Python program that computes firing times.

`schedule.txt` holds 3-6 jobs in crontab syntax (`minute hour day-of-month month day-of-week NAME`, with
`*`, numbers, ranges, lists and steps; random per task). The prompt fixes a moment or a window of 1-3
days and asks one of four questions: each job's next firing time, how often each job fires in the window,
the first K firings of all jobs in the window in order, or the minute of the window when the most jobs
fire together. The agent writes `cron.py`, run as `python3 cron.py schedule.txt`; the hidden check (the
shared `check_files.py`) runs it on the workspace's schedule and on two hidden ones, and compares its
lines with what the reference (`schedule.py`, day by day over the sets each field names) prints.
"""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path

from trialground.families.cron.schedule import FMT, answer
from trialground.families.filetask import filled, program_task, question_tasks
from trialground.tasks.model import Split, Task
from trialground.tasks.sources import SourceRequest

SOLUTION = "cron.py"
_REFERENCE = (Path(__file__).parent / "schedule.py").read_text(encoding="utf-8")
JOBS = ("backup", "rotate-logs", "report", "sync", "cleanup", "digest", "billing", "reindex", "ping")
RULES = (
    "Each non-blank line of schedule.txt is `minute hour day-of-month month day-of-week NAME` (text after "
    "`#` is a comment). A field is `*`, a number, a range `A-B`, or a comma-separated list of those, each "
    "optionally followed by `/STEP` (every STEP-th value of the range, `*/STEP` over the whole range). "
    "Minutes 0-59, hours 0-23, days 1-31, months 1-12, weekdays 0-7 where 0 and 7 are Sunday. A job fires "
    "at a minute when minute, hour and month match and the day matches; when both day-of-month and "
    "day-of-week are restricted (neither is `*`), the day matches if EITHER matches, otherwise both must."
)


def cron_field(rng: random.Random, kind: str) -> str:
    choices = {
        "minute": ("*/5", "*/10", "*/15", "*/20", "*/30", "0", "15", "45", "0,30", "5-55/25", "7"),
        "hour": ("*", "*", "0", "3", "9", "12", "18", "8-17", "*/2", "*/6", "9,13,17", "22-23"),
        "dom": ("*", "*", "*", "*", "1", "15", "1,15", "10-12", "*/7"),
        "month": ("*", "*", "*", "*", "1-6", "*/2", "3,6,9,12"),
        "dow": ("*", "*", "*", "1-5", "0,6", "1", "5", "7", "2-4"),
    }[kind]
    return rng.choice(choices)


def schedule(rng: random.Random) -> str:
    names = rng.sample(JOBS, rng.randint(3, 6))
    lines = [" ".join(cron_field(rng, k) for k in ("minute", "hour", "dom", "month", "dow")) + f" {n}"
             for n in names]  # fmt: skip
    if rng.random() < 0.4:
        lines.insert(rng.randint(0, len(lines)), "# maintenance jobs")
    return "\n".join(lines) + "\n"


def question(rng: random.Random) -> tuple[dict[str, object], str]:
    kind = rng.choice(("next", "count", "timeline", "busiest"))
    start = datetime.datetime(2026, 1, 1) + datetime.timedelta(minutes=rng.randrange(2 * 365 * 1440))
    end = start + datetime.timedelta(days=rng.randint(1, 3))
    s, e = start.strftime(FMT), end.strftime(FMT)
    if kind == "next":
        return {"kind": kind, "start": s}, (
            f"for each job, in file order, print a line `NAME YYYY-MM-DD HH:MM`: the first minute strictly "
            f"after {s} at which it fires."
        )
    if kind == "count":
        return {"kind": kind, "start": s, "end": e}, (
            f"for each job, in file order, print a line `NAME N`: how many times it fires from {s} "
            f"(included) to {e} (excluded)."
        )
    if kind == "timeline":
        k = rng.randint(5, 15)
        return {"kind": kind, "start": s, "end": e, "k": k}, (
            f"print the first {k} firings (fewer if there are fewer) of all jobs from {s} (included) to {e} "
            "(excluded), one per line as `YYYY-MM-DD HH:MM NAME`, in time order; jobs firing at the same "
            "minute in file order."
        )
    return {"kind": kind, "start": s, "end": e}, (
        f"print `YYYY-MM-DD HH:MM N`: the minute from {s} (included) to {e} (excluded) at which the most "
        "jobs fire, and how many fire then (the earliest such minute on ties)."
    )


def make_task(q: dict[str, object], words: str, inputs: list[str], split: Split) -> Task:
    prompt = (
        f"{RULES}\n\nWrite {SOLUTION} so that `python3 {SOLUTION} schedule.txt` answers this about the jobs "
        f"in the file: {words}\n\nIt is also run on other schedules of the same kind, so compute the answer, "
        "do not write it down. Use the standard library only."
    )
    return program_task(
        domain="cron",
        prompt=prompt,
        solution=SOLUTION,
        starter="import sys\n\n# python3 cron.py schedule.txt\n",
        inputs=[{"schedule.txt": text} for text in inputs],
        expected=lambda files: answer(q, files["schedule.txt"]),
        labels=("workspace schedule.txt", "hidden schedule"),
        compare="text",
        args=("schedule.txt",),
        reference=filled(_REFERENCE, "QUESTION", q),
        split=split,
        metadata={"question": str(q["kind"]), "key": json.dumps(q, sort_keys=True)},
    )


def cron_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its question and schedules.
    Schedules that would make an empty answer (nothing fires in the window) are drawn again."""
    return question_tasks("cron", n, seed, split, question=question, make_input=schedule, make_task=make_task,
                          keep=lambda q, text: q["kind"] == "next" or _any_fires(q, text))  # fmt: skip


def _any_fires(q: dict[str, object], text: str) -> bool:
    return bool(answer({**q, "kind": "timeline", "k": 1}, text).strip())


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return cron_tasks(request.n, request.seed, request.split)
