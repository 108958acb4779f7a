"""ops: generated operations-troubleshooting tasks — repair a broken setup in the workspace.

Families (each a broken setup plus the symptom the prompt describes):
- `config_key`: a service config (JSON or INI) has a misspelled key; the service refuses to start.
- `config_value`: a config value is out of range (port, log level, workers).
- `port_conflict`: the configured port is held by another service (listed in etc/ports.lock).
- `pid_path`: the pid file points into a directory that does not exist (the service cannot write it).
- `script_bug`: a bash report script (`run.sh`) has a bug: a misspelled variable, a wrong glob, a wrong
  directory, `mkdir` without `-p`.
- `env_file`: `start.sh` + `.env`: a misspelled value or variable, variables not exported, a wrong path.
- `import_error`: a Python service imports a helper module by the wrong name.

Grading (`check_program`): the hidden check `check_ops.py` runs after the episode with the workspace as
cwd. It never trusts code the agent could change: config families run a pristine copy of the service
(embedded in the check) against the agent's config; script and import families run the agent's program on
fresh hidden input and compare with the answer the check computes itself. A check passes by exiting 0.

Each task fixes exactly one file: `params["solution_path"]` names it and the reference is its repaired
full text, so a single-turn submission is that file's new content. Deterministic in (seed, n, split);
a task's split is a hash of its content (20% eval).
"""

from __future__ import annotations

import hashlib

import numpy as np

from trialground.tasks import ops_families as fam
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.sources import Split

EVAL_PER_MILLE = 200
CHECK = "check_ops.py"
FAMILIES = (
    "config_key",
    "config_value",
    "port_conflict",
    "pid_path",
    "script_bug",
    "env_file",
    "import_error",
)


def _to_task(family: str, case: fam.Case) -> Task:
    prompt = (
        f"{case.symptom}\n\nRepair the setup in your workspace so that {case.goal} "
        f"{case.constraint} When you are done, submit."
    )
    check = fam.check_program(case.check_spec)
    return Task(
        domain="ops",
        prompt=prompt,
        files=case.files,
        hidden_checks={CHECK: check},
        reference=case.fixed,
        verifier=VerifierSpec(
            kind="check_program",
            params={"solution_path": case.fix_path, "program": CHECK, "check_timeout_s": 60},
        ),
        metadata={"source": "ops", "family": family, "variant": case.variant},
    )


def _split_of(task: Task) -> Split:
    digest = int(hashlib.sha256(task.id.encode()).hexdigest()[:12], 16)
    return "eval" if digest % 1000 < EVAL_PER_MILLE else "train"


def draw_case(rng: np.random.Generator, family: str) -> fam.Case:
    return fam.BUILDERS[family](rng)


def ops_tasks(*, n: int, seed: int, split: Split) -> list[Task]:
    """`n` distinct ops tasks of `split`, cycling through the families, deterministic in (seed, split)."""
    rng = np.random.default_rng([seed, 0x0B5])
    tasks: list[Task] = []
    seen: set[str] = set()
    i = 0
    while len(tasks) < n:
        family = FAMILIES[i % len(FAMILIES)]
        i += 1
        task = _to_task(family, draw_case(rng, family))
        if task.id in seen or _split_of(task) != split:
            continue
        seen.add(task.id)
        tasks.append(task.model_copy(update={"split": split}))
    return tasks
