"""The `csvjoin` family's scripted expert: recognises the report from the prompt and writes its own
program (amounts summed in whole cents, joins by dictionaries built once)."""

from __future__ import annotations

import re

from trialground.tasks.model import Task

_HEAD = """import csv, sys

cust = {r["id"]: r for r in csv.DictReader(open(sys.argv[1]))}
orders = list(csv.DictReader(open(sys.argv[2])))


def cents(text):
    whole, _, frac = text.partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


def money(c):
    return "%d.%02d" % divmod(c, 100)


out = []
"""
_TAIL = """with open(sys.argv[3], "w", newline="") as f:
    csv.writer(f, lineterminator="\\n").writerows(out)
"""
_TOTALS = """count = {i: 0 for i in cust}
total = {i: 0 for i in cust}
for o in orders:
    if o["customer_id"] in cust:
        count[o["customer_id"]] += 1
        total[o["customer_id"]] += cents(o["amount"])
order = sorted(cust, key=lambda i: (-total[i], int(i)))
"""


def _grouped(key: str, keep: str, header: str, sort: str) -> str:
    return (f"acc = {{}}\nfor o in orders:\n    c = cust.get(o['customer_id'])\n    if c and {keep}:\n"
            f"        a = acc.setdefault({key}, [0, 0])\n        a[0] += 1\n"
            "        a[1] += cents(o['amount'])\n"
            f"out.append({header!r}.split(','))\nfor k in sorted(acc, key=lambda k: {sort}):\n"
            "    out.append([k, str(acc[k][0]), money(acc[k][1])])\n")  # fmt: skip


def solve(task: Task) -> str | None:
    """The expert's report.py for `task`, or None when it does not recognise the report."""
    p = task.prompt
    if m := re.search(r"whose status is one of ([\w, ]+?) \(orders of unknown", p):
        statuses = [s.strip() for s in m[1].split(",")]
        body = _grouped("c['country']", f"o['status'] in {statuses!r}", "country,orders,revenue",
                        "(-acc[k][1], k)")  # fmt: skip
    elif m := re.search(r"customers in the segment (\w+):", p):
        body = _grouped("o['date'][:7]", f"c['segment'] == {m[1]!r}", "month,orders,revenue", "k")
    elif "customers that have no order" in p:
        body = ("used = {o['customer_id'] for o in orders}\nout.append(['id', 'name'])\n"
                "for i in sorted(cust, key=int):\n    if i not in used:\n"
                "        out.append([i, cust[i]['name']])\n")  # fmt: skip
    elif m := re.search(r"the (\d+) customers with the largest total order amount", p):
        body = _TOTALS + ("out.append(['id', 'name', 'total'])\n"
                          f"for i in [i for i in order if count[i]][:{m[1]}]:\n"
                          "    out.append([i, cust[i]['name'], money(total[i])])\n")  # fmt: skip
    elif "every customer with the number and total amount" in p:
        row = "[i, cust[i]['name'], str(count[i]), money(total[i])]"
        body = (
            _TOTALS
            + f"out.append(['id', 'name', 'orders', 'total'])\nfor i in order:\n    out.append({row})\n"
        )
    elif "orders whose customer_id is not in customers.csv" in p:
        body = ("out.append(['order_id', 'customer_id'])\n"
                "for o in sorted(orders, key=lambda o: int(o['order_id'])):\n"
                "    if o['customer_id'] not in cust:\n"
                "        out.append([o['order_id'], o['customer_id']])\n")  # fmt: skip
    else:
        return None
    return _HEAD + body + _TAIL
