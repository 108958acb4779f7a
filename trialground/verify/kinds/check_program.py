"""The `check_program` verifier: the task's check programs run against the episode's resulting files.

After the episode, the agent's workspace is forked into a fresh sandbox (no process of the episode
survives; see `Sandbox.fork`). Without an agent sandbox, a fresh sandbox is made from the task's files with
the submission written to the params' `solution_path` (when set). Each hidden check runs there: `*.py` with
`python3 -I` (so workspace `sitecustomize.py`, `*.pth` files and `PYTHON*` variables have no effect), any
other file with `bash`; the program text arrives over stdin and never exists on the sandbox's disk. A check
passes when it exits 0; the task passes when every check passes. Params: `CheckProgramParams`
(`solution_path`, `check_timeout_s`: both optional).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trialground.errors import VerifierError
from trialground.sandbox.base import WORKSPACE, Sandbox, SandboxConfig
from trialground.tasks.model import Task
from trialground.tasks.verifiers import CheckProgramParams
from trialground.verify.config import GradingConfig
from trialground.verify.kinds.code_tests import Opener, default_opener
from trialground.verify.verdict import TestResult, Verdict

if TYPE_CHECKING:
    from trialground.verify.kinds.context import GradingContext

_PY_STDIN = (
    "import sys; _src = sys.stdin.read(); exec(compile(_src, '<check>', 'exec'), {'__name__': '__main__'})"
)


def resource(context: GradingContext) -> CheckProgramVerifier:
    """The `check_program` kind's resource: the sandbox settings its check runs open with."""
    return CheckProgramVerifier(context.sandbox_config, context.grading, context.opener)


class CheckProgramVerifier:
    def __init__(self, sandbox_config: SandboxConfig, grading: GradingConfig, opener: Opener | None = None):
        self.sandbox_config = sandbox_config
        self.grading = grading
        self.opener = opener or default_opener

    async def _sandbox(self, task: Task, submission: str, workspace: Sandbox | None) -> Sandbox:
        if workspace is not None:
            return await workspace.fork()
        files: dict[str, str | bytes] = dict(task.files)
        path = task.verifier.params_as(CheckProgramParams).solution_path
        if path is not None:
            files[path] = submission
        return await self.opener(self.sandbox_config, files)

    async def verify(self, task: Task, submission: str, *, workspace: Sandbox | None = None) -> Verdict:
        if not task.hidden_checks:
            raise VerifierError(f"task {task.id}: check_program needs hidden checks", kind="bad_task")
        override = task.verifier.params_as(CheckProgramParams).check_timeout_s
        timeout = self.grading.check_timeout_s if override is None else override
        limits = (task.limits or self.sandbox_config.limits).model_copy(update={"wall_s": timeout})
        results: list[TestResult] = []
        sandbox = await self._sandbox(task, submission, workspace)
        try:
            for path, program in sorted(task.hidden_checks.items()):
                is_py = path.endswith(".py")
                cmd = [self.grading.python, "-I", "-c", _PY_STDIN] if is_py else ["bash", "-s"]
                res = await sandbox.exec(cmd, stdin=program, cwd=WORKSPACE, limits=limits)
                if res.status.value == "sandbox_error":
                    raise VerifierError(f"check {path}: sandbox failed: {res.stderr[-300:]}", kind="sandbox")
                tail = (res.stdout[-200:] + res.stderr[-300:]).strip()
                outcome = "passed" if res.ok else "failed"
                results.append(
                    TestResult(name=path, outcome=outcome, detail=f"{res.status.value}: {tail}"[:500])
                )
        finally:
            await sandbox.close()
        passed_n = sum(r.outcome == "passed" for r in results)
        return Verdict(
            passed=passed_n == len(results),
            score=passed_n / len(results),
            tests=tuple(results),
            detail=f"{passed_n}/{len(results)} checks passed",
        )
