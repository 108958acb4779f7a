"""The `shell` family: text processing of a web server's access log with a bash script.

The workspace holds `access.log` (120-300 lines `ADDRESS METHOD PATH STATUS BYTES`, random per task) and
`solve.sh`; the agent writes a script that, run as `bash solve.sh access.log`, prints the answer. Six kinds
of question: requests with a status, bytes sent for a method, the N most requested paths with counts,
distinct addresses that got a status, server errors per path, the path of the largest response.

The hidden check (`check_shell.py`) runs a copy of the script in a directory of its own on a copy of the
workspace log and on a hidden log, under the C locale, and compares its standard output with what the
generator computed in Python for each: a script that prints the visible answer fails on the hidden log.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "solve.sh"
METHODS = ("GET", "POST", "PUT", "DELETE")
PATHS = ("/", "/login", "/logout", "/api/users", "/api/orders", "/api/items", "/static/app.js", "/health",
         "/search", "/cart", "/checkout", "/admin")  # fmt: skip
STATUSES = (200, 200, 200, 201, 301, 304, 404, 404, 500, 503)
_CHECK = check_source(Path(__file__).parent, "check_shell.py")

Row = tuple[str, str, str, int, int]


def access_log(rng: random.Random) -> list[Row]:
    hosts = [f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)}" for _ in range(rng.randint(6, 20))]
    return [
        (
            rng.choice(hosts),
            rng.choice(METHODS),
            rng.choice(PATHS),
            rng.choice(STATUSES),
            rng.randint(0, 90000),
        )
        for _ in range(rng.randint(120, 300))
    ]


def text(rows: list[Row]) -> str:
    return "".join(f"{a} {m} {p} {s} {b}\n" for a, m, p, s, b in rows)


@dataclass(frozen=True)
class Question:
    key: str
    text: str
    reference: str  # the body of solve.sh
    answer: Callable[[list[Row]], list[str]]


def question(rng: random.Random) -> Question:
    kind = rng.randrange(6)
    s, m, n = rng.choice((200, 301, 404, 500, 503)), rng.choice(METHODS), rng.randint(2, 5)
    if kind == 0:
        return Question(f"status:{s}", f"Print how many requests got status {s} (one number).",
                        f"awk -v s={s} '$4 == s' \"$1\" | wc -l",
                        lambda rows: [str(sum(r[3] == s for r in rows))])  # fmt: skip
    if kind == 1:
        return Question(f"bytes:{m}", f"Print the total bytes sent for {m} requests (one number).",
                        f"awk -v m={m} '$2 == m {{t += $5}} END {{print t + 0}}' \"$1\"",
                        lambda rows: [str(sum(r[4] for r in rows if r[1] == m))])  # fmt: skip
    if kind == 2:

        def top(rows: list[Row]) -> list[str]:
            counts = Counter(r[2] for r in rows)
            return [f"{c} {p}" for p, c in sorted(counts.items(), key=lambda pc: (-pc[1], pc[0]))[:n]]

        return Question(
            f"top:{n}",
            f"Print the {n} most requested paths, one per line as `COUNT PATH`, most requests first, ties "
            "by path in byte order.",
            f"cut -d' ' -f3 \"$1\" | sort | uniq -c | sort -k1,1nr -k2,2 | head -n {n} | "
            "awk '{print $1, $2}'",
            top,
        )
    if kind == 3:
        return Question(
            f"addresses:{s}",
            f"Print each distinct client address that got status {s} at least once, one per line, sorted in "
            "byte order.",
            f"awk -v s={s} '$4 == s {{print $1}}' \"$1\" | sort -u",
            lambda rows: sorted({r[0] for r in rows if r[3] == s}),
        )
    if kind == 4:

        def errors(rows: list[Row]) -> list[str]:
            counts = Counter(r[2] for r in rows if r[3] >= 500)
            return [f"{p} {c}" for p, c in sorted(counts.items())]

        return Question(
            "errors",
            "For each path with at least one server error (status 500 or above), print `PATH COUNT` with the "
            "number of such errors, sorted by path in byte order.",
            "awk '$4 >= 500 {print $3}' \"$1\" | sort | uniq -c | awk '{print $2, $1}'",
            errors,
        )

    def largest(rows: list[Row]) -> list[str]:
        best = max(range(len(rows)), key=lambda i: (rows[i][4], -i))
        return [rows[best][2]]

    return Question(
        "largest",
        "Print the path of the request that sent the most bytes (the earliest such line if several did).",
        "awk 'NR == 1 || $5 > m {m = $5; p = $3} END {print p}' \"$1\"",
        largest,
    )


def make_task(q: Question, rows: list[Row], hidden: list[Row], split: Split) -> Task:
    spec = {"solution": SOLUTION, "log": text(rows), "want": "\n".join(q.answer(rows)) + "\n",
            "hidden_log": text(hidden), "hidden_want": "\n".join(q.answer(hidden)) + "\n",
            "timeout_s": 20}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    prompt = (
        f"access.log in your workspace is a web server's log, one request a line: ADDRESS METHOD PATH STATUS "
        f"BYTES. {q.text}\n\nWrite a bash script {SOLUTION} that prints this when run as `bash {SOLUTION} "
        "access.log` (standard tools only: awk, sed, grep, sort, uniq, cut, wc...). It is also run on other "
        "logs of the same format, so compute the answer, do not write it down."
    )
    return Task(
        domain="shell",
        prompt=prompt,
        files={"access.log": text(rows), SOLUTION: "#!/bin/bash\n# usage: bash solve.sh access.log\n"},
        hidden_checks={"check_shell.py": check},
        reference=f"#!/bin/bash\n{q.reference}\n",
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 60}
        ),
        split=split,
        metadata={"family": "shell", "template": q.key.split(":")[0], "key": q.key},
    )


def shell_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its question and its logs."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        q = question(rng)
        data_seed = rng.getrandbits(48)
        return f"{q.key}|{data_seed}", lambda: make_task(
            q, access_log(random.Random(data_seed)), access_log(random.Random(data_seed ^ 0x5EED)), split
        )

    return draw_tasks("shell", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return shell_tasks(request.n, request.seed, request.split)
