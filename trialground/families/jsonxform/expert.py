"""The `jsonxform` family's scripted expert: reads the transformation from the prompt and writes its own
program (one function per kind, written apart from the reference)."""

from __future__ import annotations

import json
import re

from trialground.tasks.model import Task

_HEAD = "import json, sys\n\nrecs = json.load(open(sys.argv[1]))\n"
_TAIL = "\njson.dump(out, open(sys.argv[2], 'w'))\n"


def _group_total(m: re.Match[str]) -> str:
    by, field = m[1], m[2]
    return (f"out = {{}}\nfor r in recs:\n    if {field!r} in r:\n"
            f"        out[r[{by!r}]] = out.get(r[{by!r}], 0.0) + r[{field!r}]\n"
            "out = {k: round(v, 2) for k, v in out.items()}\n")  # fmt: skip


def _select(m: re.Match[str]) -> str:
    field, op, value, keep = m[1], m[2], json.loads(m[3]), json.loads(m[4])
    test = f"r[{field!r}] {op} {value!r}"
    return (f"hit = sorted((r for r in recs if {field!r} in r and {test}), key=lambda r: r['id'])\n"
            f"out = [{{k: r[k] for k in {keep!r} if k in r}} for r in hit]\n")  # fmt: skip


def _rename(m: re.Match[str]) -> str:
    names, drop, key, default = json.loads(m[1]), m[2], m[3], int(m[4])
    return ("out = []\nfor r in recs:\n"
            f"    r = {{{names!r}.get(k, k): v for k, v in r.items() if k != {drop!r}}}\n"
            f"    if {key!r} not in r:\n        r[{key!r}] = {default}\n    out.append(r)\n")  # fmt: skip


def _top(m: re.Match[str]) -> str:
    n, field = int(m[1]), m[2]
    return (f"have = [r for r in recs if {field!r} in r]\n"
            f"have.sort(key=lambda r: (-r[{field!r}], r['id']))\n"
            f"out = [r['name'] for r in have[:{n}]]\n")  # fmt: skip


def _summary(m: re.Match[str]) -> str:
    by = m[1]
    return ("out = {}\nfor r in recs:\n"
            f"    s = out.setdefault(r[{by!r}], {{'count': 0, 'max_hours': 0, 'active': 0}})\n"
            "    s['count'] += 1\n    s['max_hours'] = max(s['max_hours'], r['hours'])\n"
            "    s['active'] += bool(r['active'])\n")  # fmt: skip


_FLATTEN = """def flat(d, pre=""):
    res = {}
    for k, v in d.items():
        if isinstance(v, dict):
            res.update(flat(v, pre + k + "."))
        elif v is not None:
            res[pre + k] = v
    return res


out = [flat(r) for r in recs]
"""
_TAGS = """out = {}
for r in sorted(recs, key=lambda r: r["id"]):
    for t in r["tags"]:
        out.setdefault(t, []).append(r["id"])
"""
_RULES = (
    (r"mapping each (\w+) to the total (\w+) of its records", _group_total),
    (r"records whose `(\w+)` (>=|<|==) (.+?) \(records without.*?reduced to the keys (\[.*?\])", _select),
    (r"keys renamed by (\{.*?\}), the key `(\w+)` removed, and `(\w+)` set to (-?\d+)", _rename),
    (r"names of the (\d+) records with the highest (\w+)", _top),
    (r"mapping each (\w+) to an object with its number of records", _summary),
    (r"flattened:", lambda m: _FLATTEN),
    (r"mapping each tag that occurs", lambda m: _TAGS),
)


def solve(task: Task) -> str | None:
    """The expert's transform.py for `task`, or None when it does not recognise the transformation."""
    for pattern, body in _RULES:
        m = re.search(pattern, task.prompt, re.S)
        if m:
            return _HEAD + body(m) + _TAIL
    return None
