"""The reference program of the `cron` family: this file, with its QUESTION line filled in, is a task's
reference `cron.py`, and the generator calls `answer` to compute the expected output.

Usage: python3 cron.py schedule.txt
"""

import datetime
import sys

QUESTION = {"kind": "next", "start": "2026-03-01 12:00"}  # filled in
RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
FMT = "%Y-%m-%d %H:%M"
DAY = datetime.timedelta(days=1)


def field(text: str, lo: int, hi: int) -> set[int]:
    """`*`, `N`, `A-B`, each optionally `/STEP`, joined by commas."""
    out: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            a, b = lo, hi
        elif "-" in span:
            a, b = (int(x) for x in span.split("-"))
        else:
            a = b = int(span)
        out.update(range(a, b + 1, int(step) if step else 1))
    return out


def parse(text: str) -> list[tuple[str, list[set[int]], bool, bool]]:
    """(name, [minutes, hours, days, months, weekdays (0 = Sunday)], day restricted, weekday restricted)."""
    jobs = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        sets = [field(f, lo, hi) for f, (lo, hi) in zip(line[:5], RANGES, strict=True)]
        sets[4] = {d % 7 for d in sets[4]}
        jobs.append((line[5], sets, line[2] != "*", line[4] != "*"))
    return jobs


def day_matches(sets: list[set[int]], dom_r: bool, dow_r: bool, day: datetime.date) -> bool:
    if day.month not in sets[3]:
        return False
    dom, dow = day.day in sets[2], day.isoweekday() % 7 in sets[4]
    return (dom or dow) if dom_r and dow_r else (dom and dow)


def fires(job: tuple[str, list[set[int]], bool, bool], start: datetime.datetime, end: datetime.datetime):
    """Every firing time of `job` in [start, end), in order."""
    _, sets, dom_r, dow_r = job
    day = start.date()
    while day <= end.date():
        if day_matches(sets, dom_r, dow_r, day):
            for h in sorted(sets[1]):
                for m in sorted(sets[0]):
                    t = datetime.datetime(day.year, day.month, day.day, h, m)
                    if start <= t < end:
                        yield t
        day += DAY


def answer(question: dict, text: str) -> str:
    jobs = parse(text)
    start = datetime.datetime.strptime(question["start"], FMT)
    kind = question["kind"]
    if kind == "next":
        after = start + datetime.timedelta(minutes=1)
        far = start + 800 * DAY
        return "".join(f"{j[0]} {next(fires(j, after, far)).strftime(FMT)}\n" for j in jobs)
    end = datetime.datetime.strptime(question.get("end", question["start"]), FMT)
    if kind == "count":
        return "".join(f"{j[0]} {sum(1 for _ in fires(j, start, end))}\n" for j in jobs)
    events = sorted((t, i) for i, j in enumerate(jobs) for t in fires(j, start, end))
    if kind == "timeline":
        return "".join(f"{t.strftime(FMT)} {jobs[i][0]}\n" for t, i in events[: question["k"]])
    if kind == "busiest":
        counts: dict[datetime.datetime, int] = {}
        for t, _ in events:
            counts[t] = counts.get(t, 0) + 1
        best = min(counts, key=lambda t: (-counts[t], t))
        return f"{best.strftime(FMT)} {counts[best]}\n"
    raise ValueError(f"unknown question {kind!r}")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(answer(QUESTION, f.read()))


if __name__ == "__main__":
    main()
