"""The grading entry point: one `Grader` dispatches on `task.verifier.kind` (the registry in
`trialground.tasks.verifiers`, built-ins in `kinds/builtin.py`, plugins by dotted path) and returns what it
decided.

    grader = make_grader(sandbox_config, reward_config)        # the one way to get a grader
    graded = await grader.grade(task, submission, workspace=agent_sandbox, actions=actions)
    await grader.close()

`graded.verdict` is the verifier's decision with every flag attached; `graded.judge_score` the judge's score
when the run's judge cross-checked this submission. The grader does not decide the reward: the rubric
(`trialground.verify.reward.rubric`) scores the whole episode once it is over. Infrastructure failures never
become a silent 0: `Verdict.error` is set, and the rubric drops such a reward.

- `code_tests`: hidden tests in a fresh sandbox (`kinds/code_tests.py`), plus the static hack detectors
  (`detectors/hacks.py`) on the solution text and, when `workspace` is given, tampering checks;
- `math`: math-verify in a worker process; `exact` / `regex` / `numeric`: `kinds/answers.py`;
- `check_program`: the task's check programs against the episode's files;
- `swe_tests`: a repository task's FAIL_TO_PASS and PASS_TO_PASS tests on a pristine copy;
- `judge`: the configured `Judge`, score >= the params' `threshold` (default 0.5) passes.

Each kind declares its params model once (`trialground.tasks.verifiers`); a task's params are validated into
it when the task is made (`VerifierSpec.typed_params`), and the kind's function receives that typed object
(`VerifyRequest.params`). Each kind also owns what it keeps between gradings (`VerifierKind.resource`: the
code kinds' grading sandboxes and batcher, the math worker, ...): the grader makes it from its
`GradingContext` on the kind's first grading, hands it to the kind's function, and closes it with itself
(`kinds/context.py`). The grader builds no kind's resource by name, so a plugin kind with its own resource
needs no edit here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from trialground.errors import TrialgroundError, VerifierError
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.verifiers import lookup
from trialground.verify.config import RewardConfig
from trialground.verify.judges.config import make_judge
from trialground.verify.judges.judge import CrossCheck, Judge
from trialground.verify.kinds.code_tests import Opener
from trialground.verify.kinds.context import GradingContext, KindResources
from trialground.verify.kinds.request import VerifyRequest
from trialground.verify.verdict import Action, Graded, Verdict


class Grader:
    """Grades submissions; safe to share between concurrent episodes of ONE event loop (its sandbox pool
    and batcher belong to the loop that first used it). `max_parallel` bounds its sandbox execs, so callers
    may submit every grading at once."""

    def __init__(
        self,
        sandbox_config: SandboxConfig,
        reward_config: RewardConfig | None = None,
        *,
        judge: Judge | None = None,
        opener: Opener | None = None,
    ) -> None:
        self.sandbox_config = sandbox_config
        self.reward_config = reward_config or RewardConfig()
        self.judge = judge
        self.cross_check = CrossCheck(self.reward_config.judge_sample_rate)
        self.context = GradingContext(sandbox_config, self.reward_config, opener=opener, judge=judge)
        self._resources = KindResources(self.context)

    def resource(self, kind: str) -> Any:
        """The resource the kind called `kind` owns in this grader (made now if it was not yet), or the
        grading context for a kind that names none."""
        return self._resources.for_kind(lookup(kind))

    async def verdict(
        self, task: Task, submission: str, *, workspace: Sandbox | None = None, actions: Sequence[Action] = ()
    ) -> Verdict:
        """The verifier's decision with every flag attached; raises TrialgroundError on infrastructure
        failure (an unknown kind or bad params is a `TaskError`, kind `bad_task`)."""
        submission = encodable(submission)
        kind = lookup(task.verifier.kind)
        params = task.verifier.typed_params  # validated once, when the task was made
        if not isinstance(params, kind.params):  # the kind was registered again since
            params = kind.validate(task.verifier.params, where=f"task {task.id}: ")
        request = VerifyRequest(task, submission, params, workspace=workspace, actions=tuple(actions))
        return await kind.function()(self._resources.for_kind(kind), request)

    async def grade(
        self, task: Task, submission: str, *, workspace: Sandbox | None = None, actions: Sequence[Action] = ()
    ) -> Graded:
        """The verdict (and the judge's score). Never raises for a bad submission or a broken sandbox: see
        `Verdict.error`."""
        start = time.perf_counter()
        try:
            verdict = await self.verdict(task, submission, workspace=workspace, actions=actions)
        except TrialgroundError as e:
            verdict = Verdict(passed=False, detail=str(e)[:500], error=e.info())
        except Exception as e:  # a grader bug is still an infrastructure failure, never a silent 0
            err = VerifierError(f"{type(e).__name__}: {e}", kind="internal")
            verdict = Verdict(passed=False, detail=str(err)[:500], error=err.info())
        score, failed = await self._cross_check(task, submission, verdict)
        return Graded(
            verdict=verdict, judge_score=score, judge_failed=failed, seconds=time.perf_counter() - start
        )

    async def _cross_check(self, task: Task, submission: str, verdict: Verdict) -> tuple[float | None, bool]:
        """On a sample of rule-graded submissions, also ask the judge: (its score, whether it failed). The
        score is the rubric's `judge` component, paid with `judge_weight` (default 0 = logged)."""
        rule_graded = task.verifier.kind != "judge" and verdict.error is None
        if self.judge is None or not rule_graded or not self.cross_check.sampled(task, submission):
            return None, False
        try:
            return await self.judge.score(task, submission), False
        except Exception:  # any judge failure is counted; it never changes the rule verdict
            return None, True

    async def close(self) -> None:
        await self._resources.close()
        if self.judge is not None:
            await self.judge.close()


def encodable(text: str) -> str:
    """`text` with every lone surrogate (which no UTF-8 file, pipe or request can carry) replaced by U+FFFD.
    A model's text can hold one (an OpenAI-compatible server may send `\\ud800` in its JSON); graded as it
    is, every encoding on the way fails, which would make a wrong answer an infrastructure error and keep it
    out of training."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def make_grader(
    sandbox: SandboxConfig,
    reward: RewardConfig | None = None,
    *,
    judge: Judge | None = None,
    opener: Opener | None = None,
) -> Grader:
    """The one way to get a grader: the sandbox, `reward` (with `reward.judge`, cross-checking
    `judge_sample_rate` of rule-graded submissions, a pass being a score >= `reward.judge.threshold`; a
    `judge` object given here wins over `reward.judge`) and where grading sandboxes open (an `Opener`:
    locally by default, on Ray actors with `cluster: ray`)."""
    reward = reward or RewardConfig()
    return Grader(sandbox, reward, judge=judge or make_judge(reward.judge), opener=opener)
