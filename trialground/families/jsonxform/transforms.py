"""The reference program of the `jsonxform` family: this file, with its SPEC line filled in, is a task's
reference `transform.py`, and the generator calls `transform` to compute the expected output.

Usage: python3 transform.py input.json output.json
"""

import json
import sys

SPEC = {"kind": "group_total", "by": "team", "field": "hours"}  # filled in
OPS = {">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "==": lambda a, b: a == b}


def flat(record: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        elif value is not None:
            out[prefix + key] = value
    return out


def transform(records: list, spec: dict) -> object:
    kind = spec["kind"]
    if kind == "group_total":
        totals: dict = {}
        for r in records:
            if spec["field"] in r:
                totals[r[spec["by"]]] = totals.get(r[spec["by"]], 0) + r[spec["field"]]
        return {k: round(v, 2) for k, v in totals.items()}
    if kind == "select":
        op = OPS[spec["op"]]
        chosen = [r for r in records if spec["field"] in r and op(r[spec["field"]], spec["value"])]
        return [{k: r[k] for k in spec["keep"] if k in r} for r in sorted(chosen, key=lambda r: r["id"])]
    if kind == "flatten":
        return [flat(r) for r in records]
    if kind == "rename":
        out = []
        for r in records:
            r = {spec["names"].get(k, k): v for k, v in r.items() if k != spec["drop"]}
            r.setdefault(spec["names"].get("score", "score"), spec["default"])
            out.append(r)
        return out
    if kind == "tag_index":
        index: dict = {}
        for r in records:
            for tag in r["tags"]:
                index.setdefault(tag, []).append(r["id"])
        return {tag: sorted(ids) for tag, ids in index.items()}
    if kind == "top":
        ranked = sorted(
            (r for r in records if spec["field"] in r), key=lambda r: (-r[spec["field"]], r["id"])
        )
        return [r["name"] for r in ranked[: spec["n"]]]
    if kind == "summary":
        groups: dict = {}
        for r in records:
            groups.setdefault(r[spec["by"]], []).append(r)
        return {
            k: {
                "count": len(rs),
                "max_hours": max(r["hours"] for r in rs),
                "active": sum(1 for r in rs if r["active"]),
            }
            for k, rs in groups.items()
        }
    raise ValueError(f"unknown transformation {kind!r}")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        records = json.load(f)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(transform(records, SPEC), f, indent=2)


if __name__ == "__main__":
    main()
