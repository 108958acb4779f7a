"""verifiers (PrimeIntellect): a trialground task set and its grader as a verifiers environment.

    import verifiers as vf
    env = vf.load_environment("trialground.integrations.verifiers", tasks="codegen", n=32)
    results = env.evaluate_sync(client=vf.ClientConfig(api_base_url=URL, api_key_var="KEY"), model=M)

`load_environment(**kwargs)` is verifiers' environment entry point (the classic API: `vf.SingleTurnEnv`,
`vf.Rubric`, `vf.load_environment`; verifiers 0.2.1). It returns a `vf.SingleTurnEnv` whose rows are the
tasks (`question` = the task's prompt, `info.task_id` = its id) and whose rubric, `TrialgroundRubric`,
grades each completion with the project's `Grader` exactly as trialground's own single-turn loop does (the
program extracted from a code completion, hidden tests in a fresh sandbox, every hack detector). The
rubric's reward function `trialground` pays the reward's `total`; metrics (weight 0) log
`trialground_passed`, `trialground_flagged` and `trialground_dropped`.

verifiers has no way to leave a sample out of a reward, so an infrastructure failure (no sandbox, a
crashed grader) pays 0, sets `trialground_dropped` to 1 and records a `vf.InfraError` as the rollout's
`error`: filter on either before training on the results.

Keyword arguments: `tasks` (a source spec, default "codegen"), `seed`, `n`, `split` (as
`trialground tasks list`), `eval_tasks` (another spec for the evaluation rows; default: the same tasks),
`system_prompt`, `sandbox` and `reward` (`SandboxConfig` / `RewardConfig` objects or dicts of their
fields).
"""

from __future__ import annotations

from typing import Any, Literal

from trialground.integrations.grading import GradedCompletion, TaskGrading, completion_text, resolve_tasks
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task
from trialground.verify.config import RewardConfig

_STATE_KEY = "trialground"


def _rows(tasks: list[Task]) -> list[dict[str, Any]]:
    return [{"question": t.prompt, "answer": "", "info": {"task_id": t.id}} for t in tasks]


def _task_id(info: Any) -> str:
    task_id = info.get("task_id") if isinstance(info, dict) else None
    if not isinstance(task_id, str):
        raise KeyError(f"the rollout's info has no trialground task_id (got {info!r})")
    return task_id


def _classic() -> Any:
    """verifiers with its classic API (0.2.1), or an ImportError pointing at the 0.4 taskset."""
    try:
        import verifiers as vf
    except ModuleNotFoundError as e:
        if e.name != "verifiers":
            raise
        raise ModuleNotFoundError(
            "trialground.integrations.verifiers needs the `verifiers` package (0.2.1, its classic API), not "
            "installed: pip install 'verifiers==0.2.1'; or install 'trialground[verifiers]' (verifiers 0.4) "
            "and use the taskset `trialground-verifiers` (docs/verifiers.md)",
            name="verifiers",
        ) from None

    if not hasattr(vf, "SingleTurnEnv"):
        raise ImportError(
            f"verifiers {getattr(vf, '__version__', '?')} has no classic API (vf.SingleTurnEnv, vf.Rubric): "
            "this module needs verifiers 0.2.1; with verifiers >= 0.4 use the taskset "
            "`trialground-verifiers` (trialground.integrations.verifiers_v1, docs/verifiers.md)"
        )
    return vf


def make_rubric(grading: TaskGrading) -> Any:
    """A `vf.Rubric` over `grading` (see the module docstring)."""
    vf = _classic()

    async def trialground(completion: Any, info: Any, state: Any) -> float:
        [graded] = await grading.agrade_many([(_task_id(info), completion_text(completion))])
        state[_STATE_KEY] = graded
        if graded.value is None:
            detail = graded.error.message if graded.error is not None else "dropped by the reward config"
            state["error"] = vf.InfraError(f"trialground grading failed: {detail}")
            return 0.0
        return graded.value

    def _graded(state: Any) -> GradedCompletion | None:
        value = state.get(_STATE_KEY)
        return value if isinstance(value, GradedCompletion) else None

    async def trialground_passed(state: Any) -> float:
        g = _graded(state)
        return float(bool(g and g.verdict and g.verdict.passed and g.value is not None))

    async def trialground_flagged(state: Any) -> float:
        g = _graded(state)
        return float(bool(g and g.reward and any(f.severity == "hack" for f in g.reward.flags)))

    async def trialground_dropped(state: Any) -> float:
        g = _graded(state)
        return float(g is None or g.value is None)

    class TrialgroundRubric(vf.Rubric):  # type: ignore[misc, name-defined]
        """Grades with trialground's `Grader`; closes it when verifiers tears the environment down."""

        @vf.teardown  # type: ignore[misc]
        async def close_grading(self) -> None:
            grading.close()

    rubric = TrialgroundRubric(
        funcs=[trialground, trialground_passed, trialground_flagged, trialground_dropped],
        weights=[1.0, 0.0, 0.0, 0.0],
    )
    rubric.add_class_object("trialground_grading", grading)
    return rubric


def _config(value: Any, kind: type[Any]) -> Any:
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, dict):
        return kind.model_validate(value)
    raise TypeError(f"expected a {kind.__name__} or a dict of its fields, got {type(value).__name__}")


def load_environment(
    tasks: str = "codegen",
    seed: int = 0,
    n: int | None = None,
    split: Literal["train", "eval"] | None = None,
    eval_tasks: str | None = None,
    system_prompt: str | None = None,
    sandbox: SandboxConfig | dict[str, Any] | None = None,
    reward: RewardConfig | dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """verifiers' entry point: a `vf.SingleTurnEnv` over the tasks (see the module docstring). Other
    keyword arguments go to `vf.SingleTurnEnv`."""
    vf = _classic()
    from datasets import Dataset

    train = resolve_tasks(tasks, seed=seed, n=n, split=split)
    evals = resolve_tasks(eval_tasks, seed=seed, n=n, split=split) if eval_tasks else train
    grading = TaskGrading(
        [*train, *evals],
        sandbox=_config(sandbox, SandboxConfig),
        reward=_config(reward, RewardConfig),
    )
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(_rows(train)),
        eval_dataset=Dataset.from_list(_rows(evals)),
        system_prompt=system_prompt,
        rubric=make_rubric(grading),
        **kwargs,
    )
