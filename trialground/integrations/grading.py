"""Grading a completion of a known task, for trainers that hand trialground (task id, completion) pairs.

One `TaskGrading` holds a task set (by id), one `Grader` and the `BackgroundLoop` the grader lives on.
A completion is graded and scored exactly as trialground's own single-turn loop does it: through
`SingleTurnEnv` (the program is extracted from a `code_tests` completion; other verifiers get the text
unchanged), in a fresh sandbox, with every hack detector, then the episode's reward from the one reward seam
(`trialground.rollout.scoring.score_end`) with the run's rubric.

Contract:
- `grade_many(pairs)` grades every pair concurrently (the grader bounds its sandbox execs) and returns one
  `GradedCompletion` per pair, in order. It never raises for a bad submission or a broken sandbox: those
  become a `GradedCompletion` whose `value` is None (an infrastructure failure, or `hack_action: drop`) — a
  trainer must leave such a sample out rather than learn from a made-up 0.
- An id that is not in the task set raises `KeyError` naming it (that is bad input, not infrastructure).
- `agrade_many` is the same for a caller on another event loop (it awaits the grading loop without
  blocking its own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from trialground.envs.single_turn import SingleTurnEnv
from trialground.errors import ErrorInfo, TaskError
from trialground.integrations.background import BackgroundLoop
from trialground.rollout.scoring import score_end
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader, make_grader
from trialground.verify.judges.judge import Judge
from trialground.verify.reward.model import Reward
from trialground.verify.reward.rubric import Rubric
from trialground.verify.verdict import Verdict

TaskSet = str | Iterable[Task]


def resolve_tasks(
    tasks: TaskSet, *, seed: int = 0, n: int | None = None, split: Literal["train", "eval"] | None = None
) -> list[Task]:
    """`tasks` itself, or the tasks of a source spec (`trialground.tasks.sources.load_source`)."""
    if isinstance(tasks, str):
        from trialground.tasks.sources import load_source

        return load_source(tasks, seed=seed, n=n, split=split)
    out = list(tasks)
    bad = next((t for t in out if not isinstance(t, Task)), None)
    if bad is not None:
        raise TaskError(f"expected trialground Task objects, got a {type(bad).__name__}", kind="bad_spec")
    if not out:
        raise TaskError("the task set is empty", kind="bad_spec")
    return out


@dataclass(frozen=True)
class GradedCompletion:
    """One graded completion. `value` is the reward to train on, or None: leave the sample out."""

    task_id: str
    reward: Reward | None
    verdict: Verdict | None
    error: ErrorInfo | None

    @property
    def value(self) -> float | None:
        if self.error is not None or self.reward is None or self.reward.dropped:
            return None
        return self.reward.total


def completion_text(completion: object) -> str:
    """The text of a completion: a string, or a conversation (list of messages, as dicts or objects with
    `role` and `content`) whose assistant messages are joined in order."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list | tuple):
        return "\n".join(_field(m, "content") or "" for m in completion if _field(m, "role") == "assistant")
    content = _field(completion, "content")
    if content is not None:
        return content
    raise TypeError(f"a completion must be text or a list of chat messages, got {type(completion).__name__}")


def _field(message: object, name: str) -> str | None:
    """A message's text field, whether the message is a dict (TRL) or a typed object (verifiers)."""
    value = message.get(name) if isinstance(message, dict) else getattr(message, name, None)
    return value if isinstance(value, str) else None


def summarize(results: Sequence[GradedCompletion], prefix: str = "trialground") -> dict[str, float]:
    """Batch metrics: `{prefix}/graded`, `/dropped` (left out), `/pass_rate` and `/flagged` (hack flags)
    over graded samples, and the mean of every reward component (`{prefix}/component/<name>`)."""
    graded = [r for r in results if r.value is not None and r.reward is not None]
    out = {f"{prefix}/graded": float(len(graded)), f"{prefix}/dropped": float(len(results) - len(graded))}
    if not graded:
        return out
    n = len(graded)
    out[f"{prefix}/pass_rate"] = sum(bool(r.verdict and r.verdict.passed) for r in graded) / n
    out[f"{prefix}/flagged"] = sum(any(f.severity == "hack" for f in r.reward.flags) for r in graded) / n  # type: ignore[union-attr]
    names = sorted({c.name for r in graded for c in r.reward.components})  # type: ignore[union-attr]
    for name in names:
        values = [c.value for r in graded for c in r.reward.components if c.name == name]  # type: ignore[union-attr]
        out[f"{prefix}/component/{name}"] = sum(values) / len(values)
    return out


async def grade_completion(
    grader: Grader, rubric: Rubric, task: Task, completion: str, *, policy_tokens: int = 0
) -> GradedCompletion:
    """One completion through `SingleTurnEnv` (the same submission rule as trialground's own loop), scored
    by `rubric` (`policy_tokens`: the completion's length, for the overlong part when configured)."""
    env = SingleTurnEnv(grader)
    try:
        await env.reset(task)
        obs = await env.step(completion)
    finally:
        await env.close()
    end = obs.end
    reward = score_end(rubric, end, policy_tokens=policy_tokens)
    verdict = end.graded.verdict if end is not None and end.graded is not None else None
    return GradedCompletion(task.id, reward, verdict, end.error if end is not None else None)


class TaskGrading:
    """A task set, a grader and its loop. Close it (or use it as a context manager) when done."""

    def __init__(
        self,
        tasks: TaskSet,
        *,
        sandbox: SandboxConfig | None = None,
        reward: RewardConfig | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.tasks: dict[str, Task] = {t.id: t for t in resolve_tasks(tasks)}
        self.sandbox = sandbox or SandboxConfig()
        self.reward_config = reward or RewardConfig()
        self.rubric = Rubric.from_config(self.reward_config)
        self.loop = BackgroundLoop("trialground-grading")
        self._judge = judge
        self.grader = self.loop.run(self._make_grader())

    async def _make_grader(self) -> Grader:  # made on the loop it will live on
        return make_grader(self.sandbox, self.reward_config, judge=self._judge)  # a judge given here wins

    def task(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise KeyError(
                f"task id {task_id!r} is not in this task set ({len(self.tasks)} tasks); rows must carry the "
                "`task_id` of a task the reward function was built from"
            ) from None

    async def _grade_all(self, pairs: Sequence[tuple[Task, str]]) -> list[GradedCompletion]:
        return list(
            await asyncio.gather(*(grade_completion(self.grader, self.rubric, t, c) for t, c in pairs))
        )

    def grade_many(self, pairs: Sequence[tuple[str, str]]) -> list[GradedCompletion]:
        """Grade (task id, completion text) pairs concurrently; see the module docstring."""
        resolved = [(self.task(task_id), text) for task_id, text in pairs]
        return self.loop.run(self._grade_all(resolved))

    async def agrade_many(self, pairs: Sequence[tuple[str, str]]) -> list[GradedCompletion]:
        """`grade_many` for a caller running its own event loop."""
        resolved = [(self.task(task_id), text) for task_id, text in pairs]
        future = asyncio.run_coroutine_threadsafe(self._grade_all(resolved), self.loop.loop)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        self.loop.close(self.grader.close)

    def __enter__(self) -> TaskGrading:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
