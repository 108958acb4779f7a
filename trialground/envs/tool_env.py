"""The multi-turn tool environment: the model works in the task's sandbox through tools, then submits.

Episode contract:
- ``reset(task)`` opens a sandbox holding the task's files and *visible* checks (hidden checks never enter
  it), unless the environment was built around a sandbox already prepared for that task (the pool does
  this). The observation is the prompt followed by the tool list.
- ``step(text)`` parses tool calls from the model's text (`EnvConfig.tool_format`), runs up to
  `max_calls_per_turn` of them in order, and answers with their outputs cut to `observation_budget_chars`.
  Malformed, unknown or surplus calls and messages without any call are answered with an explanation and
  counted in ``counters["invalid_calls"]``; nothing the model writes raises.
- The episode ends on ``submit``, at ``max_turns``, or at ``max_episode_s`` (then, with ``grade_on_limit``,
  the workspace is graded as it is). Grading is ``Grader.grade(task, submission, workspace=sandbox,
  actions=...)``; the submission is the ``answer`` given to submit, else the solution file's text.
- A sandbox that breaks ends the episode with an `EpisodeEnd` whose ``error`` is set (an `ErrorInfo`), and no
  grading; the environment is then `failed` and must not be reused.

The final observation carries the `EpisodeEnd` (finish reason, grading, the episode's actions, error);
intermediate ones carry ``turn`` and ``exec_failed`` (a bash, python or run_tests call of this turn did not
succeed: non-zero exit, timeout, a limit; the `first_failure` branch point of `loop.branch`); the first one
an `EpisodeStart` with the tool schemas and ``workspace_digest`` (`EnvConfig.workspace_digest`): a hash of
every file's path and bytes in the workspace the episode starts from, computed inside the sandbox. The
episode's counters are `ToolEnv.counters`.

Test integrity (`EnvConfig.visible_check_hashes`): the sha256 of each visible check file as the agent's
workspace holds it is taken at ``reset`` and again when the episode ends (before grading, and at a limit
without grading), and the `EpisodeEnd` carries both (`CheckHashes`; a file that is gone or no longer a
readable regular file hashes to None). Evidence for the monitor only: grading never reads it.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trialground.envs.base import (
    CheckHashes,
    Environment,
    EpisodeEnd,
    EpisodeStart,
    Forkable,
    Grading,
    Observation,
)
from trialground.envs.config import EnvConfig
from trialground.envs.observations import shown
from trialground.envs.text import truncate_middle
from trialground.envs.toolcalls import InvalidCall, ToolFormat, format_tool_call, parse_tool_calls
from trialground.envs.tools.base import make_action
from trialground.envs.tools.registry import ToolSet
from trialground.envs.tools.toolbox import Toolbox
from trialground.errors import EnvError, ErrorInfo, SandboxError, TrialgroundError, VerifierError
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.tasks.model import Task
from trialground.verify.config import GradingConfig
from trialground.verify.kinds.submitted import UnreadableSubmission, read_submitted
from trialground.verify.verdict import Action, Graded

SandboxOpener = Callable[[SandboxConfig, Mapping[str, str | bytes]], Awaitable[Sandbox]]
_HANG_GRACE_S = 10.0  # beyond a tool's own wall limit before the sandbox is declared hung


def _now() -> float:
    """The event loop's clock (so simulations on virtual time see episode time), else monotonic time."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def workspace_files(task: Task) -> dict[str, str | bytes]:
    """What the agent's sandbox starts with: task files plus visible checks. Never hidden checks."""
    return {**task.files, **task.visible_checks}


async def _default_opener(config: SandboxConfig, files: Mapping[str, str | bytes]) -> Sandbox:
    from trialground.sandbox.factory import open_sandbox  # imported late: sandbox is a lower layer

    return await open_sandbox(config, files)


@dataclass
class EpisodeState:
    """Everything about an episode that is not in the workspace. Copied by snapshot and fork."""

    turn: int = 0
    elapsed_s: float = 0.0  # episode seconds used before `ToolEnv._resumed_at`
    counters: dict[str, int] = field(
        default_factory=lambda: {"tool_calls": 0, "invalid_calls": 0, "tool_errors": 0}
    )
    actions: list[Action] = field(default_factory=list)
    history: list[tuple[str, str]] = field(default_factory=list)  # (role, text): "policy" | "env"
    done: bool = False
    finish_reason: str = ""
    checks_start: dict[str, str] | None = None  # visible check path -> sha256 at reset
    checks: CheckHashes | None = None  # start and end hashes, once the episode ended
    memos: dict[type, Any] = field(default_factory=dict)  # the tools' own state, one memo per type


@dataclass(frozen=True)
class EnvSnapshot:
    """A point in an episode: the sandbox's snapshot id plus a copy of the episode state."""

    env_token: str
    sandbox_snapshot: str
    state: EpisodeState


class ToolEnv(Environment, Forkable):
    """See the module docstring. Not safe for concurrent `step` calls on one instance."""

    def __init__(
        self,
        grader: Grading,
        config: EnvConfig | None = None,
        sandbox_config: SandboxConfig | None = None,
        *,
        sandbox: Sandbox | None = None,
        task: Task | None = None,
        owns_sandbox: bool = True,
        opener: SandboxOpener | None = None,
        on_exec: Callable[[float], None] | None = None,
        initial_snapshot: str | None = None,
    ) -> None:
        self.grader = grader
        self.config = config or EnvConfig(kind="tool")
        self.tools = ToolSet.of(self.config)
        self.sandbox_config = sandbox_config or SandboxConfig()
        self.sandbox = sandbox
        self.task = task  # the task `sandbox` was prepared for, if given
        self.owns_sandbox = owns_sandbox
        self.opener = opener or _default_opener
        self.on_exec = on_exec
        self.initial_snapshot = initial_snapshot  # restored by a second reset() on a borrowed sandbox
        self.state = EpisodeState()
        self.error: ErrorInfo | None = None  # set when infrastructure failed; the env is then unusable
        self._revoked: ErrorInfo | None = None
        self._resumed_at = _now()
        self._token = uuid.uuid4().hex
        self._toolbox: Toolbox | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.state.counters)

    @property
    def actions(self) -> tuple[Action, ...]:
        return tuple(self.state.actions)

    def elapsed_s(self) -> float:
        return self.state.elapsed_s + (_now() - self._resumed_at)

    def revoke(self, info: ErrorInfo) -> None:
        """Called by the pool when the lease expired: every later step ends the episode with `info`."""
        self._revoked = info

    async def reset(self, task: Task) -> Observation:
        if self._revoked is not None:
            raise EnvError(f"environment revoked: {self._revoked.message}", kind=self._revoked.kind)
        if self.sandbox is not None and self.task is not None and self.task.id != task.id:
            raise EnvError(
                f"sandbox was prepared for task {self.task.id}, not {task.id}", kind="task_mismatch"
            )
        if self.sandbox is not None and self.state.turn > 0:
            if self.initial_snapshot is not None:
                await self.sandbox.hand_over(self.initial_snapshot)
            elif self.owns_sandbox:
                await self.sandbox.close()  # a second episode on an owned sandbox starts from a fresh one
                self.sandbox = None
            else:
                raise EnvError(
                    "a borrowed sandbox without an initial snapshot cannot be reset twice", kind="reused"
                )
        if self.sandbox is None:
            try:
                self.sandbox = await self.opener(self.sandbox_config, workspace_files(task))
            except TrialgroundError:
                raise
            except Exception as e:
                raise SandboxError(f"could not open a sandbox: {e}", kind="open_failed") from e
            self.owns_sandbox = True
        self.task = task
        self.state = EpisodeState()
        self.error = None
        self._resumed_at = _now()
        limits = task.limits or self.sandbox_config.limits
        self._toolbox = Toolbox(self.sandbox, task, limits, self.config.python)
        digest = await self._toolbox.workspace_digest() if self.config.workspace_digest else None
        if self.config.visible_check_hashes and task.visible_checks:
            hashes = await self._check_hashes()
            if hashes is not None and all(h is not None for h in hashes.values()):
                self.state.checks_start = {p: h for p, h in hashes.items() if h is not None}
        fmt: ToolFormat = "xml" if self.config.tool_format == "xml" else "json_tags"
        name, args = self.tools.example()
        example = format_tool_call(name, dict(args), fmt)
        text = f"{task.prompt}\n\n{self.tools.docs()}\nCall a tool like this:\n{example}"
        # the tools as JSON schemas too: a chat template that takes `tools=` renders them its own way
        start = EpisodeStart(tools=tuple(self.tools.schemas()), workspace_digest=digest)
        return Observation(text=text, start=start)

    async def step(self, action: str) -> Observation:
        st = self.state
        if self._revoked is not None:
            return self._final(self._revoked.kind, error=self._revoked)
        if self.task is None or self._toolbox is None:
            return self._final(
                "not_started", error=EnvError("step() before reset()", kind="not_reset").info()
            )
        if st.done:
            return self._over()
        st.turn += 1
        st.history.append(("policy", action))
        if self.elapsed_s() >= self.config.max_episode_s:  # generation used up the episode's time
            return await self._limit("time_limit", "episode time limit reached; nothing was run")
        outputs: list[str] = []
        submitted: str | None = None
        did_submit = exec_failed = False
        calls = parse_tool_calls(action, self.config.tool_format)
        if not calls:
            st.counters["invalid_calls"] += 1
            outputs.append("error: no tool call found; call a tool (see the list above) or submit")
        for i, call in enumerate(calls):
            if i >= self.config.max_calls_per_turn:
                st.counters["invalid_calls"] += 1
                outputs.append(
                    f"error: only {self.config.max_calls_per_turn} tool calls per message; rest ignored"
                )
                break
            if isinstance(call, InvalidCall):
                st.counters["invalid_calls"] += 1
                st.actions.append(make_action(call.name or "invalid", {"raw": call.raw}, None))
                outputs.append(f"error: {call.reason}")
                continue
            problem = self.tools.validate(call.name, call.arguments)
            if problem is not None:
                st.counters["invalid_calls"] += 1
                st.actions.append(make_action(call.name, call.arguments, None))
                outputs.append(f"error: {problem}")
                continue
            remaining = self.config.max_episode_s - self.elapsed_s()
            t0 = _now()
            try:
                wall = min(self.config.tool_timeout_s, max(remaining, 0.1))
                outcome = await asyncio.wait_for(
                    self.tools.run(self._toolbox, call.name, call.arguments, wall, st.memos),
                    timeout=wall + _HANG_GRACE_S,
                )
            except TrialgroundError as e:
                return self._fail(e.info())
            except TimeoutError:
                return self._fail(SandboxError(f"{call.name} hung past its wall limit", kind="hung").info())
            except Exception as e:  # a bug in the tool's host-side code (the toolbox reports the
                # sandbox backend's own exceptions as SandboxError); it must not take the siblings down
                return self._fail(
                    EnvError(f"{call.name}: {type(e).__name__}: {e}", kind="tool_crashed").info()
                )
            if self.on_exec is not None:
                self.on_exec(_now() - t0)
            st.counters["tool_calls"] += 1
            st.counters[f"tool/{call.name}"] = st.counters.get(f"tool/{call.name}", 0) + 1
            if not outcome.ok:
                st.counters["tool_errors"] += 1
                exec_failed = exec_failed or self.tools.callable[call.name].capabilities.runs_program
            st.actions.append(make_action(call.name, call.arguments, outcome))
            seen = shown(self.config.observations, self.task.id, outcome.text, turn=st.turn, call=i)
            budget = self.config.tool_observation_chars.get(call.name, self.config.observation_budget_chars)
            outputs.append(truncate_middle(seen, budget))
            if outcome.submit:
                did_submit, submitted = True, outcome.answer
                break
        text = truncate_middle("\n".join(outputs), self.config.observation_budget_chars)
        st.history.append(("env", text))
        if did_submit:
            return await self._grade("submitted", submitted, text)
        if st.turn >= self.config.max_turns:
            return await self._limit("max_turns", text)
        if self.elapsed_s() >= self.config.max_episode_s:
            return await self._limit("time_limit", text)
        return Observation(text=text, turn=st.turn, exec_failed=exec_failed)

    async def finish(self, reason: str = "ended") -> Observation:
        """End the episode now, as at a limit: with `grade_on_limit` the workspace is graded as it is (for
        trainers whose episodes end when the model stops calling tools), else it ends without a reward. On
        an episode that is already over this changes nothing and returns "the episode is over"."""
        if self._revoked is not None:
            return self._final(self._revoked.kind, error=self._revoked)
        if self.task is None or self._toolbox is None:
            return self._final(
                "not_started", error=EnvError("finish() before reset()", kind="not_reset").info()
            )
        if self.state.done:
            return self._over()
        return await self._limit(reason, f"episode ended: {reason}")

    async def _limit(self, reason: str, text: str) -> Observation:
        if self.config.grade_on_limit:
            return await self._grade(reason, None, text)
        await self._end_hashes()
        return self._final(reason, text=text)

    async def _check_hashes(self) -> dict[str, str | None] | None:
        """sha256 of each visible check as the workspace holds it now (None for one that is gone or not a
        readable regular file); None when the sandbox could not be read (evidence is never an error)."""
        assert self.task is not None and self.sandbox is not None
        out: dict[str, str | None] = {}
        for path in sorted(self.task.visible_checks):
            try:  # a file larger than the check was is changed: never read past that on the host
                data = await read_submitted(self.sandbox, path, len(self.task.visible_checks[path].encode()))
            except UnreadableSubmission:
                data = None
            except Exception:
                return None
            out[path] = None if data is None else hashlib.sha256(data).hexdigest()
        return out

    async def _end_hashes(self) -> None:
        """Records the visible checks' end hashes next to their start hashes (`EpisodeEnd.visible_checks`)."""
        start = self.state.checks_start
        if start is None or self.state.checks is not None:
            return
        end = await self._check_hashes()
        if end is not None:
            self.state.checks = CheckHashes(start=start, end=end)

    async def _grade(self, reason: str, answer: str | None, text: str) -> Observation:
        assert self.task is not None
        await self._end_hashes()
        submission = answer if answer is not None else await self._solution_text()
        try:
            graded = await self.grader.grade(
                self.task, submission, workspace=self.sandbox, actions=tuple(self.state.actions)
            )
        except TrialgroundError as e:
            return self._final(reason, text=text, error=e.info())
        except Exception as e:
            err = VerifierError(f"grader raised {type(e).__name__}: {e}", kind="grader_exception")
            return self._final(reason, text=text, error=err.info())
        self.state.done, self.state.finish_reason = True, reason
        return self._observe_end(text, graded=graded, error=graded.verdict.error)

    async def _solution_text(self) -> str:
        assert self.task is not None and self.sandbox is not None
        path = self.task.verifier.params.get("solution_path", "solution.py")
        # what grading itself reads at most (the run's setting where the grader has one)
        grading = getattr(getattr(self.grader, "reward_config", None), "grading", None) or GradingConfig()
        limit = grading.max_solution_bytes
        try:
            return (await self.sandbox.read(str(path), limit)).decode("utf-8", errors="replace")
        except (OSError, ValueError, SandboxError):  # no readable solution: grade the empty submission
            return ""

    def _fail(self, info: ErrorInfo) -> Observation:
        self.error = info
        return self._final("error", error=info)

    def _final(self, reason: str, *, text: str = "", error: ErrorInfo | None = None) -> Observation:
        self.state.done, self.state.finish_reason = True, reason
        return self._observe_end(text or f"episode ended: {reason}", error=error)

    def _observe_end(
        self, text: str, *, graded: Graded | None = None, error: ErrorInfo | None = None
    ) -> Observation:
        end = EpisodeEnd(
            finish_reason=self.state.finish_reason,
            graded=graded,
            actions=tuple(self.state.actions),
            tool_calls=self.state.counters["tool_calls"],
            invalid_calls=self.state.counters["invalid_calls"],
            error=error,
            visible_checks=self.state.checks,
        )
        return Observation(text=text, done=True, turn=self.state.turn, end=end)

    def _over(self) -> Observation:
        """A step after the end: the episode is over and nothing more is graded."""
        return Observation(text="the episode is over", done=True, turn=self.state.turn)

    # --- snapshot / rollback / fork -------------------------------------------------------------------

    def _require_sandbox(self) -> Sandbox:
        if self._revoked is not None:
            raise EnvError(f"environment revoked: {self._revoked.message}", kind=self._revoked.kind)
        if self.sandbox is None or self.task is None:
            raise EnvError("no episode in progress", kind="not_reset")
        if self.error is not None:
            raise EnvError(f"environment failed earlier: {self.error.message}", kind="failed_env")
        return self.sandbox

    def _frozen_state(self) -> EpisodeState:
        st = copy.deepcopy(self.state)
        st.elapsed_s = self.elapsed_s()
        return st

    async def snapshot(self) -> EnvSnapshot:
        sandbox = self._require_sandbox()
        snap_id = await sandbox.snapshot()
        return EnvSnapshot(self._token, snap_id, self._frozen_state())

    async def rollback(self, snap: EnvSnapshot) -> None:
        sandbox = self._require_sandbox()
        if snap.env_token != self._token:
            raise EnvError("snapshot belongs to another environment", kind="foreign_snapshot")
        await sandbox.restore(snap.sandbox_snapshot)
        self.state = copy.deepcopy(snap.state)
        self._resumed_at = _now()

    async def fork(self, n: int) -> list[ToolEnv]:
        """n environments continuing from now, each owning a `Sandbox.fork()` of this workspace."""
        if n < 1:
            raise EnvError(f"fork(n) needs n >= 1, got {n}", kind="bad_fork")
        sandbox = self._require_sandbox()
        state = self._frozen_state()
        results = await asyncio.gather(*(sandbox.fork() for _ in range(n)), return_exceptions=True)
        children = [r for r in results if isinstance(r, Sandbox)]
        if len(children) < n:
            await asyncio.gather(*(c.close() for c in children), return_exceptions=True)
            bad = next(r for r in results if not isinstance(r, Sandbox))
            raise EnvError(f"fork failed: {bad}", kind="fork_failed") from bad  # type: ignore[misc]
        envs = []
        for child in children:
            env = ToolEnv(
                self.grader,
                self.config,
                self.sandbox_config,
                sandbox=child,
                task=self.task,
                owns_sandbox=True,
                opener=self.opener,
                on_exec=self.on_exec,
            )
            env.state = copy.deepcopy(state)
            env._toolbox = Toolbox(child, self.task, self._toolbox.limits, self.config.python)  # type: ignore[arg-type,union-attr]
            envs.append(env)
        return envs

    async def close(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None and self.owns_sandbox:
            await sandbox.close()
