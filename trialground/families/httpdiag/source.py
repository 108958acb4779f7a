"""The `httpdiag` family: a local HTTP service misbehaves; find why from its logs and responses, fix its
configuration.

The workspace holds `app.py` (a small JSON API), `config.json`, and `logs/access.log` / `logs/error.log`
from its clients. One key of the configuration is wrong, one of four kinds (random values per task): the
route prefix the clients use (404s), the name of the API-key header they send (401s), the largest request
body (413s), the time the report endpoint may take (504s). The agent can run the service and call it.

The hidden check (`check_http.py`) requires the other keys unchanged and the faulty one within what the
clients need (no more than the stated bound), then starts the pristine service with that configuration
and replays the clients' requests and others like them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "config.json"
_HERE = Path(__file__).parent
_APP = (_HERE / "app.py").read_text(encoding="utf-8")
_CHECK = check_source(Path(__file__).parent, "check_http.py")
HEADERS = ("X-Api-Key", "X-Auth-Token", "X-Client-Key", "Api-Token", "X-Service-Key")
AGENTS = ("billing-job/2.1", "mobile/5.3", "reports-cron/1.0", "web/7.4")
KINDS = ("prefix", "auth", "body", "timeout")


def instance(rng: random.Random) -> tuple[str, dict, dict, dict, list[dict], list[str], int]:
    """(kind, the right config, the broken config, the check's rule, the requests, the log lines, report
    ms)."""
    version = rng.randint(1, 4)
    good: dict[str, Any] = {
        "api_prefix": f"/api/v{version}",
        "auth_header": rng.choice(HEADERS),
        "api_key": f"k-{rng.getrandbits(32):08x}",
        "max_body_bytes": rng.choice((4096, 8192, 16384)),
        "handler_timeout_ms": rng.choice((1000, 1500, 2000)),
        "workers": rng.randint(2, 8),
    }
    report_ms = rng.randint(300, 900)
    kind = rng.choice(KINDS)
    bad = dict(good)
    if kind == "prefix":
        bad["api_prefix"] = f"/api/v{version % 4 + 1}"
        rule = {"type": "equals", "value": good["api_prefix"]}
    elif kind == "auth":
        bad["auth_header"] = rng.choice([h for h in HEADERS if h != good["auth_header"]])
        rule = {"type": "equals", "value": good["auth_header"]}
    elif kind == "body":
        bad["max_body_bytes"] = rng.choice((256, 512, 1024))
        rule = {"type": "range", "low": 0, "high": 65536}
    else:
        bad["handler_timeout_ms"] = rng.choice((100, 150, 200, 250))
        rule = {"type": "range", "low": report_ms, "high": 5000}
    headers = {good["auth_header"]: good["api_key"]}
    sizes = sorted(rng.sample(range(300, 3000), 3))
    requests = [{"method": "GET", "path": f"{good['api_prefix']}/items/{rng.randint(1, 999)}", "body": 0,
                 "headers": headers} for _ in range(3)]  # fmt: skip
    requests += [{"method": "POST", "path": f"{good['api_prefix']}/echo", "body": s, "headers": headers}
                 for s in sizes]  # fmt: skip
    requests.append({"method": "GET", "path": f"{good['api_prefix']}/report", "body": 0, "headers": headers})
    if kind == "body":
        rule["low"] = sizes[-1]
    return kind, good, bad, rule, requests, _logs(kind, bad, requests, report_ms, rng), report_ms


def _logs(kind: str, bad: dict, requests: list[dict], report_ms: int, rng: random.Random) -> list[str]:
    access, errors = [], []
    for i, r in enumerate(requests):
        stamp = f"2026-11-30T10:{i:02d}:{rng.randint(0, 59):02d}Z"
        status = 200
        if kind == "prefix":
            status = 404
        elif kind == "auth":
            status = 401
            errors.append(f"{stamp} 401 missing or wrong header {bad['auth_header']} "
                          f"(request headers: {', '.join(r['headers'])}, User-Agent)")  # fmt: skip
        elif kind == "body" and r["body"] > bad["max_body_bytes"]:
            status = 413
            errors.append(f"{stamp} 413 body of {r['body']} bytes > max_body_bytes {bad['max_body_bytes']}")
        elif kind == "timeout" and r["path"].endswith("/report"):
            status = 504
            errors.append(f"{stamp} 504 handler /report took {report_ms} ms > {bad['handler_timeout_ms']} ms")
        access.append(f'{stamp} "{r["method"]} {r["path"]}" {status} {r["body"]} "{rng.choice(AGENTS)}"')
    return ["\n".join(access) + "\n", "\n".join(errors) + ("\n" if errors else "")]


def make_task(rng: random.Random, split: Split, key: str) -> Task:
    kind, good, bad, rule, requests, (access, errors), report_ms = instance(rng)
    hidden = [dict(r, path=r["path"].replace("/items/", "/items/9")) if "/items/" in r["path"] else r
              for r in requests]  # fmt: skip
    app = _APP.replace("REPORT_MS = 300", f"REPORT_MS = {report_ms}", 1)
    spec = {"solution": SOLUTION, "original": bad, "key": _KEY[kind], "rule": rule, "app": app,
            "requests": requests + hidden}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    prompt = (
        "The service in your workspace (`python3 app.py`, configured by config.json) fails its clients: "
        "logs/access.log and logs/error.log show what they got. Find the cause and fix config.json so that "
        "the requests in the access log succeed. Change only what is wrong, and keep limits no larger than "
        "the clients need (a body limit at most 65536 bytes, a handler timeout at most 5000 ms)."
    )
    return Task(
        domain="httpdiag",
        prompt=prompt,
        files={
            "app.py": app,
            SOLUTION: json.dumps(bad, indent=2) + "\n",
            "logs/access.log": access,
            "logs/error.log": errors,
        },
        hidden_checks={"check_http.py": check},
        reference=json.dumps(
            good if rule["type"] == "equals" else {**bad, _KEY[kind]: rule["low"]}, indent=2
        ),
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 60}
        ),
        split=split,
        metadata={"family": "httpdiag", "fault": kind, "key": key},
    )


_KEY = {
    "prefix": "api_prefix",
    "auth": "auth_header",
    "body": "max_body_bytes",
    "timeout": "handler_timeout_ms",
}


def httpdiag_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its seed-drawn service."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        key = str(rng.getrandbits(48))
        return key, lambda: make_task(random.Random(int(key)), split, key)

    return draw_tasks("httpdiag", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return httpdiag_tasks(request.n, request.seed, request.split)
