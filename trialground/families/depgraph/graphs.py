"""The reference program of the `depgraph` family: this file, with its QUESTION line filled in, is a task's
reference `deps.py`, and the generator calls `answer` to compute the expected output.

Usage: python3 deps.py deps.txt [changed.txt]
"""

import heapq
import re
import sys

QUESTION = "order"  # filled in
GOAL = "all"
LINE = re.compile(r"^([\w.-]+) \[(\d+)\]:((?: [\w.-]+)*)$")


def parse(text: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """`target [minutes]: dep dep ...` lines (blank lines and `#` comments skipped), in file order."""
    deps: dict[str, list[str]] = {}
    minutes: dict[str, int] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line:
            continue
        m = LINE.match(line)
        if m is None:
            raise ValueError(f"bad line: {raw!r}")
        deps[m[1]] = m[3].split()
        minutes[m[1]] = int(m[2])
    return deps, minutes


def needed(deps: dict[str, list[str]], goal: str) -> set[str]:
    seen, todo = set(), [goal]
    while todo:
        t = todo.pop()
        if t not in seen:
            seen.add(t)
            todo.extend(deps.get(t, []))
    return seen


def build_order(deps: dict[str, list[str]], chosen: set[str]) -> list[str]:
    """Kahn's algorithm over `chosen`: the alphabetically first ready target goes next."""
    waiting = {t: {d for d in deps[t] if d in chosen} for t in chosen}
    ready = [t for t, w in waiting.items() if not w]
    heapq.heapify(ready)
    out = []
    while ready:
        t = heapq.heappop(ready)
        out.append(t)
        for u, w in waiting.items():
            if t in w:
                w.discard(t)
                if not w:
                    heapq.heappush(ready, u)
    return out


def dependants(deps: dict[str, list[str]], start: set[str]) -> set[str]:
    """`start` and every target that depends on one of them, directly or not."""
    out = set(start)
    grew = True
    while grew:
        grew = False
        for t, ds in deps.items():
            if t not in out and out.intersection(ds):
                out.add(t)
                grew = True
    return out


def depth(deps: dict[str, list[str]], t: str, memo: dict[str, int]) -> int:
    if t not in memo:
        memo[t] = 1 + max((depth(deps, d, memo) for d in deps[t]), default=-1)
    return memo[t]


def finish(deps: dict[str, list[str]], minutes: dict[str, int], t: str, memo: dict[str, int]) -> int:
    if t not in memo:
        memo[t] = minutes[t] + max((finish(deps, minutes, d, memo) for d in deps[t]), default=0)
    return memo[t]


def answer(question: str, deps_text: str, changed_text: str = "") -> str:
    deps, minutes = parse(deps_text)
    if question == "order":
        return "\n".join(build_order(deps, needed(deps, GOAL))) + "\n"
    if question == "cycles":
        on_cycle = [t for t in deps if any(t in needed(deps, d) for d in deps[t])]
        return "".join(f"{t}\n" for t in sorted(on_cycle))
    if question == "rebuild":
        changed = set(changed_text.split())
        return "".join(f"{t}\n" for t in build_order(deps, dependants(deps, changed)))
    if question == "critical":
        return f"{finish(deps, minutes, GOAL, {})}\n"
    if question == "stages":
        memo: dict[str, int] = {}
        stages: dict[int, list[str]] = {}
        for t in needed(deps, GOAL):
            stages.setdefault(depth(deps, t, memo), []).append(t)
        return "".join(" ".join(sorted(stages[k])) + "\n" for k in sorted(stages))
    if question == "users":
        return "".join(f"{t} {len(dependants(deps, {t})) - 1}\n" for t in sorted(deps))
    raise ValueError(f"unknown question {question!r}")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        deps_text = f.read()
    changed_text = ""
    if len(sys.argv) > 2:
        with open(sys.argv[2], encoding="utf-8") as f:
            changed_text = f.read()
    sys.stdout.write(answer(QUESTION, deps_text, changed_text))


if __name__ == "__main__":
    main()
