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
full text, so a single-turn submission is that file's new content. The prompt shows that file (a
single-turn policy sees nothing else); an agent with tools can inspect and run everything.
Deterministic in (seed, n, split); a task's split is a hash of its prompt (20% eval), and no two tasks share
a prompt. Train and eval share repair *types* (a misspelled key, a wrong import name): they differ in the
names, values and data around them, so eval measures generalisation over surface variation, and n-gram
overlap between the splits is expected.
"""

from __future__ import annotations

import numpy as np

from trialground.errors import TaskError
from trialground.families.ops import scenarios as fam
from trialground.tasks.model import Split, Task, VerifierSpec, split_of
from trialground.tasks.sources import SourceRequest

_MAX_DRAWS_PER_TASK = 50
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
    listing = ", ".join(sorted(case.files))
    prompt = (
        f"{case.symptom}\n\nRepair the setup in your workspace so that {case.goal} "
        f"{case.constraint} When you are done, submit.\n\n"
        f"Workspace files: {listing}. The fault is in `{case.fix_path}`:\n"
        f"```\n{case.files[case.fix_path]}```\n"
        f"If you answer in a single message, reply with the complete repaired content of `{case.fix_path}` "
        "and nothing else."
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
            params={"solution_path": case.fix_path, "check_timeout_s": 60},
        ),
        metadata={"source": "ops", "family": family, "variant": case.variant},
    )


def _split_of(task: Task) -> Split:
    # By prompt, not id: tasks that ask the same repair (with different incidental data, e.g. log lines)
    # are one task for the learner, so they must never straddle train and eval.
    return split_of(task.prompt, namespace="ops:")


def draw_case(rng: np.random.Generator, family: str) -> fam.Case:
    return fam.BUILDERS[family](rng)


def ops_tasks(*, n: int, seed: int, split: Split) -> list[Task]:
    """`n` ops tasks of `split` with distinct prompts, cycling through the families; deterministic in
    (seed, split), and a prefix of the list for a larger n."""
    rng = np.random.default_rng([seed, 0x0B5])
    tasks: list[Task] = []
    seen: set[str] = set()
    for i in range(_MAX_DRAWS_PER_TASK * n):
        family = FAMILIES[i % len(FAMILIES)]
        task = _to_task(family, draw_case(rng, family))
        if task.prompt in seen or _split_of(task) != split:
            continue
        seen.add(task.prompt)
        tasks.append(task.model_copy(update={"split": split}))
        if len(tasks) == n:
            return tasks
    raise TaskError(
        f"ops: only {len(tasks)} distinct {split} tasks in {_MAX_DRAWS_PER_TASK * n} draws", kind="generator"
    )


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return ops_tasks(n=request.n, seed=request.seed, split=request.split)
