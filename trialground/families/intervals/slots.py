"""The reference program of the `intervals` family: this file, with its QUESTION line filled in, is a
task's reference `rooms.py`, and the generator calls `answer` to compute the expected output.

Usage: python3 rooms.py bookings.csv
"""

import csv
import io
import sys

QUESTION = {"kind": "busy"}  # filled in
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri")
OPEN, CLOSE = 8 * 60, 18 * 60


def minutes(text: str) -> int:
    h, m = text.split(":")
    return int(h) * 60 + int(m)


def clock(t: int) -> str:
    return f"{t // 60:02d}:{t % 60:02d}"


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def gaps(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The free spans of opening hours around `spans`."""
    out, t = [], OPEN
    for a, b in merged(spans):
        if a > t:
            out.append((t, min(a, CLOSE)))
        t = max(t, b)
    if t < CLOSE:
        out.append((t, CLOSE))
    return [(a, b) for a, b in out if a < b]


def answer(question: dict, text: str) -> str:
    rows = list(csv.DictReader(io.StringIO(text)))
    book = [(r["id"], r["room"], r["day"], minutes(r["start"]), minutes(r["end"])) for r in rows]
    rooms = sorted({b[1] for b in book})
    kind = question["kind"]
    if kind == "busy":
        lines = []
        for room in rooms:
            spans = {d: [(s, e) for _, r, dd, s, e in book if r == room and dd == d] for d in DAYS}
            total = sum(b - a for d in DAYS for a, b in merged(spans[d]))
            lines.append(f"{room} {total}\n")
        return "".join(lines)
    if kind == "free":
        room, need = question["room"], question["length"]
        lines = []
        for d in DAYS:
            for a, b in gaps([(s, e) for _, r, dd, s, e in book if r == room and dd == d]):
                if b - a >= need:
                    lines.append(f"{d} {clock(a)}-{clock(b)}\n")
        return "".join(lines)
    if kind == "conflicts":
        pairs = []
        for i, x in enumerate(book):
            for y in book[i + 1 :]:
                if x[1] == y[1] and x[2] == y[2] and x[3] < y[4] and y[3] < x[4]:
                    pairs.append(tuple(sorted((int(x[0]), int(y[0])))))
        return "".join(f"{a} {b}\n" for a, b in sorted(pairs))
    if kind == "peak":
        best = (0, 0, 0)  # (count, -day index, -minute): the earliest maximum
        for di, d in enumerate(DAYS):
            starts = [(s, 1) for _, _, dd, s, _ in book if dd == d]
            events = sorted(starts + [(e, -1) for _, _, dd, _, e in book if dd == d])  # ends first on ties
            now = 0
            for t, step in events:
                now += step
                if (now, -di, -t) > best:
                    best = (now, -di, -t)
        return f"{DAYS[-best[1]]} {clock(-best[2])} {best[0]}\n"
    if kind == "first_fit":
        need = question["length"]
        options = []
        for di, d in enumerate(DAYS):
            for room in rooms:
                for a, b in gaps([(s, e) for _, r, dd, s, e in book if r == room and dd == d]):
                    if b - a >= need:
                        options.append((di, a, room))
                        break
        di, a, room = min(options)
        return f"{DAYS[di]} {clock(a)} {room}\n"
    raise ValueError(f"unknown question {kind!r}")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(answer(QUESTION, f.read()))


if __name__ == "__main__":
    main()
