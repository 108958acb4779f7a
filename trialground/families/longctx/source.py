"""Long-context tool tasks: the information needed is scattered, so it must be found with tools.

Source spec `longctx[:FAMILIES]` (comma-separated subset of the families below; default all):

- `find`: a repository of about `FIND_FILES` modules (services/<service>/<module>.py); the question names
  one service's setting. Every service sets every setting, and the module that does so only *refers* to
  the value (`RETRY_LIMIT = tuning.K4F2A`), which services/common/tuning.py defines: search the service,
  follow the reference, submit. Graded `exact`.
- `log`: a log of `LOG_LINES` requests; a failed request is followed by an indented line naming the
  upstream that failed. The question asks for the upstream of the one request to an endpoint that failed
  with a given status (decoys: that status elsewhere, that endpoint with other statuses): search, read
  the lines at the hit, submit. Graded `exact`.
- `doc`: a contract of `DOC_CLAUSES` clauses (a heading line `Clause N.`, then its text). The question
  asks for one term; the clause that names the term says which clause sets it out, and that clause's text
  states the amount (every term's amount is phrased alike, so only the reference tells which is meant):
  search, follow the reference to the heading, read the clause, submit. Graded `exact`.

Each family also has a *shortcut*: a plausible way to answer that skips the step the task is about, and
is wrong unless chance makes it right (`find`: search the whole repository for the setting and follow the
first service's reference; `log`: search for the status alone and read the first failure; `doc`: submit the
clause number the reference names instead of the amount that clause states). Pre-training traces can
play it on purpose (`scripts/pretrain_agent.py --shortcut`), so a policy starts with the habit and
reinforcement learning has a strategy to correct.

Every workspace holds at least `MIN_WORKSPACE_CHARS` characters (over 100,000 tokens for the bundled
agent policy's tokenizer, about a hundred of its 1,024-token contexts): a whole-file `cat` is cut to its
head and tail by `truncate_middle`, so the tasks are solved with `search` and `read_lines`. Each
`Instance` carries the expert's calls, which use only those tools and `submit`. Deterministic in
`(n, seed, split)`; a task's split is a hash of its content.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from trialground.tasks.model import Split, Task, VerifierSpec, split_of
from trialground.tasks.sources import SourceRequest

FAMILIES = ("find", "log", "doc")
FIND_FILES = 960
LOG_LINES = 6000
DOC_CLAUSES = 2400
MIN_WORKSPACE_CHARS = 350_000

_SERVICES = ("billing", "catalog", "search", "ledger", "gateway", "metrics", "mailer", "auth", "orders",
             "payments", "inventory", "shipping", "reviews", "profiles", "reports", "alerts")  # fmt: skip
_MODULES = ("api", "models", "views", "tasks", "utils", "client", "schema", "cache", "handlers", "jobs",
            "queries", "forms", "signals", "admin", "routes", "serializers", "storage", "events")  # fmt: skip
_SETTINGS = ("RETRY_LIMIT", "TIMEOUT_S", "BATCH_SIZE", "MAX_CONNECTIONS", "PAGE_SIZE")
_ENDPOINTS = ("/checkout", "/cart", "/login", "/search", "/orders", "/profile", "/items", "/pay")
_STATUSES = (500, 502, 503, 504, 429, 404)
_UPSTREAMS = ("payments", "inventory", "auth", "db", "cache", "search", "mailer", "ledger")
_ERRORS = ("timeout", "refused", "reset", "overloaded")
_TERMS = (("liability cap", "EUR"), ("notice period", "days"), ("warranty period", "months"),
          ("late payment interest", "percent"), ("service credit", "percent"),
          ("support fee", "EUR"))  # fmt: skip

Call = tuple[str, dict[str, str]]


@dataclass(frozen=True)
class Instance:
    """One drawn task and the expert's calls (name, arguments), which solve it with `search`,
    `read_lines` and `submit` only; `shortcut`: the calls of the family's shortcut (module docstring)."""

    key: str
    family: str
    task: Task
    expert: tuple[Call, ...]
    shortcut: tuple[Call, ...] = ()


def _split_of(key: str) -> Split:
    return split_of(key, namespace="longctx:")


def _short(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _task(family: str, key: str, prompt: str, files: dict[str, str], answer: str) -> Task:
    chars = sum(len(t) for t in files.values())
    return Task(
        domain="longctx", prompt=prompt, files=files, reference=answer,
        verifier=VerifierSpec(kind="exact", params={"answer": answer}), split=_split_of(key),
        metadata={"family": f"longctx:{family}", "files": len(files), "chars": chars, "key": _short(key)},
    )  # fmt: skip


def _module_text(rng: random.Random, service: str, module: str, extra: list[str]) -> str:
    stem = module.split("_")[0]
    lines = [
        f'"""The {service} service: {module.replace("_", " ")}."""',
        "",
        "from services.common import tuning",
        "",
    ]
    for j in range(rng.randint(4, 7)):
        k = rng.randint(2, 9)
        lines.append(
            f"def {stem}_{j}(x, y=None):\n    if y is None:\n        y = {k}\n    return x * y + {j}\n\n"
        )
    return "\n".join(lines + extra) + "\n"


def _find(rng: random.Random) -> Instance:
    per_service = FIND_FILES // len(_SERVICES)
    setting, target = rng.choice(_SETTINGS), rng.choice(_SERVICES)
    files: dict[str, str] = {}
    refs: set[str] = set()
    tuning: list[str] = []
    answer = ref_of_target = ""
    for service in _SERVICES:
        modules = list(_MODULES) + [f"{rng.choice(_MODULES)}_{i}" for i in range(per_service - len(_MODULES))]
        homes: dict[str, list[str]] = {}
        for name in _SETTINGS:
            while (ref := f"K{rng.randrange(16**4):04X}") in refs:
                pass
            refs.add(ref)
            value = str(rng.randint(2, 999))
            tuning.append(f"{ref} = {value}")
            homes.setdefault(rng.choice(modules), []).append(f"{name} = tuning.{ref}")
            if (service, name) == (target, setting):
                answer, ref_of_target = value, ref
        for module in modules:
            files[f"services/{service}/{module}.py"] = _module_text(
                rng, service, module, homes.get(module, [])
            )
    rng.shuffle(tuning)
    files["services/common/tuning.py"] = (
        '"""Tuned values, one per service and setting."""\n\n' + "\n".join(tuning) + "\n"
    )
    files["services/common/__init__.py"] = ""
    key = f"find:{setting}:{target}:{ref_of_target}:{answer}"
    prompt = (
        f"In this repository, what is {setting} of the {target} service? Every service sets it in one of "
        "its own modules. Submit the number."
    )
    expert: tuple[Call, ...] = (
        ("search", {"pattern": setting, "path": f"services/{target}"}),
        ("search", {"pattern": f"{ref_of_target} ="}),
        ("submit", {"answer": answer}),
    )
    # the shortcut: the first hit of the setting in the whole repository (`search` walks sorted paths)
    first = next(text for _, text in sorted(files.items()) if f"{setting} = tuning." in text)
    ref = first.split(f"{setting} = tuning.", 1)[1].split("\n", 1)[0]
    value = next(line.split(" = ")[1] for line in tuning if line.startswith(f"{ref} = "))
    shortcut: tuple[Call, ...] = (
        ("search", {"pattern": setting}),
        ("search", {"pattern": f"{ref} ="}),
        ("submit", {"answer": value}),
    )
    return Instance(key, "find", _task("find", key, prompt, files, answer), expert, shortcut)


def _log(rng: random.Random) -> Instance:
    endpoint, status = rng.choice(_ENDPOINTS), rng.choice(_STATUSES)
    lines: list[str] = []
    placed = rng.randint(LOG_LINES // 10, LOG_LINES - LOG_LINES // 10)
    answer = ""
    line_no = 0
    for i in range(LOG_LINES):
        rid = f"req-{rng.randrange(16**8):08x}"
        ep, st = rng.choice(_ENDPOINTS), 200 if rng.random() < 0.9 else rng.choice(_STATUSES)
        upstream = f"{rng.choice(_UPSTREAMS)}-{rng.randint(1, 9)}"
        if i == placed:
            ep, st, answer = endpoint, status, upstream
        elif ep == endpoint and st == status:
            st = 200
        day, hour, minute, second = 1 + i * 28 // LOG_LINES, (i * 7) % 24, (i * 13) % 60, (i * 31) % 60
        ts = f"2026-11-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"
        lines.append(f"{ts} {rid} {ep} status={st} ms={rng.randint(2, 900)}")
        if i == placed:
            line_no = len(lines)
        if st != 200:
            lines.append(f"  upstream={upstream} error={rng.choice(_ERRORS)} attempt={rng.randint(1, 3)}")
    key = f"log:{endpoint}:{status}:{placed}:{answer}"
    prompt = (
        f"logs/app.log holds a month of requests; each failure is followed by a line naming its upstream. "
        f"Exactly one request to {endpoint} failed with status {status}. Submit its upstream (name-N)."
    )
    expert: tuple[Call, ...] = (
        ("search", {"pattern": f"{endpoint} status={status}", "path": "logs/app.log"}),
        ("read_lines", {"path": "logs/app.log", "start": str(line_no), "count": "2"}),
        ("submit", {"answer": answer}),
    )
    # the shortcut: the first failure with that status, whatever its endpoint
    at = next(i for i, line in enumerate(lines) if f" status={status} " in line)
    decoy = lines[at + 1].split("upstream=", 1)[1].split(" ", 1)[0]
    shortcut: tuple[Call, ...] = (
        ("search", {"pattern": f"status={status}", "path": "logs/app.log"}),
        ("read_lines", {"path": "logs/app.log", "start": str(at + 1), "count": "2"}),
        ("submit", {"answer": decoy}),
    )
    files = {"logs/app.log": "\n".join(lines) + "\n"}
    return Instance(key, "log", _task("log", key, prompt, files, answer), expert, shortcut)


_FILLER = (
    "The parties shall act in good faith in all matters under this agreement.",
    "Notices are given in writing to the addresses stated in the schedule.",
    "Neither party is liable for delays caused by events beyond its reasonable control.",
    "This clause survives the termination of the agreement.",
    "Headings are for convenience only and do not affect interpretation.",
    "Each party bears its own costs of negotiating this agreement.",
    "Amendments are valid only when made in writing and signed by both parties.",
)


def _doc(rng: random.Random) -> Instance:
    term, unit = rng.choice(_TERMS)
    spots = rng.sample(range(1, DOC_CLAUSES + 1), 2 * len(_TERMS))
    text_of: dict[int, str] = {}
    value_clause = answer = ""
    for j, (name, u) in enumerate(_TERMS):
        named, stated = spots[2 * j], spots[2 * j + 1]
        value = str(rng.randint(2, 90) * (1000 if u == "EUR" else 1))
        text_of[named] = f"The {name} is set out in clause {stated}."
        text_of[stated] = f"The amount agreed is {value} {u}."
        if name == term:
            answer, value_clause = value, str(stated)
    lines: list[str] = []
    heading_line = 0
    for i in range(1, DOC_CLAUSES + 1):
        lines.append(f"Clause {i}.")
        if str(i) == value_clause:
            heading_line = len(lines)
        lines.append(text_of.get(i) or " ".join(rng.sample(_FILLER, 2)))
        lines.append("")
    key = f"doc:{term}:{value_clause}:{answer}:" + ",".join(map(str, spots))
    prompt = (
        f"docs/contract.md is the customer's agreement. What is the {term} ({unit})? The clause that "
        "names it refers to the clause that states it. Submit the number."
    )
    expert: tuple[Call, ...] = (
        ("search", {"pattern": term, "path": "docs/contract.md"}),
        ("search", {"pattern": f"Clause {value_clause}.", "path": "docs/contract.md"}),
        ("read_lines", {"path": "docs/contract.md", "start": str(heading_line), "count": "2"}),
        ("submit", {"answer": answer}),
    )
    # the shortcut: the clause number the reference names, submitted as if it were the amount
    shortcut: tuple[Call, ...] = (
        ("search", {"pattern": term, "path": "docs/contract.md"}),
        ("submit", {"answer": value_clause}),
    )
    files = {"docs/contract.md": "\n".join(lines) + "\n"}
    return Instance(key, "doc", _task("doc", key, prompt, files, answer), expert, shortcut)


_MAKERS = {"find": _find, "log": _log, "doc": _doc}


def parse_families(arg: str) -> tuple[str, ...]:
    if not arg:
        return FAMILIES
    chosen = tuple(f.strip() for f in arg.split(",") if f.strip())
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise ValueError(f"unknown longctx families {unknown or arg!r}; choose from {', '.join(FAMILIES)}")
    return chosen


def longctx_instances(n: int, seed: int, split: Split, families: str = "") -> list[Instance]:
    """`n` instances of `split`, families in turn (see the module docstring)."""
    chosen = parse_families(families)
    rng = random.Random(f"longctx:{seed}")
    seen: set[str] = set()
    out: list[Instance] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n + 100:
            raise ValueError(f"could not make {n} distinct {split} tasks")
        inst = _MAKERS[chosen[len(out) % len(chosen)]](rng)
        if inst.task.split != split or inst.key in seen:
            continue
        seen.add(inst.key)
        out.append(inst)
    return out


def longctx_tasks(n: int, seed: int, split: Split, families: str = "") -> list[Task]:
    """The tasks of `longctx_instances`."""
    return [i.task for i in longctx_instances(n, seed, split, families)]


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return longctx_tasks(request.n, request.seed, request.split, request.arg)
