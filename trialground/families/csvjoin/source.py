"""The `csvjoin` family: two CSV files joined and aggregated into a report, by a plain Python program.

`customers.csv` (10-25 customers: id, name, country, segment) and `orders.csv` (30-80 orders: order_id,
customer_id, date, amount, status; some orders name a customer that is not in the file), random per task.
The prompt asks for one of six reports with random parameters: revenue per country over some statuses,
customers without orders (an anti-join), a monthly series for one segment, the top K customers, every
customer with zero-filled totals (a left join), orders without a customer. The agent writes `report.py`,
run as `python3 report.py customers.csv orders.csv report.csv`; the hidden check (the shared
`check_files.py`) runs it on the workspace's files and on two hidden pairs and compares the rows of
report.csv with the reference's (`reports.py`).
"""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path

from trialground.families.csvjoin.reports import report
from trialground.families.filetask import filled, program_task, question_tasks
from trialground.tasks.model import Split, Task
from trialground.tasks.sources import SourceRequest

SOLUTION = "report.py"
_REFERENCE = (Path(__file__).parent / "reports.py").read_text(encoding="utf-8")
NAMES = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lia", "Max", "Noa")
COUNTRIES = ("DE", "FR", "JP", "BR", "NG", "US")
SEGMENTS = ("retail", "smb", "enterprise")
STATUSES = ("paid", "pending", "refunded", "shipped")
ARGS = ("customers.csv", "orders.csv", "report.csv")


def tables(rng: random.Random) -> tuple[str, str]:
    ids = sorted(rng.sample(range(1, 100), rng.randint(10, 25)))
    customers = ["id,name,country,segment"] + [
        f"{i},{rng.choice(NAMES)} {chr(65 + rng.randrange(26))}.,{rng.choice(COUNTRIES)},"
        + rng.choice(SEGMENTS)
        for i in ids
    ]
    orders = ["order_id,customer_id,date,amount,status"]
    for n in rng.sample(range(1000, 2000), rng.randint(30, 80)):
        buyers = ids[: max(1, len(ids) * 3 // 4)]  # the last quarter never orders
        who = rng.choice(buyers) if rng.random() < 0.93 else rng.randint(100, 120)
        day = datetime.date(2025, 1, 1) + datetime.timedelta(days=rng.randrange(300))
        orders.append(
            f"{n},{who},{day.isoformat()},{rng.randint(100, 50000) / 100:.2f},{rng.choice(STATUSES)}"
        )
    return "\n".join(customers) + "\n", "\n".join(orders) + "\n"


def question(rng: random.Random) -> tuple[dict[str, object], str]:
    kind = rng.choice(("by_country", "no_orders", "monthly", "top", "all_customers", "orphans"))
    if kind == "by_country":
        statuses = sorted(rng.sample(STATUSES, rng.randint(1, 3)))
        return {"kind": kind, "statuses": statuses}, (
            "per country of the customers, the number and total amount of the orders whose status is one "
            f"of {', '.join(statuses)} (orders of unknown customers are ignored): columns country,orders,"
            "revenue; revenue with 2 decimals; largest revenue first, ties by country; countries with no "
            "such order left out."
        )
    if kind == "no_orders":
        return {"kind": kind}, "the customers that have no order: columns id,name, by id ascending."
    if kind == "monthly":
        segment = rng.choice(SEGMENTS)
        return {"kind": kind, "segment": segment}, (
            f"per month (YYYY-MM of the order date), the number and total amount of the orders of "
            f"customers in the segment {segment}: columns month,orders,revenue; revenue with 2 decimals; "
            "by month ascending; months without such orders left out."
        )
    if kind == "top":
        k = rng.randint(3, 6)
        return {"kind": kind, "k": k}, (
            f"the {k} customers with the largest total order amount (any status; customers without orders "
            "never listed): columns id,name,total; total with 2 decimals; largest first, ties by the "
            "smaller id."
        )
    if kind == "all_customers":
        return {"kind": kind}, (
            "every customer with the number and total amount of their orders (any status; 0 and 0.00 for a "
            "customer without orders): columns id,name,orders,total; total with 2 decimals; largest total "
            "first, ties by the smaller id."
        )
    return {"kind": kind}, (
        "the orders whose customer_id is not in customers.csv: columns order_id,customer_id, by order_id "
        "ascending."
    )


def make_task(q: dict[str, object], words: str, inputs: list[tuple[str, str]], split: Split) -> Task:
    prompt = (
        "customers.csv (id,name,country,segment) and orders.csv (order_id,customer_id,date,amount,status) "
        f"are in your workspace. Write {SOLUTION} so that `python3 {SOLUTION} {' '.join(ARGS)}` writes to "
        f"report.csv a CSV (with its header row) of {words}\n\nIt is also run on other files of the same "
        "kind, so compute the report, do not write it down. Use the standard library only (no pandas)."
    )
    return program_task(
        domain="csvjoin",
        prompt=prompt,
        solution=SOLUTION,
        starter="import csv\nimport sys\n",
        inputs=[{"customers.csv": c, "orders.csv": o} for c, o in inputs],
        expected=lambda f: "".join(
            ",".join(r) + "\n" for r in report(q, f["customers.csv"], f["orders.csv"])
        ),
        labels=("workspace files", "hidden files"),
        compare="csv",
        args=ARGS,
        output="report.csv",
        reference=filled(_REFERENCE, "QUESTION", q),
        split=split,
        metadata={"report": str(q["kind"]), "key": json.dumps(q, sort_keys=True)},
    )


def csvjoin_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its report and its tables.
    Tables that would give a report without rows are drawn again."""
    return question_tasks("csvjoin", n, seed, split, question=question, make_input=tables,
                          make_task=make_task, keep=lambda q, t: len(report(q, *t)) > 1)  # fmt: skip


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return csvjoin_tasks(request.n, request.seed, request.split)
