"""The reference cleaner of the `cleaning` family: this file, with its RULES line filled in, is the
reference `clean.py` of a task, and the generator calls `clean` to compute the expected output.

Usage: python3 clean.py IN.csv OUT.csv
"""

import csv
import datetime
import sys

RULES = {"date_format": "%Y-%m-%d", "missing_amount": "drop", "dedup_key": "id", "sort": "id"}  # filled in
MISSING = {"", "n/a", "-", "null"}
IN_FORMATS = ("%Y-%m-%d", "%d/%m/%Y", "%b %d %Y")
HEADER = ["id", "name", "email", "signup", "amount", "country"]


def clean(rows: list[dict[str, str]], rules: dict[str, str]) -> list[list[str]]:
    out: list[list[str]] = []
    seen: set[str] = set()
    for row in rows:
        r = {k: (v or "").strip() for k, v in row.items()}
        if r["amount"].lower() in MISSING:
            if rules["missing_amount"] == "drop":
                continue
            amount = 0.0
        else:
            amount = float(r["amount"].replace("$", "").replace(",", ""))
        email = r["email"].lower()
        key = r["id"] if rules["dedup_key"] == "id" else email
        if key in seen:
            continue
        seen.add(key)
        day = None
        for fmt in IN_FORMATS:
            try:
                day = datetime.datetime.strptime(r["signup"], fmt).date()
                break
            except ValueError:
                pass
        signup = day.strftime(rules["date_format"]) if day is not None else ""
        out.append(
            [r["id"], " ".join(r["name"].split()), email, signup, f"{amount:.2f}", r["country"].upper()]
        )
    if rules["sort"] == "id":
        out.sort(key=lambda c: int(c[0]))
    else:
        out.sort(key=lambda c: (-float(c[4]), int(c[0])))
    return out


def main() -> None:
    with open(sys.argv[1], newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with open(sys.argv[2], "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(clean(rows, RULES))


if __name__ == "__main__":
    main()
