"""The `cleaning` family's scripted expert: reads the rules from the prompt and writes its own cleaner
(a different program from the reference: one pass with a dict of seen keys, dates parsed by regex)."""

from __future__ import annotations

import re

from trialground.tasks.model import Task

_PROGRAM = """import csv, re, sys

MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}


def day_of(text):
    m = re.fullmatch(r"(\\d{4})-(\\d{2})-(\\d{2})", text)
    if m:
        return int(m[1]), int(m[2]), int(m[3])
    m = re.fullmatch(r"(\\d{2})/(\\d{2})/(\\d{4})", text)
    if m:
        return int(m[3]), int(m[2]), int(m[1])
    m = re.fullmatch(r"([A-Za-z]{3}) (\\d{1,2}) (\\d{4})", text)
    if m:
        return int(m[3]), MONTHS[m[1].lower()], int(m[2])
    return None


rows, seen = [], set()
with open(sys.argv[1], newline="") as f:
    for r in csv.DictReader(f):
        r = {k: (v or "").strip() for k, v in r.items()}
        raw = r["amount"]
        if raw.lower() in ("", "n/a", "-", "null"):
            if @DROP@:
                continue
            amount = 0.0
        else:
            amount = float(raw.replace("$", "").replace(",", ""))
        r["email"] = r["email"].lower()
        if r["@KEY@"] in seen:
            continue
        seen.add(r["@KEY@"])
        d = day_of(r["signup"])
        y, mo, da = d if d else (None, None, None)
        signup = "" if d is None else @DATE@
        name = " ".join(r["name"].split())
        rows.append([r["id"], name, r["email"], signup, "%.2f" % amount, r["country"].upper()])
rows.sort(key=@SORT@)
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f, lineterminator="\\n")
    w.writerow(["id", "name", "email", "signup", "amount", "country"])
    w.writerows(rows)
"""
_DATES = {
    "YYYY-MM-DD": '"%04d-%02d-%02d" % (y, mo, da)',
    "DD.MM.YYYY": '"%02d.%02d.%04d" % (da, mo, y)',
    "MM/DD/YYYY": '"%02d/%02d/%04d" % (mo, da, y)',
}


def solve(task: Task) -> str | None:
    """The expert's clean.py for `task`, or None when it does not recognise the rules."""
    p = task.prompt
    date = re.search(r"write them as (\S+);", p)
    key = re.search(r"a row whose (\w+) was already seen", p)
    if date is None or key is None or date.group(1) not in _DATES:
        return None
    by_amount = "by amount descending" in p
    return (
        _PROGRAM.replace("@DROP@", str("drop the row" in p))
        .replace("@KEY@", key.group(1))
        .replace("@DATE@", _DATES[date.group(1)])
        .replace("@SORT@", "lambda c: (-float(c[4]), int(c[0]))" if by_amount else "lambda c: int(c[0])")
    )
