"""The built-in verifier kinds' grading functions (registered in `trialground.tasks.verifiers`): each maps
its own resource (`VerifierKind.resource`: the batched code grading, the check-program runner, the math
worker, the repository-test verifier) or, for a kind without one, the grader's `GradingContext` (the
judge), and a `VerifyRequest` to a `Verdict`, and attaches the evidence flags (static hack detectors,
exit-early evidence, workspace tampering)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trialground.errors import VerifierError
from trialground.tasks.verifiers import (
    AnswerParams,
    JudgeParams,
    MathParams,
    NumericParams,
    RegexParams,
)
from trialground.verify.detectors.exit_early import compile_flags, import_flags, oversized_flag
from trialground.verify.detectors.hacks import static_flags
from trialground.verify.detectors.tamper import workspace_flags
from trialground.verify.kinds.answers import verify_exact, verify_numeric, verify_regex
from trialground.verify.kinds.code_jobs import VISIBLE_PREFIX, solution_path
from trialground.verify.kinds.math import verify_math
from trialground.verify.kinds.request import VerifyRequest
from trialground.verify.kinds.submitted import UnreadableSubmission, read_submitted
from trialground.verify.verdict import Flag, Verdict

if TYPE_CHECKING:
    from trialground.verify.kinds.check_program import CheckProgramVerifier
    from trialground.verify.kinds.code_grading import CodeGrading
    from trialground.verify.kinds.context import GradingContext
    from trialground.verify.kinds.math import MathWorker
    from trialground.verify.kinds.swe_tests import SweTestsVerifier


async def code_tests(code: CodeGrading, req: VerifyRequest) -> Verdict:
    task, workspace = req.task, req.workspace
    if workspace is None:
        verdict = await code.text(task, req.submission)
    else:
        verdict = await code.verifier.verify(task, req.submission, workspace=workspace)
    path = solution_path(task)
    extra = import_flags(verdict.tests, path.removesuffix(".py"), visible_prefix=VISIBLE_PREFIX)
    grading = code.grading
    if grading.static_checks:
        text = req.submission
        if workspace is not None:
            try:
                data = await read_submitted(workspace, path, grading.max_solution_bytes)
            except UnreadableSubmission:
                data = None  # the verdict already failed it, with the reason
            text = (data or b"").decode("utf-8", "replace")
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > grading.host_parse_max_bytes:
            extra.append(oversized_flag(path, size, grading.host_parse_max_bytes))
        else:
            extra += compile_flags(text, path)
            extra += static_flags(
                text,
                check_names=[*task.hidden_checks, *task.visible_checks],
                hidden_checks=task.hidden_checks.values(),
            )
    if workspace is not None:
        extra += await workspace_flags(task, workspace, req.actions)
    return merge_flags(verdict, extra)


async def check_program(checks: CheckProgramVerifier, req: VerifyRequest) -> Verdict:
    verdict = await checks.verify(req.task, req.submission, workspace=req.workspace)
    if req.workspace is not None:
        verdict = merge_flags(verdict, await workspace_flags(req.task, req.workspace, req.actions))
    return verdict


async def math(worker: MathWorker, req: VerifyRequest) -> Verdict:
    assert isinstance(req.params, MathParams)
    return await verify_math(req.task, req.submission, worker, req.params)


async def exact(context: GradingContext, req: VerifyRequest) -> Verdict:
    assert isinstance(req.params, AnswerParams)
    return verify_exact(req.task, req.submission, req.params)


async def regex(context: GradingContext, req: VerifyRequest) -> Verdict:
    assert isinstance(req.params, RegexParams)
    return verify_regex(req.task, req.submission, req.params)


async def numeric(context: GradingContext, req: VerifyRequest) -> Verdict:
    assert isinstance(req.params, NumericParams)
    return verify_numeric(req.task, req.submission, req.params)


async def judge(context: GradingContext, req: VerifyRequest) -> Verdict:
    if context.judge is None:
        raise VerifierError(f"task {req.task.id}: kind judge but no judge configured", kind="no_judge")
    try:
        score = await context.judge.score(req.task, req.submission)
    except VerifierError as e:
        if e.kind == "judge_input_too_long":
            # Too long for the judge (over `max_submission_chars`, or the endpoint said so): the submission
            # made it so, and it is scored 0 like any wrong one instead of leaving the batch.
            flag = Flag(name="judge_input_too_long", evidence=str(e)[:300], severity="warn")
            return Verdict(passed=False, score=0.0, flags=(flag,), detail=f"not judged: {str(e)[:300]}")
        if e.kind != "judge_parse":  # the endpoint failed or timed out: infrastructure
            raise
        # A reply not in the declared format is content the submission can provoke (a prompt injection
        # that makes the judge ramble): a failed verdict, so it cannot dodge a negative advantage.
        return Verdict(passed=False, score=0.0, detail=f"judge reply refused: {str(e)[:300]}")
    assert isinstance(req.params, JudgeParams)
    return Verdict(passed=score >= req.params.threshold, score=score, detail=f"judge score {score:.3f}")


def swe_resource(context: GradingContext) -> SweTestsVerifier:
    """The `swe_tests` kind's resource: its pristine repository copies and test runs."""
    from trialground.verify.kinds.swe_tests import SweTestsVerifier

    return SweTestsVerifier(context.sandbox_config, context.grading)


async def swe_tests(swe: SweTestsVerifier, req: VerifyRequest) -> Verdict:
    return await swe.verify(req.task, req.submission, workspace=req.workspace)


def merge_flags(verdict: Verdict, extra: list[Flag]) -> Verdict:
    """Adds flags (deduplicated); a `hack` flag fails the verdict."""
    flags = list(verdict.flags)
    for f in extra:
        if all((f.name, f.evidence) != (g.name, g.evidence) for g in flags):
            flags.append(f)
    hack = any(f.severity == "hack" for f in flags)
    return verdict.model_copy(update={"flags": tuple(flags), "passed": verdict.passed and not hack})
