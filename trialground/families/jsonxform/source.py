"""The `jsonxform` family: a JSON file in, a transformed JSON file out, by a Python program.

`input.json` holds 15-40 employee records (id, name, team, city, hours, score, tags, an optional nested
manager, active; some scores missing), random per task. The prompt asks for one of seven transformations
with random parameters: totals per group, a filtered projection, flattening nested objects into dotted
keys, renaming and dropping keys with a default, an index of tags, the top N by a field, a per-group
summary. The agent writes `transform.py`, run as `python3 transform.py input.json output.json`; the hidden
check (the shared `check_files.py`) runs it on the workspace's input and on two hidden inputs of the same
kind and compares the parsed JSON (floats to 6 decimals) with what the reference (`transforms.py`) writes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from trialground.families.filetask import filled, program_task, question_tasks
from trialground.families.jsonxform.transforms import transform
from trialground.tasks.model import Split, Task
from trialground.tasks.sources import SourceRequest

SOLUTION = "transform.py"
_REFERENCE = (Path(__file__).parent / "transforms.py").read_text(encoding="utf-8")
NAMES = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lia", "Max", "Noa")
TEAMS = ("infra", "data", "web", "mobile", "sec")
CITIES = ("Lyon", "Oslo", "Porto", "Quito", "Tartu")
TAGS = ("oncall", "remote", "lead", "new", "parttime", "mentor")
FIELDS = ("id", "name", "team", "city", "hours", "score", "active")


def records(rng: random.Random) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in rng.sample(range(1, 200), rng.randint(15, 40)):
        r: dict[str, object] = {"id": i, "name": f"{rng.choice(NAMES)} {chr(65 + rng.randrange(26))}.",
                                "team": rng.choice(TEAMS), "city": rng.choice(CITIES),
                                "hours": rng.randint(4, 60)}  # fmt: skip
        if rng.random() < 0.85:
            r["score"] = round(rng.uniform(1, 100), 2)
        r["tags"] = rng.sample(TAGS, rng.randint(0, 3))
        r["manager"] = {"name": rng.choice(NAMES), "level": rng.randint(1, 4)} if rng.random() < 0.7 else None
        r["active"] = rng.random() < 0.75
        out.append(r)
    return out


def spec_of(rng: random.Random) -> tuple[dict[str, object], str]:
    """A random transformation and its words."""
    kind = rng.choice(("group_total", "select", "flatten", "rename", "tag_index", "top", "summary"))
    by, field = rng.choice(("team", "city")), rng.choice(("hours", "score"))
    if kind == "group_total":
        return {"kind": kind, "by": by, "field": field}, (
            f"an object mapping each {by} to the total {field} of its records (records without a {field} "
            "are skipped; totals rounded to 2 decimals)."
        )
    if kind == "select":
        keep = [k for k in FIELDS if k == "id" or rng.random() < 0.4]
        picks = (("hours", ">=", rng.randint(10, 50)), ("score", "<", rng.randint(20, 80)),
                 ("active", "==", rng.random() < 0.5), ("city", "==", rng.choice(CITIES)))  # fmt: skip
        pick = rng.choice(picks)
        words = json.dumps(pick[2])
        return {"kind": kind, "field": pick[0], "op": pick[1], "value": pick[2], "keep": keep}, (
            f"a list of the records whose `{pick[0]}` {pick[1]} {words} (records without that key are "
            f"left out), ordered by id ascending, each reduced to the keys {json.dumps(keep)} (a key the "
            "record lacks is left out)."
        )
    if kind == "flatten":
        return {"kind": kind}, (
            "the same list of records in the same order, flattened: a nested object's keys become "
            "`outer.inner` keys of the record (e.g. `manager.name`), and a key whose value is null is left "
            "out; lists stay as they are."
        )
    if kind == "rename":
        names = dict(rng.sample([("name", "full_name"), ("team", "group"), ("hours", "weekly_hours"),
                                 ("score", "rating"), ("city", "office")], 2))  # fmt: skip
        drop = rng.choice(("tags", "manager", "active"))
        default = rng.choice((0, -1, 50))
        new_score = names.get("score", "score")
        return {"kind": kind, "names": names, "drop": drop, "default": default}, (
            f"the same list of records in the same order, with the keys renamed by {json.dumps(names)}, "
            f"the key `{drop}` removed, and `{new_score}` set to {default} in every record without a "
            "score."
        )
    if kind == "tag_index":
        return {"kind": kind}, "an object mapping each tag that occurs to the ascending list of the ids of "\
            "the records carrying it."  # fmt: skip
    if kind == "top":
        n = rng.randint(3, 8)
        return {"kind": kind, "field": field, "n": n}, (
            f"the list of the names of the {n} records with the highest {field} (records without it are "
            "skipped), highest first, ties by the smaller id."
        )
    return {"kind": kind, "by": by}, (
        f"an object mapping each {by} to an object with its number of records (`count`), their largest "
        "hours (`max_hours`) and how many of them are active (`active`)."
    )


def make_task(
    spec: dict[str, object], words: str, inputs: list[list[dict[str, object]]], split: Split
) -> Task:
    prompt = (
        "input.json in your workspace is a list of employee records (keys id, name, team, city, hours, score "
        "(sometimes missing), tags, manager (an object or null), active). Write "
        f"{SOLUTION} so that `python3 {SOLUTION} input.json output.json` writes to output.json {words}\n\n"
        "It is also run on other inputs of the same kind, so compute the result, do not write it down. Use "
        "the standard library only."
    )
    return program_task(
        domain="jsonxform",
        prompt=prompt,
        solution=SOLUTION,
        starter="import json\nimport sys\n",
        inputs=[{"input.json": json.dumps(data, indent=1)} for data in inputs],
        expected=lambda files: json.dumps(transform(json.loads(files["input.json"]), spec)),
        labels=("workspace input.json", "hidden input"),
        compare="json",
        args=("input.json", "output.json"),
        output="output.json",
        reference=filled(_REFERENCE, "SPEC", spec),
        split=split,
        metadata={"transform": str(spec["kind"]), "key": json.dumps(spec, sort_keys=True)},
    )


def jsonxform_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its transformation and data."""
    return question_tasks(
        "jsonxform", n, seed, split, question=spec_of, make_input=records, make_task=make_task
    )


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return jsonxform_tasks(request.n, request.seed, request.split)
