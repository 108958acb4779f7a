"""The `depgraph` family's scripted expert: recognises the question from the prompt and writes its own
program (a different one from the reference: depth-first search with memos, Tarjan's components for
cycles, a sorted scan instead of a heap)."""

from __future__ import annotations

from trialground.tasks.model import Task

_COMMON = """import sys
from functools import lru_cache

sys.setrecursionlimit(10000)
deps = {}
minutes = {}
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    left, _, right = line.partition(":")
    name, _, rest = left.partition(" [")
    deps[name.strip()] = right.split()
    minutes[name.strip()] = int(rest.rstrip("]"))


def closure(start):
    seen = set()
    stack = [start]
    while stack:
        t = stack.pop()
        if t not in seen:
            seen.add(t)
            stack.extend(deps.get(t, ()))
    return seen


def serial(chosen):
    done, out = set(), []
    while len(out) < len(chosen):
        ready = sorted(t for t in chosen if t not in done and all(d in done for d in deps[t] if d in chosen))
        done.add(ready[0])
        out.append(ready[0])
    return out


users = {t: set() for t in deps}
for t, ds in deps.items():
    for d in ds:
        users[d].add(t)
"""
_QUESTIONS = {
    "in the order a serial build runs them": "print('\\n'.join(serial(closure('all'))))\n",
    "lies on a cycle": """index, low, stack, on, found = {}, {}, [], set(), []


def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in deps[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1 or v in deps[v]:
            found.extend(comp)


for v in deps:
    if v not in index:
        visit(v)
for t in sorted(found):
    print(t)
""",
    "must be rebuilt": """changed = open(sys.argv[2]).read().split()
hit = set()
for c in changed:
    stack = [c]
    while stack:
        t = stack.pop()
        if t not in hit:
            hit.add(t)
            stack.extend(users[t])
for t in serial(hit):
    print(t)
""",
    "print the minute at which": """@lru_cache(None)
def end(t):
    return minutes[t] + max([end(d) for d in deps[t]] + [0])


print(end("all"))
""",
    "parallel build stages": """@lru_cache(None)
def stage(t):
    return max([stage(d) + 1 for d in deps[t]] + [0])


need = closure("all")
for k in range(max(stage(t) for t in need) + 1):
    print(" ".join(sorted(t for t in need if stage(t) == k)))
""",
    "other targets that depend on it": """for t in sorted(deps):
    seen, stack = set(), list(users[t])
    while stack:
        u = stack.pop()
        if u not in seen:
            seen.add(u)
            stack.extend(users[u])
    print(t, len(seen - {t}))
""",
}


def solve(task: Task) -> str | None:
    """The expert's deps.py for `task`, or None when it does not recognise the question."""
    for phrase, body in _QUESTIONS.items():
        if phrase in task.prompt:
            return _COMMON + "\n" + body
    return None
