"""The `gitrepair` family: a small git repository left in a broken state, repaired by a bash script.

The workspace holds `make_repo.sh`, which builds the broken repository in `repo/` (random file contents per
task), and `fix.sh`, where the agent writes the repair, run inside the repository as `bash fix.sh`. Five
kinds of breakage: a merge stopped on conflict markers (resolve keeping both sides, conclude the merge), a
commit made on a detached HEAD and left behind (recover it on a branch), a wrong file committed earlier in
history (undo that commit with one new commit, history kept), commits made on main that belong on a new
branch (move them), and a damaged working tree and index (restore them, keeping an untracked file).

The hidden check (`check_git.py`) builds its own copy of the workspace's repository and a hidden one of the
same kind with other contents, records what each repaired repository must hold, runs a copy of `fix.sh` in
each and inspects the result with real `git`: a script that writes down the visible answer (a commit id,
a file's contents) fails on the hidden repository.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trialground.families.checks import check_source
from trialground.families.draw import draw_tasks
from trialground.tasks.model import Split, Task, VerifierSpec
from trialground.tasks.sources import SourceRequest

SOLUTION = "fix.sh"
_CHECK = check_source(Path(__file__).parent, "check_git.py")
WORDS = ("alpha", "beta", "gamma", "delta", "omega", "cache", "queue", "proxy", "shard", "token", "retry",
         "limit", "pool", "batch", "stream", "index", "route", "vault", "probe", "ledger")  # fmt: skip
FILES = ("app.py", "util.py", "README.md", "notes.md", "deploy.yaml", "Makefile", "server.go", "lib.rs")
BRANCHES = ("feature/login", "feature/export", "topic/cache", "fix/timeouts", "feature/search", "topic/api")
SECRETS = ("secrets.env", "id_rsa", "credentials.json", ".env.local", "dump.sql")
HEADER = """set -e
export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
rm -rf repo && mkdir repo && cd repo
git init -q -b main
git config user.name Dev && git config user.email dev@example.org && git config merge.conflictStyle merge
"""


def lines(rng: random.Random, n: int) -> list[str]:
    return [f"{rng.choice(WORDS)}_{rng.randint(0, 999)} = {rng.choice(WORDS)}" for _ in range(n)]


def write(name: str, body: list[str]) -> str:
    return f"cat > '{name}' <<'EOF'\n" + "".join(line + "\n" for line in body) + "EOF\n"


def commit(message: str, *paths: str) -> str:
    return f"git add {' '.join(repr(p) for p in paths) or '-A'} && git commit -q -m '{message}'\n"


def history(rng: random.Random, n: int) -> tuple[str, list[str]]:
    """`n` ordinary commits on main, each touching one of a few files; the script and the file names."""
    names = rng.sample(FILES, k=3)
    out = []
    for i in range(n):
        name = names[i % len(names)]
        out.append(write(name, lines(rng, rng.randint(2, 6))) + commit(f"update {name} ({i})", name))
    return "".join(out), names


@dataclass(frozen=True)
class Scenario:
    key: str  # what the instance asks (kind and the names the prompt gives)
    kind: str
    params: dict[str, object]
    text: str
    reference: str


def scenario(rng: random.Random) -> Scenario:
    kind = rng.choice(("conflict", "detached", "revert", "wrongbranch", "restore"))
    branch, k = rng.choice(BRANCHES), rng.randint(1, 3)
    if kind == "conflict":
        name = rng.choice(("settings.ini", "config.txt", "hosts.list"))
        return Scenario(
            f"conflict:{name}:{branch}",
            kind,
            {"file": name, "branch": branch},
            f"`git merge {branch}` on main stopped with a conflict in {name}: both sides appended lines at "
            f"the end. Resolve it by keeping main's new lines followed by {branch}'s new lines (no conflict "
            "markers), and conclude the merge with a merge commit on main.",
            f"grep -v -e '^<<<<<<< ' -e '^=======$' -e '^>>>>>>> ' {name} > .resolved\nmv .resolved {name}\n"
            f"git add {name}\ngit commit -q --no-edit\n",
        )
    if kind == "detached":
        return Scenario(
            "detached",
            kind,
            {},
            "Someone committed a fix on a detached HEAD and then ran `git checkout main`; that commit is on "
            "no branch now. Create a branch `rescue` that points at it, and leave main checked out and "
            "unchanged.",
            'git branch rescue "$(git reflog -n 1 --skip=1 --format=%H HEAD)"\n',
        )
    if kind == "revert":
        name = rng.choice(SECRETS)
        return Scenario(
            f"revert:{name}",
            kind,
            {"file": name},
            f"An earlier commit on main added {name} by mistake (later commits built on it). Undo that "
            "commit with exactly one new commit on top of main, without rewriting history; everything else "
            "stays.",
            f"git rm -q -- {name}\ngit commit -q -m 'remove {name}'\n",
        )
    if kind == "wrongbranch":
        return Scenario(
            f"wrongbranch:{branch}:{k}",
            kind,
            {"branch": branch, "k": k},
            f"The last {k} commit(s) on main belong on a new branch {branch}. Create {branch} holding them "
            "and move main back to the commit before them; keep main checked out with a clean working tree.",
            f"git branch {branch} main\ngit reset -q --hard HEAD~{k}\n",
        )
    keep = rng.choice(("notes.txt", "scratch.md", "todo.txt"))
    return Scenario(
        f"restore:{keep}",
        kind,
        {"keep": keep},
        "The working tree and the index of main were damaged (a tracked file deleted, one edited, an "
        f"unwanted change staged). Restore both to the last commit, but keep the untracked file {keep} as "
        "it is; do not move main.",
        "git read-tree HEAD\ngit checkout-index -a -f\n",
    )


def build(s: Scenario, rng: random.Random) -> tuple[str, dict[str, str]]:
    """The script that builds this scenario's broken repository from `rng`, and what the check compares."""
    body, names = history(rng, rng.randint(3, 5))
    expected: dict[str, str] = {}
    if s.kind == "conflict":
        name, branch = str(s.params["file"]), str(s.params["branch"])
        base, ours, theirs = lines(rng, 3), lines(rng, rng.randint(1, 3)), lines(rng, rng.randint(1, 3))
        body += write(name, base) + commit(f"add {name}", name) + f"git branch '{branch}'\n"
        body += write(name, base + ours) + commit(f"extend {name} on main", name)
        body += f"git checkout -q '{branch}'\n" + write(name, base + theirs) + commit(f"extend {name}", name)
        body += f"git checkout -q main\ngit merge -q '{branch}' >/dev/null 2>&1 || true\n"
        expected["content"] = "".join(line + "\n" for line in base + ours + theirs)
    elif s.kind == "detached":
        body += "git checkout -q --detach\n" + write(names[0], lines(rng, 4)) + commit("hotfix", names[0])
        body += "git checkout -q main\n"
    elif s.kind == "revert":
        body += write(str(s.params["file"]), [f"KEY_{rng.randint(0, 9999)}=x{rng.getrandbits(32):08x}"])
        body += commit("add local setup", str(s.params["file"]))
        later, _ = history(rng, rng.randint(1, 3))
        body += later
    elif s.kind == "wrongbranch":
        later, _ = history(rng, int(str(s.params["k"])))
        body += later
    else:
        body += f"rm -f '{names[0]}'\n" + write(names[1], lines(rng, 2))
        body += write(names[2], lines(rng, 3)) + f"git add '{names[2]}'\n"
        body += write(str(s.params["keep"]), lines(rng, 2))
    return HEADER + body, expected


def make_task(s: Scenario, data_seed: int, split: Split) -> Task:
    visible, expected = build(s, random.Random(data_seed))
    hidden, hidden_expected = build(s, random.Random(data_seed ^ 0x5EED))
    spec = {"solution": SOLUTION, "kind": s.kind, "params": s.params, "build": visible, "expected": expected,
            "hidden_build": hidden, "hidden_expected": hidden_expected, "timeout_s": 30}  # fmt: skip
    check = _CHECK.replace('SPEC_JSON = "{}"', f"SPEC_JSON = {json.dumps(json.dumps(spec))}", 1)
    prompt = (
        f"Run `bash make_repo.sh` in your workspace: it builds a git repository in repo/. {s.text}\n\n"
        f"Write a bash script {SOLUTION} that makes this repair when run inside the repository as `bash "
        f"{SOLUTION}` (git and standard tools only; do not change .git/config). It is also run on another "
        "repository broken the same way with other contents, so find what to change with git, do not write "
        "commit ids or file contents down."
    )
    return Task(
        domain="gitrepair",
        prompt=prompt,
        files={"make_repo.sh": visible, SOLUTION: "#!/bin/bash\n# run inside repo/: bash ../fix.sh\n"},
        hidden_checks={"check_git.py": check},
        reference=f"#!/bin/bash\nset -e\n{s.reference}",
        verifier=VerifierSpec(
            kind="check_program", params={"solution_path": SOLUTION, "check_timeout_s": 120}
        ),
        split=split,
        metadata={"family": "gitrepair", "template": s.kind, "key": s.key},
    )


def gitrepair_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its scenario and its contents."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        s = scenario(rng)
        data_seed = rng.getrandbits(48)
        return f"{s.key}|{data_seed}", lambda: make_task(s, data_seed, split)

    return draw_tasks("gitrepair", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return gitrepair_tasks(request.n, request.seed, request.split)
