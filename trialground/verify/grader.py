"""The grading entry point: one `Grader` dispatches on `task.verifier.kind` (the registry in `kinds.py`,
built-ins in `builtin.py`, plugins by dotted path) and computes the reward with the rubric.

    grader = Grader(sandbox_config, reward_config)
    verdict, reward = await grader.grade(task, submission, workspace=agent_sandbox, actions=actions)
    await grader.close()

- `code_tests`: hidden tests in a fresh sandbox (`code_tests.py`), plus the static hack detectors
  (`hacks.py`) on the solution text and, when `workspace` is given, tampering checks (`tamper.py`);
- `math`: math-verify in a worker process (`math_verifier.py`);
- `exact` / `regex` / `numeric`: `answers.py`;
- `check_program`: the task's check programs against the episode's files (`check_program.py`);
- `swe_tests`: a repository task's FAIL_TO_PASS and PASS_TO_PASS tests on a pristine copy (`swe_tests.py`);
- `judge`: the configured `Judge` (`judge.py`), score >= params["threshold"] (default 0.5) passes.

The reward is the rubric's (`rubric.py`): any flag of severity `hack` fails the outcome (a hack never earns
it) and `RewardConfig.hack_action` decides the rest. Infrastructure failures never become a silent 0:
`Verdict.error` is set and the reward is marked `dropped`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from trialground.errors import TrialgroundError, VerifierError
from trialground.microbatch import Batcher
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.pool import default_group
from trialground.verify.config import RewardConfig
from trialground.verify.judges.config import make_judge
from trialground.verify.judges.judge import CrossCheck, Judge
from trialground.verify.kinds.check_program import CheckProgramVerifier
from trialground.verify.kinds.code_tests import CodeTestsVerifier, Opener
from trialground.verify.kinds.math import MathWorker
from trialground.verify.kinds.registry import VerifyRequest, lookup
from trialground.verify.kinds.swe_tests import SweTestsVerifier
from trialground.verify.reward.model import Reward
from trialground.verify.reward.rubric import Rubric
from trialground.verify.verdict import Action, Verdict


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
        self.rubric = Rubric(self.reward_config)
        grading = self.reward_config.grading
        self.judge = judge
        self.cross_check = CrossCheck(self.reward_config.judge_sample_rate)
        self._counts: Counter[str] = Counter()
        self._seconds = 0.0
        self.code = CodeTestsVerifier(sandbox_config, grading, opener)
        self._batcher: Batcher[tuple[Task, str], Verdict] = Batcher(
            self.code.verify_many, max_batch=grading.max_batch, window_s=grading.batch_window_s
        )
        self.checks = CheckProgramVerifier(sandbox_config, grading, opener)
        self._math: MathWorker | None = None
        self._swe: SweTestsVerifier | None = None

    @property
    def math(self) -> MathWorker:
        if self._math is None:
            self._math = MathWorker(self.reward_config.grading.math_timeout_s)
        return self._math

    @property
    def swe(self) -> SweTestsVerifier:
        if self._swe is None:
            self._swe = SweTestsVerifier(self.sandbox_config, self.reward_config.grading)
        return self._swe

    async def verdict(
        self, task: Task, submission: str, *, workspace: Sandbox | None = None, actions: Sequence[Action] = ()
    ) -> Verdict:
        """The verifier's decision with every flag attached; raises TrialgroundError on infrastructure
        failure (an unknown kind or bad params is a `TaskError`, kind `bad_task`)."""
        kind = lookup(task.verifier.kind)
        params = kind.validate(task.verifier.params, where=f"task {task.id}: ")
        request = VerifyRequest(task, submission, params, workspace=workspace, actions=tuple(actions))
        return await kind.function()(self, request)

    async def batch_code(self, item: tuple[Task, str]) -> Verdict:
        """A single-turn code grading through the shared batcher (many gradings, one sandbox exec)."""
        return await self._batcher.submit(item)

    async def grade(
        self, task: Task, submission: str, *, workspace: Sandbox | None = None, actions: Sequence[Action] = ()
    ) -> tuple[Verdict, Reward]:
        """(verdict, reward). Never raises for a bad submission or a broken sandbox: see Verdict.error."""
        start = time.perf_counter()
        try:
            verdict = await self.verdict(task, submission, workspace=workspace, actions=actions)
        except TrialgroundError as e:
            verdict = Verdict(passed=False, detail=str(e)[:500], error=e.info())
        except Exception as e:  # a grader bug is still an infrastructure failure, never a silent 0
            err = VerifierError(f"{type(e).__name__}: {e}", kind="internal")
            verdict = Verdict(passed=False, detail=str(err)[:500], error=err.info())
        judge_score = await self._cross_check(task, submission, verdict)
        reward = self.rubric.grade(verdict, actions, judge_score=judge_score)
        self._count(verdict, time.perf_counter() - start)
        source = default_group(task)  # per-source infrastructure error rate: verify/error_rate/<source>
        self._counts[f"source:{source}"] += 1
        self._counts[f"source_errors:{source}"] += verdict.error is not None
        return verdict, reward

    def _count(self, verdict: Verdict, seconds: float) -> None:
        self._counts["gradings"] += 1
        self._counts["passed"] += verdict.passed
        self._counts["errors"] += verdict.error is not None
        hacks = {f.name for f in verdict.flags if f.severity == "hack"}
        self._counts["flagged"] += bool(hacks)
        for name in hacks:
            self._counts[f"flag:{name}"] += 1
        self._seconds += seconds

    async def _cross_check(self, task: Task, submission: str, verdict: Verdict) -> float | None:
        """On a sample of rule-graded submissions, also ask the judge (a `judge` component, paid with
        `judge_weight`, default 0 = logged) and record the rule-vs-judge agreement."""
        rule_graded = task.verifier.kind != "judge" and verdict.error is None
        if self.judge is None or not rule_graded or not self.cross_check.sampled(task, submission):
            return None
        try:
            score = await self.judge.score(task, submission)
        except TrialgroundError:
            self.cross_check.errors += 1
            return None
        self.cross_check.record(verdict.passed, score)
        return score

    def metrics(self, reset: bool = True) -> dict[str, float]:
        """Namespaced metrics since the last reset: `verify/gradings`, `verify/pass_rate`, `verify/errors`,
        `verify/grade_s_mean`, `hack/flag_rate`, `hack/<flag name>` counts, and the judge cross-check."""
        c, n = self._counts, max(self._counts["gradings"], 1)
        out = {
            "verify/gradings": float(c["gradings"]),
            "verify/pass_rate": c["passed"] / n,
            "verify/errors": float(c["errors"]),
            "verify/grade_s_mean": self._seconds / n,
            "hack/flag_rate": c["flagged"] / n,
        }
        out.update({f"hack/{k[5:]}": float(v) for k, v in c.items() if k.startswith("flag:")})
        out.update(
            {
                f"verify/error_rate/{k[7:]}": c[f"source_errors:{k[7:]}"] / v
                for k, v in c.items()
                if k.startswith("source:")
            }
        )
        out.update(self.cross_check.metrics())
        if reset:
            self._counts, self._seconds = Counter(), 0.0
        return out

    async def close(self) -> None:
        await self._batcher.close()
        await self.code.close()
        if self._swe is not None:
            await self._swe.close()
        if self._math is not None:
            self._math.close()
            self._math = None
        if self.judge is not None:
            await self.judge.close()


def make_grader(sandbox: SandboxConfig, reward: RewardConfig, *, opener: Opener | None = None) -> Grader:
    """The run's grader: the sandbox, `reward` (with `reward.judge`, cross-checking `judge_sample_rate` of
    rule-graded submissions, a pass being a score >= `reward.judge.threshold`) and where grading sandboxes
    open (an `Opener`: locally by default, on Ray actors with `cluster: ray`)."""
    grader = Grader(sandbox, reward, judge=make_judge(reward.judge), opener=opener)
    if reward.judge is not None:
        grader.cross_check.threshold = reward.judge.threshold
    return grader
