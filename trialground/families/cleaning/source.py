"""The `cleaning` family: a messy CSV in, a clean CSV out, by a Python script the agent writes.

`raw.csv` (30-70 customer rows, random per task) has stray whitespace, upper-case emails, dates in three
formats, amounts written `$1,234.5`, missing values (`""`, `N/A`, `-`, `null`) and repeated customers. The
prompt states the rules, which vary per task: the output date format, what to do with a missing amount
(drop the row or write 0.00), which column identifies a repeat (`id` or `email`, keeping the first), and
the order of the rows. The agent writes `clean.py`, run as `python3 clean.py raw.csv clean.csv`.

The hidden check (`check_cleaning.py`) runs a copy of the script on a copy of the workspace's raw file and
on a hidden one, and compares the rows of the CSV it writes with what the reference cleaner
(`cleaner.py`) produces: a script that copies the visible answer fails on the hidden input.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import random
from collections.abc import Callable
from pathlib import Path

from trialground.families.checks import check_source
from trialground.families.cleaning.cleaner import HEADER, clean
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "clean.py"
_HERE = Path(__file__).parent
_CHECK = check_source(Path(__file__).parent, "check_cleaning.py")
_CLEANER = (_HERE / "cleaner.py").read_text(encoding="utf-8")
FIRST = ("ana", "bo", "cy", "dana", "eve", "finn", "gia", "hal", "ines", "jo", "kim", "lou", "mo", "nell")
LAST = ("smith", "ito", "garcia", "novak", "okafor", "berg", "costa", "haas", "lind", "moreau")
COUNTRIES = ("de", "fr", "jp", "br", "ng", "us", "se", "pt")
DATE_FORMATS = {"%Y-%m-%d": "YYYY-MM-DD", "%d.%m.%Y": "DD.MM.YYYY", "%m/%d/%Y": "MM/DD/YYYY"}
MISSING = ("", "N/A", "-", "null")


def raw_rows(rng: random.Random) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    people = []
    for _ in range(rng.randint(30, 70)):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        email = f"{first}.{last}{rng.randint(1, 99)}@example.org"
        day = datetime.date(2020, 1, 1) + datetime.timedelta(days=rng.randint(0, 1800))
        people.append((str(rng.randint(1, 400)), f"{first.title()}  {last.title()}", email, day))
    for pid, name, email, day in people + rng.sample(people, k=rng.randint(2, 8)):
        fmt = rng.choice(("%Y-%m-%d", "%d/%m/%Y", "%b %d %Y"))
        amount = rng.choice(MISSING) if rng.random() < 0.12 else rng.choice(("{:.2f}", "${:,.2f}", "{:.1f}"))
        amount = amount.format(rng.uniform(1, 5000)) if "{" in amount else amount
        country = rng.choice(COUNTRIES) + (" " if rng.random() < 0.2 else "")
        w.writerow([f" {pid}", f"{name} ", email.upper() if rng.random() < 0.3 else email,
                    day.strftime(fmt), amount, country])  # fmt: skip
    return buf.getvalue()


def expected(raw: str, rules: dict[str, str]) -> list[list[str]]:
    return [HEADER, *clean(list(csv.DictReader(io.StringIO(raw))), rules)]


def prompt_of(rules: dict[str, str]) -> str:
    missing = {"drop": "drop the row", "zero": "write 0.00"}[rules["missing_amount"]]
    order = {"id": "by id ascending (as a number)", "amount": "by amount descending, then id ascending"}[
        rules["sort"]
    ]
    return (
        "raw.csv in your workspace is a messy export of customers (columns id,name,email,signup,amount,"
        f"country). Write {SOLUTION} so that `python3 {SOLUTION} raw.csv clean.csv` writes a clean CSV with "
        "the same header and these rules:\n"
        "- trim every field; collapse runs of spaces inside a name to one; lower-case emails; upper-case "
        "countries;\n"
        f"- a missing amount (empty, N/A, -, null): {missing}; otherwise drop `$` and `,` and write 2 "
        "decimals;\n"
        f"- a row whose {rules['dedup_key']} was already seen (after the rules above) is dropped, keeping "
        "the first;\n"
        "- signup dates appear as YYYY-MM-DD, DD/MM/YYYY or 'Mon D YYYY' (e.g. Mar 05 2024): write them as "
        f"{DATE_FORMATS[rules['date_format']]};\n"
        f"- order the rows {order}.\n"
        "It is also run on other files of the same kind, so compute, do not copy."
    )


def make_task(rules: dict[str, str], raw: str, hidden: str, split: Split) -> Task:
    spec = {"solution": SOLUTION, "raw": raw, "want": expected(raw, rules), "hidden_raw": hidden,
            "hidden_want": expected(hidden, rules), "timeout_s": 20}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    head, _, tail = _CLEANER.partition("\nRULES = ")
    reference = f"{head}\nRULES = {json.dumps(rules)}\n{tail.partition(chr(10))[2]}"
    return Task(
        domain="cleaning",
        prompt=prompt_of(rules),
        files={"raw.csv": raw, SOLUTION: "import sys\n\n# python3 clean.py raw.csv clean.csv\n"},
        hidden_checks={"check_cleaning.py": check},
        reference=reference,
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 60}
        ),
        split=split,
        metadata={"family": "cleaning", "key": json.dumps(rules, sort_keys=True)},
    )


def cleaning_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its rules and its data."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        rules = {"date_format": rng.choice(list(DATE_FORMATS)),
                 "missing_amount": rng.choice(("drop", "zero")),
                 "dedup_key": rng.choice(("id", "email")), "sort": rng.choice(("id", "amount"))}  # fmt: skip
        data_seed = rng.getrandbits(48)
        key = f"{json.dumps(rules, sort_keys=True)}|{data_seed}"
        return key, lambda: make_task(
            rules, raw_rows(random.Random(data_seed)), raw_rows(random.Random(data_seed ^ 0x5EED)), split
        )

    return draw_tasks("cleaning", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return cleaning_tasks(request.n, request.seed, request.split)
