"""verifiers 0.4 (`verifiers.v1`): a trialground task set as a verifiers taskset plugin.

    vf-eval trialground-verifiers --env.taskset.tasks codegen --env.taskset.n 32 ...

verifiers 0.4 loads a taskset by id, a top-level module: `trialground-verifiers` is the module
`trialground_verifiers`, which exports (in `__all__`) `TrialgroundTaskset`, whose config
`TrialgroundTasksetConfig` says which tasks (`tasks`, a source spec; `seed`, `n`, `split`) and how they are
graded (`sandbox`, `reward`: dicts of `SandboxConfig` and `RewardConfig` fields). Each task's data is the
task's prompt (`prompt`), its id (`id`, `task_id`) and the task set's spec, so a verifiers environment server
process rebuilds the same task set from the data alone. The harness (which model program answers, e.g.
`--env.agent.harness.id null` for one chat turn) is verifiers' choice, not the taskset's.

Scoring: the reward `trialground` (weight 1) grades the rollout's final reply (`trace.last_reply`) with
trialground's `Grader` exactly as trialground's own single-turn loop does (the program from a code
completion's last fenced block, hidden tests in a fresh sandbox, every hack detector) and pays the
reward's `total`; the metrics `trialground_passed` and `trialground_flagged` (a hack flag fired) come with
it. An infrastructure failure (no sandbox, a crashed grader) or a reward the config drops raises: verifiers
then records an error on the rollout and scores nothing, never a made-up 0.

The grading (one `TaskGrading` per task-set spec, its grader on a background loop) lives for the process.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Literal

from pydantic import Field

from trialground.integrations.grading import GradedCompletion, TaskGrading, resolve_tasks
from trialground.sandbox.base import SandboxConfig
from trialground.verify.config import RewardConfig

try:
    import verifiers
except ModuleNotFoundError as _absent:
    if _absent.name != "verifiers":
        raise
    raise ModuleNotFoundError(
        "trialground.integrations.verifiers_v1 (the taskset `trialground-verifiers`) needs the `verifiers` "
        "package, not installed: pip install 'trialground[verifiers]'",
        name="verifiers",
    ) from None
import verifiers.v1 as vf

__all__ = ["TrialgroundTaskset"]


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


if _release(verifiers.__version__) < (0, 4):  # 0.2.1 has an earlier, different `verifiers.v1`
    raise ImportError(
        f"trialground.integrations.verifiers_v1 needs verifiers >= 0.4 (installed: {verifiers.__version__}); "
        "with verifiers 0.2.1 use trialground.integrations.verifiers (docs/verifiers.md)"
    )

_GRADINGS: dict[str, TaskGrading] = {}
_GRADED: OrderedDict[str, GradedCompletion] = OrderedDict()  # trace id -> its grading, the latest few
_GRADED_KEPT = 4096


class TrialgroundSpec(vf.TaskData):  # type: ignore[misc]  # verifiers has no type information
    """Which task set a task is from (enough to rebuild its grading in any process)."""

    tasks: str = "codegen"
    seed: int = 0
    n: int | None = None
    split: Literal["train", "eval"] | None = None
    sandbox: dict[str, Any] = Field(default_factory=dict)
    reward: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> str:
        fields = ("tasks", "seed", "n", "split", "sandbox", "reward")
        return json.dumps({f: getattr(self, f) for f in fields}, sort_keys=True)


class TrialgroundData(TrialgroundSpec):
    task_id: str = ""


def grading_for(spec: TrialgroundSpec) -> TaskGrading:
    """The process's `TaskGrading` of `spec`'s task set (made on first use)."""
    key = spec.key()
    grading = _GRADINGS.get(key)
    if grading is None:
        tasks = resolve_tasks(spec.tasks, seed=spec.seed, n=spec.n, split=spec.split)
        grading = TaskGrading(
            tasks,
            sandbox=SandboxConfig.model_validate(spec.sandbox),
            reward=RewardConfig.model_validate(spec.reward),
        )
        _GRADINGS[key] = grading
    return grading


class TrialgroundTask(vf.Task[TrialgroundData]):  # type: ignore[misc]
    """One trialground task; scored by trialground's grader (see the module docstring)."""

    async def _graded(self, trace: Any) -> GradedCompletion:
        """The grading of `trace` (graded once for the reward and the metrics alike)."""
        graded = _GRADED.get(trace.id)
        if graded is None:
            [graded] = await grading_for(self.data).agrade_many([(self.data.task_id, trace.last_reply)])
            _GRADED[trace.id] = graded
            while len(_GRADED) > _GRADED_KEPT:
                _GRADED.popitem(last=False)
            verdict = graded.verdict
            trace.info["trialground"] = {
                "task_id": self.data.task_id,
                "passed": verdict.passed if verdict is not None else None,
                "detail": verdict.detail if verdict is not None else None,
                "error": graded.error.message if graded.error is not None else None,
            }
        return graded

    @vf.reward(weight=1.0)  # type: ignore[misc]
    async def trialground(self, trace: Any) -> float:
        graded = await self._graded(trace)
        if graded.value is None:
            detail = graded.error.message if graded.error is not None else "dropped by the reward config"
            raise RuntimeError(f"trialground grading of {self.data.task_id} gave no reward: {detail}")
        return graded.value

    @vf.metric  # type: ignore[misc]
    async def trialground_passed(self, trace: Any) -> float:
        graded = await self._graded(trace)
        return float(bool(graded.verdict and graded.verdict.passed and graded.value is not None))

    @vf.metric  # type: ignore[misc]
    async def trialground_flagged(self, trace: Any) -> float:
        graded = await self._graded(trace)
        return float(bool(graded.reward and any(f.severity == "hack" for f in graded.reward.flags)))


class TrialgroundTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    tasks: str = "codegen"
    """A trialground task source spec (docs/tasks.md): codegen, humaneval, math, hf:PATH?..., a JSONL file."""
    seed: int = 0
    n: int | None = None
    split: Literal["train", "eval"] | None = None
    sandbox: dict[str, Any] = Field(default_factory=dict)
    """SandboxConfig fields (limits, backend, ...)."""
    reward: dict[str, Any] = Field(default_factory=dict)
    """RewardConfig fields (shaping weights, hack_action, ...)."""


class TrialgroundTaskset(vf.Taskset[TrialgroundTask, TrialgroundTasksetConfig]):  # type: ignore[misc]
    def load(self) -> list[TrialgroundTask]:
        c = self.config
        spec = TrialgroundSpec(
            tasks=c.tasks, seed=c.seed, n=c.n, split=c.split, sandbox=c.sandbox, reward=c.reward
        )
        grading = grading_for(spec)  # builds (and checks) the task set and its grading configs now
        fields = spec.model_dump(include={"tasks", "seed", "n", "split", "sandbox", "reward"})
        return [
            TrialgroundTask(
                TrialgroundData(id=task.id, name=task.id, prompt=task.prompt, task_id=task.id, **fields),
                c.task,
            )
            for task in grading.tasks.values()
        ]
