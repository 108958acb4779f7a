"""Long-context tool tasks: the information needed is scattered, so it must be found with tools.

Source spec `longctx[:FAMILIES]` (comma-separated subset of the families below; default all):

- `find`: a repository of `FIND_FILES` modules (services/<service>/<module>.py, each with settings of its
  own); the question names one service's setting. Every service defines the setting, so the name alone
  does not find it: the right file must be located (grep, then read). Graded `exact`.
- `log`: a log of `LOG_LINES` lines; the question asks for the request id of the one request that failed
  with a given status on a given endpoint (decoys: that status elsewhere, that endpoint with other
  statuses). Graded `exact`.
- `doc`: a contract of `DOC_CLAUSES` clauses; the unit price is stated near the start, the discount in
  the middle and the quantity near the end; the answer combines the three. Graded `numeric`.

Every workspace is far larger than an observation budget (a whole-file `cat` is cut to its head and tail
by `truncate_middle`) and than a small model's context, which is what the context budget, the truncation
records and the observation budget of `trialground.rollout` are exercised by. Deterministic in
`(n, seed, split)`; a task's split is a hash of its content.
"""

from __future__ import annotations

import hashlib
import random

from trialground.tasks.model import Split, Task, VerifierSpec, split_of

FAMILIES = ("find", "log", "doc")
FIND_FILES = 300
LOG_LINES = 4000
DOC_CLAUSES = 240

_SERVICES = ("billing", "catalog", "search", "ledger", "gateway", "metrics", "mailer", "auth", "orders",
             "payments", "inventory", "shipping", "reviews", "profiles", "reports", "alerts")  # fmt: skip
_MODULES = ("api", "models", "views", "tasks", "utils", "client", "schema", "cache", "handlers", "jobs",
            "queries", "forms", "signals", "admin", "routes", "serializers", "storage", "events")  # fmt: skip
_SETTINGS = ("RETRY_LIMIT", "TIMEOUT_S", "BATCH_SIZE", "MAX_CONNECTIONS", "PAGE_SIZE")
_ENDPOINTS = ("/checkout", "/cart", "/login", "/search", "/orders", "/profile", "/items", "/pay")
_STATUSES = (500, 502, 503, 504, 429, 404)


def _split_of(key: str) -> Split:
    return split_of(key, namespace="longctx:")


def _short(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _find(rng: random.Random) -> tuple[str, Task]:
    services = rng.sample(_SERVICES, 12)
    setting = rng.choice(_SETTINGS)
    target = rng.choice(services)
    files: dict[str, str] = {}
    value_of: dict[str, int] = {}
    per_service = FIND_FILES // len(services)
    for service in services:
        modules = rng.sample(_MODULES, min(per_service, len(_MODULES)))
        extra = per_service - len(modules)
        modules += [f"{rng.choice(_MODULES)}_{i}" for i in range(extra)]
        home = rng.choice(modules)
        value_of[service] = rng.randint(2, 999)
        for module in modules:
            lines = [f'"""The {service} service: {module.replace("_", " ")}."""', ""]
            for j in range(rng.randint(3, 8)):
                lines.append(f"def {module.split('_')[0]}_{j}(x):\n    return x * {rng.randint(2, 9)}\n")
            if module == home:
                lines.append(f"{setting} = {value_of[service]}")
            else:
                lines.append(f"# {setting} is set once per service")
            files[f"services/{service}/{module}.py"] = "\n".join(lines) + "\n"
    answer = str(value_of[target])
    key = f"find:{setting}:{target}:" + ",".join(f"{s}={value_of[s]}" for s in services)
    prompt = (
        f"In this repository, what is {setting} of the {target} service? Every service sets it somewhere "
        "in its own modules. Submit the number."
    )
    task = Task(
        domain="longctx", prompt=prompt, files=files, reference=answer,
        verifier=VerifierSpec(kind="exact", params={"answer": answer}), split=_split_of(key),
        metadata={"family": "longctx:find", "files": len(files), "key": _short(key)},
    )  # fmt: skip
    return key, task


def _log(rng: random.Random) -> tuple[str, Task]:
    endpoint, status = rng.choice(_ENDPOINTS), rng.choice(_STATUSES)
    lines = []
    placed = rng.randint(LOG_LINES // 10, LOG_LINES - LOG_LINES // 10)
    answer = ""
    for i in range(LOG_LINES):
        rid = f"req-{rng.randrange(16**8):08x}"
        ep, st = rng.choice(_ENDPOINTS), 200 if rng.random() < 0.9 else rng.choice(_STATUSES)
        if i == placed:
            ep, st, answer = endpoint, status, rid
        elif ep == endpoint and st == status:
            st = 200
        day, hour, minute, second = 1 + i * 28 // LOG_LINES, (i * 7) % 24, (i * 13) % 60, (i * 31) % 60
        ts = f"2026-11-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"
        lines.append(f"{ts} {rid} {ep} status={st} ms={rng.randint(2, 900)}")
    key = f"log:{endpoint}:{status}:{answer}"
    prompt = (
        f"logs/app.log holds a day of requests. Exactly one request to {endpoint} failed with status "
        f"{status}. Submit its request id (req-...)."
    )
    task = Task(
        domain="longctx", prompt=prompt, files={"logs/app.log": "\n".join(lines) + "\n"}, reference=answer,
        verifier=VerifierSpec(kind="exact", params={"answer": answer}), split=_split_of(key),
        metadata={"family": "longctx:log", "lines": LOG_LINES, "key": _short(key)},
    )  # fmt: skip
    return key, task


_FILLER = (
    "The parties shall act in good faith in all matters under this agreement.",
    "Notices are given in writing to the addresses stated in the schedule.",
    "Neither party is liable for delays caused by events beyond its reasonable control.",
    "This clause survives the termination of the agreement.",
    "Headings are for convenience only and do not affect interpretation.",
    "Each party bears its own costs of negotiating this agreement.",
)


def _doc(rng: random.Random) -> tuple[str, Task]:
    price, discount, quantity = rng.randint(11, 250), rng.choice((5, 10, 15, 20, 25)), rng.randint(3, 60)
    at_price = rng.randint(2, DOC_CLAUSES // 8)
    at_discount = rng.randint(DOC_CLAUSES * 3 // 8, DOC_CLAUSES * 5 // 8)
    at_quantity = rng.randint(DOC_CLAUSES * 7 // 8, DOC_CLAUSES - 1)
    clauses = []
    for i in range(1, DOC_CLAUSES + 1):
        if i == at_price:
            text = f"Each licence costs {price} EUR before any discount."
        elif i == at_discount:
            text = f"A discount of {discount} percent applies to the total licence fee."
        elif i == at_quantity:
            text = f"The customer orders {quantity} licences under this agreement."
        else:
            text = " ".join(rng.sample(_FILLER, 3))
        clauses.append(f"Clause {i}. {text}")
    total = round(price * quantity * (100 - discount) / 100, 2)
    answer = f"{total:g}"
    key = f"doc:{price}:{discount}:{quantity}:{at_price}:{at_discount}:{at_quantity}"
    prompt = (
        "docs/contract.md is the customer's licence agreement. What is the total licence fee in EUR? "
        "Submit the number."
    )
    files = {"docs/contract.md": "\n\n".join(clauses) + "\n"}
    task = Task(
        domain="longctx", prompt=prompt, files=files, reference=answer,
        verifier=VerifierSpec(kind="numeric", params={"answer": total, "rel_tol": 1e-6, "abs_tol": 0.005}),
        split=_split_of(key), metadata={"family": "longctx:doc", "clauses": DOC_CLAUSES, "key": _short(key)},
    )  # fmt: skip
    return key, task


_MAKERS = {"find": _find, "log": _log, "doc": _doc}


def parse_families(arg: str) -> tuple[str, ...]:
    if not arg:
        return FAMILIES
    chosen = tuple(f.strip() for f in arg.split(",") if f.strip())
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise ValueError(f"unknown longctx families {unknown or arg!r}; choose from {', '.join(FAMILIES)}")
    return chosen


def longctx_tasks(n: int, seed: int, split: Split, families: str = "") -> list[Task]:
    """`n` tasks of `split`, families in turn (see the module docstring)."""
    chosen = parse_families(families)
    rng = random.Random(f"longctx:{seed}")
    seen: set[str] = set()
    out: list[Task] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n + 100:
            raise ValueError(f"could not make {n} distinct {split} tasks")
        key, task = _MAKERS[chosen[len(out) % len(chosen)]](rng)
        if task.split != split or key in seen:
            continue
        seen.add(key)
        out.append(task)
    return out
