"""The reference program of the `csvjoin` family: this file, with its QUESTION line filled in, is a task's
reference `report.py`, and the generator calls `report` to compute the expected rows.

Usage: python3 report.py customers.csv orders.csv report.csv
"""

import csv
import io
import sys

QUESTION = {"kind": "by_country", "statuses": ["paid"]}  # filled in


def report(question: dict, customers_text: str, orders_text: str) -> list[list[str]]:
    customers = {r["id"]: r for r in csv.DictReader(io.StringIO(customers_text))}
    orders = list(csv.DictReader(io.StringIO(orders_text)))
    kind = question["kind"]
    if kind == "by_country":
        acc: dict[str, list[float]] = {}
        for o in orders:
            c = customers.get(o["customer_id"])
            if c is not None and o["status"] in question["statuses"]:
                a = acc.setdefault(c["country"], [0, 0.0])
                a[0] += 1
                a[1] += float(o["amount"])
        rows = sorted(acc.items(), key=lambda kv: (-round(kv[1][1], 2), kv[0]))
        return [["country", "orders", "revenue"]] + [[k, str(int(n)), f"{t:.2f}"] for k, (n, t) in rows]
    if kind == "no_orders":
        have = {o["customer_id"] for o in orders}
        idle = sorted((c for i, c in customers.items() if i not in have), key=lambda c: int(c["id"]))
        return [["id", "name"]] + [[c["id"], c["name"]] for c in idle]
    if kind == "monthly":
        months: dict[str, list[float]] = {}
        for o in orders:
            c = customers.get(o["customer_id"])
            if c is not None and c["segment"] == question["segment"]:
                m = months.setdefault(o["date"][:7], [0, 0.0])
                m[0] += 1
                m[1] += float(o["amount"])
        return [["month", "orders", "revenue"]] + [
            [k, str(int(n)), f"{t:.2f}"] for k, (n, t) in sorted(months.items())
        ]
    if kind in ("top", "all_customers"):
        totals = {i: [0, 0.0] for i in customers}
        for o in orders:
            if o["customer_id"] in totals:
                totals[o["customer_id"]][0] += 1
                totals[o["customer_id"]][1] += float(o["amount"])
        ranked = sorted(totals, key=lambda i: (-round(totals[i][1], 2), int(i)))
        if kind == "top":
            chosen = [i for i in ranked if totals[i][0]][: question["k"]]
            return [["id", "name", "total"]] + [
                [i, customers[i]["name"], f"{totals[i][1]:.2f}"] for i in chosen
            ]
        return [["id", "name", "orders", "total"]] + [
            [i, customers[i]["name"], str(int(totals[i][0])), f"{totals[i][1]:.2f}"] for i in ranked
        ]
    if kind == "orphans":
        lost = sorted(
            (o for o in orders if o["customer_id"] not in customers), key=lambda o: int(o["order_id"])
        )
        return [["order_id", "customer_id"]] + [[o["order_id"], o["customer_id"]] for o in lost]
    raise ValueError(f"unknown question {kind!r}")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        customers_text = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        orders_text = f.read()
    with open(sys.argv[3], "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(report(QUESTION, customers_text, orders_text))


if __name__ == "__main__":
    main()
