"""The `sql` family's scripted expert: reads the question (never the reference or the hidden check) and
writes a query the way an analyst who knows the schema would, one rule per kind of question. Its solve
share, graded by the real grader, is in docs/families.md."""

from __future__ import annotations

import re

from trialground.tasks.model import Task

_JOIN = "FROM orders o JOIN customers c ON c.id = o.customer_id"
_RULES: tuple[tuple[str, str], ...] = (
    (r"How many orders have status '(\w+)'", "SELECT COUNT(*) FROM orders WHERE status = '{0}'"),
    (
        r"each city with at least one order of status '(\w+)'",
        "SELECT c.city, ROUND(SUM(o.amount), 2) " + _JOIN + " WHERE o.status = '{0}' GROUP BY c.city "
        "ORDER BY c.city",
    ),
    (
        r"never ordered a '(\w+)'",
        "SELECT c.id, c.name FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE "
        "o.customer_id = c.id AND o.product = '{0}') ORDER BY c.id",
    ),
    (
        r"The (\d+) customers with the largest total amount over their orders placed from day (\d+) to day "
        r"(\d+) inclusive",
        "SELECT o.customer_id, ROUND(SUM(o.amount), 2) FROM orders o WHERE o.day >= {1} AND o.day <= {2} "
        "GROUP BY o.customer_id ORDER BY SUM(o.amount) DESC, o.customer_id LIMIT {0}",
    ),
    (
        r"living in (\w+) whose orders \(any status\) total more than (\d+)",
        "SELECT c.id " + _JOIN + " WHERE c.city = '{0}' GROUP BY c.id HAVING SUM(o.amount) > {1}",
    ),
    (
        r"ordered at least (\d+) different products",
        "SELECT customer_id, COUNT(DISTINCT product) FROM orders GROUP BY customer_id "
        "HAVING COUNT(DISTINCT product) >= {0} ORDER BY COUNT(DISTINCT product) DESC, customer_id",
    ),
    (
        r"each status that some '(\w+)' order has",
        "SELECT status, ROUND(AVG(amount), 2) FROM orders WHERE product = '{0}' GROUP BY status "
        "ORDER BY status",
    ),
    (
        r"the id of its customers' order with the highest amount",
        "SELECT c.city, (SELECT o2.id FROM orders o2 JOIN customers c2 ON c2.id = o2.customer_id "
        "WHERE c2.city = c.city ORDER BY o2.amount DESC, o2.id LIMIT 1) " + _JOIN + " GROUP BY c.city "
        "ORDER BY c.city",
    ),
)


def solve(task: Task) -> str | None:
    """The expert's query.sql for `task`, or None when it does not recognise the question."""
    for pattern, query in _RULES:
        m = re.search(pattern, task.prompt)
        if m:
            return query.format(*m.groups()) + "\n"
    return None
