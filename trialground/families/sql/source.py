"""The `sql` family: questions about a small shop database, answered by one SQLite query.

The workspace holds `schema.sql` and `data.sql` (customers and their orders, random per task) and a
README; the agent writes one SELECT statement to `query.sql`. The hidden check (`check_sql.py`) rebuilds
the database from its own copy, plus a *hidden* dataset of the same schema, and compares the query's rows
with the reference query's on both (in order where the question asks for one), so a query that hard-codes
the visible answer fails. Eight question templates (counts, grouped totals, anti-joins, top-k with ties,
HAVING thresholds, distinct counts, grouped averages, arg-max per group), each with random parameters.

    load_source("sql", n=200)            # registered in trialground.tasks.sources by dotted path
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "query.sql"
CITIES = ("Lyon", "Oslo", "Porto", "Quito", "Tartu", "Umea", "Varna", "Zadar")
NAMES = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lia", "Max",
         "Noa", "Oki", "Pia", "Rui", "Sol", "Tom", "Uma", "Vic", "Wen", "Xia", "Yul", "Zoe")  # fmt: skip
PRODUCTS = ("lamp", "desk", "chair", "shelf", "rug", "mirror", "sofa", "stool")
STATUSES = ("paid", "pending", "refunded", "shipped")
SCHEMA = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);\n"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),\n"
    "  product TEXT NOT NULL, amount REAL NOT NULL, status TEXT NOT NULL, day INTEGER NOT NULL);\n"
)
README = (
    "A shop database for SQLite 3: schema.sql creates the tables, data.sql fills them.\n"
    "Try queries with: sqlite3 :memory: '.read schema.sql' '.read data.sql' 'SELECT ...'\n"
    "or with Python's sqlite3 module. Write ONE SELECT statement (no other statement) to query.sql.\n"
)
_CHECK = check_source(Path(__file__).parent, "check_sql.py")


@dataclass(frozen=True)
class Question:
    """One instance: the words, the reference query, whether row order is part of the answer."""

    key: str
    text: str
    reference: str
    ordered: bool


def dataset(rng: random.Random) -> str:
    """INSERT statements of 12-24 customers and 40-90 orders."""
    lines = []
    n_customers = rng.randint(12, 24)
    for i in range(1, n_customers + 1):
        lines.append(f"INSERT INTO customers VALUES ({i}, '{rng.choice(NAMES)}', '{rng.choice(CITIES)}');")
    for i in range(1, rng.randint(40, 90) + 1):
        amount = round(rng.uniform(5, 400), 2)
        lines.append(
            f"INSERT INTO orders VALUES ({i}, {rng.randint(1, n_customers)}, '{rng.choice(PRODUCTS)}', "
            f"{amount}, '{rng.choice(STATUSES)}', {rng.randint(1, 60)});"
        )
    return "\n".join(lines) + "\n"


def question(rng: random.Random) -> Question:
    """A random instance of one of the templates."""
    s, p, city = rng.choice(STATUSES), rng.choice(PRODUCTS), rng.choice(CITIES)
    template = rng.randrange(8)
    if template == 0:
        return Question(f"count:{s}", f"How many orders have status '{s}'? (one row, one column)",
                        f"SELECT COUNT(*) FROM orders WHERE status = '{s}'", False)  # fmt: skip
    if template == 1:
        return Question(
            f"city_total:{s}",
            f"For each city with at least one order of status '{s}': the city and the total amount of those "
            "orders rounded to 2 decimals (columns: city, total), ordered by city.",
            "SELECT c.city, ROUND(SUM(o.amount), 2) FROM orders o JOIN customers c ON c.id = o.customer_id "
            f"WHERE o.status = '{s}' GROUP BY c.city ORDER BY c.city",
            True,
        )
    if template == 2:
        return Question(
            f"never:{p}",
            f"The id and name of every customer who never ordered a '{p}' (columns: id, name), ordered by "
            "id.",
            f"SELECT id, name FROM customers WHERE id NOT IN (SELECT customer_id FROM orders WHERE product = "
            f"'{p}') ORDER BY id",
            True,
        )
    if template == 3:
        k, a = rng.randint(2, 5), rng.randint(1, 30)
        b = a + rng.randint(10, 30)
        return Question(
            f"top:{k}:{a}:{b}",
            f"The {k} customers with the largest total amount over their orders placed from day {a} to day "
            f"{b} inclusive: customer id and that total rounded to 2 decimals (columns: id, total), largest "
            "total first, ties by the smaller id.",
            "SELECT c.id, ROUND(SUM(o.amount), 2) FROM customers c JOIN orders o ON o.customer_id = c.id "
            f"WHERE o.day BETWEEN {a} AND {b} GROUP BY c.id ORDER BY SUM(o.amount) DESC, c.id LIMIT {k}",
            True,
        )
    if template == 4:
        x = rng.choice((150, 250, 400, 600))
        return Question(
            f"above:{city}:{x}",
            f"The ids of the customers living in {city} whose orders (any status) total more than {x} "
            "(one column), in any order.",
            "SELECT c.id FROM customers c JOIN orders o ON o.customer_id = c.id "
            f"WHERE c.city = '{city}' GROUP BY c.id HAVING SUM(o.amount) > {x}",
            False,
        )
    if template == 5:
        m = rng.randint(2, 4)
        return Question(
            f"variety:{m}",
            f"For each customer who ordered at least {m} different products: customer id and the number of "
            "different products (columns: id, products), most products first, ties by the smaller id.",
            "SELECT customer_id, COUNT(DISTINCT product) AS n FROM orders GROUP BY customer_id "
            f"HAVING COUNT(DISTINCT product) >= {m} ORDER BY n DESC, customer_id",
            True,
        )
    if template == 6:
        return Question(
            f"avg:{p}",
            f"For each status that some '{p}' order has: the status and the average amount of the '{p}' "
            "orders with it, rounded to 2 decimals (columns: status, average), ordered by status.",
            f"SELECT status, ROUND(AVG(amount), 2) FROM orders WHERE product = '{p}' GROUP BY status "
            "ORDER BY status",
            True,
        )
    return Question(
        "argmax_city",
        "For each city that has orders: the city and the id of its customers' order with the highest amount "
        "(ties: the smaller order id) (columns: city, order_id), ordered by city.",
        "SELECT city, id FROM (SELECT c.city, o.id, ROW_NUMBER() OVER (PARTITION BY c.city ORDER BY "
        "o.amount DESC, o.id) AS r FROM orders o JOIN customers c ON c.id = o.customer_id) WHERE r = 1 "
        "ORDER BY city",
        True,
    )


def make_task(q: Question, data: str, hidden: str, split: Split) -> Task:
    spec = {"solution": SOLUTION, "schema": SCHEMA, "data": data, "hidden_data": hidden,
            "reference": q.reference, "ordered": q.ordered}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    prompt = (
        f"{q.text}\n\nThe database is described in schema.sql and filled by data.sql in your workspace "
        f"(SQLite). Write one SELECT statement that answers the question to {SOLUTION}; it is also run on "
        "other data of the same schema, so compute the answer, do not write it down."
    )
    return Task(
        domain="sql",
        prompt=prompt,
        files={"schema.sql": SCHEMA, "data.sql": data, "README.md": README, SOLUTION: "-- your query\n"},
        hidden_checks={"check_sql.py": check},
        reference=q.reference + "\n",
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 30}
        ),
        split=split,
        metadata={"family": "sql", "template": q.key.split(":")[0], "key": q.key},
    )


def sql_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments. An instance is its question and data; its
    split is a hash of both, so the splits never share one."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        q = question(rng)
        data_seed = rng.getrandbits(48)
        return f"{q.key}|{data_seed}", lambda: make_task(
            q, dataset(random.Random(data_seed)), dataset(random.Random(data_seed ^ 0x5EED)), split
        )

    return draw_tasks("sql", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return sql_tasks(request.n, request.seed, request.split)
