"""The shape of a tool: what the registry holds for each one, what a call gets, what it returns.

A tool is a `Tool` plugin: its name, its parameters (`ToolParam`: name, type, description, required), the
texts every rendering of it is generated from (the prompt's line, the JSON-schema and TRL description,
what it returns), its capabilities (`ToolCaps`), its own settings model (a run config's
`env.tools: [{name, params}]`), its requirements, and its `factory`: the async function
`run(call: ToolCall) -> ToolOutcome` (or its dotted path).

Contract: a tool turns every *program* failure (bad arguments, missing file, non-zero exit, timeout) into a
`ToolOutcome` with ``ok=False``; only a broken sandbox propagates, as `SandboxError`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from trialground.envs.navigate import nav_limits
from trialground.errors import EnvError
from trialground.plugin import Plugin
from trialground.sandbox.base import ExecResult, Limits
from trialground.verify.verdict import Action

if TYPE_CHECKING:
    from trialground.envs.tools.toolbox import Toolbox

M = TypeVar("M")


@dataclass(frozen=True)
class ToolParam:
    """One parameter of a tool. The model writes every value as text or a number; the tool gets text."""

    name: str
    description: str
    required: bool = True
    type: type = str
    """`str` or `int`: what the JSON schema and the TRL method declare."""


@dataclass(frozen=True)
class ToolCaps:
    """What the environment may ask of a tool."""

    listed: bool = True
    """Listed in the prompt's tool list by default (else only where `env.tools` names it)."""
    runs_program: bool = False
    """Its failure is a failed program run (the observation's `exec_failed`)."""
    ends_episode: bool = False
    """Calling it ends the episode (the outcome's `submit`); listed last."""


@dataclass(frozen=True)
class ToolOutcome:
    text: str
    ok: bool
    changed_workspace: bool | None = None
    target: str | None = None
    submit: bool = False
    answer: str | None = None


@dataclass(frozen=True)
class ToolCall:
    """What one call of a tool gets: the sandbox access, its arguments (as text), the limits of any program
    it starts, its settings, and the episode's memos (state a tool keeps across calls, one per type)."""

    box: Toolbox
    args: Mapping[str, str]
    limits: Limits
    settings: BaseModel
    memos: dict[type, Any] = field(default_factory=dict)

    def memo(self, kind: type[M]) -> M:
        """The episode's `kind` memo (made on first use; copied with the episode by snapshot and fork)."""
        if kind not in self.memos:
            self.memos[kind] = kind()
        value: M = self.memos[kind]
        return value


RunTool = Callable[[ToolCall], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class Tool(Plugin[ToolCaps]):
    """One tool (see the module docstring). `factory` is its `run`; `prompt` its line in the prompt's tool
    list (after `name(params)`), `description` its JSON-schema and TRL description, `returns` what a TRL
    method documents it returns; `example` arguments of a call shown in the prompt (the first listed
    tool that has them)."""

    params: tuple[ToolParam, ...] = ()
    prompt: str = ""
    description: str = ""
    returns: str = "The tool's output."
    example: Mapping[str, str] | None = None

    def run_function(self) -> RunTool:
        fn: RunTool = self.load("tool", EnvError)
        return fn

    def signature(self) -> str:
        """`name(a, b?)`: as the prompt lists it (optional parameters marked `?`)."""
        return f"{self.name}({', '.join(p.name + ('' if p.required else '?') for p in self.params)})"

    def schema(self) -> dict[str, Any]:
        """The `{"type": "function", "function": {...}}` entry chat templates take as `tools=`."""
        properties = {
            p.name: {"type": "integer" if p.type is int else "string", "description": p.description}
            for p in self.params
        }
        required = [p.name for p in self.params if p.required]
        parameters = {"type": "object", "properties": properties, "required": required}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


async def program_outcome(call: ToolCall, cmd: list[str] | str, stdin: str | None = None) -> ToolOutcome:
    """Run a program in the workspace: its rendered exit status and output; ok when it exited 0."""
    res = await call.box.exec(cmd, call.limits, stdin=stdin)
    return ToolOutcome(render_exec(res), res.ok)


async def page_outcome(call: ToolCall, argv: list[str], path: str) -> ToolOutcome:
    """Run one of `trialground.envs.navigate`'s bounded programs: its page (ok on exit 0; 1 is "nothing
    found", 2 a bad path), or the rendered failure when it was killed or ran out of time."""
    res = await call.box.exec(argv, nav_limits(call.limits))
    if res.status != "ok" and res.exit_code not in (0, 1, 2):  # timed out or killed: say so
        return ToolOutcome(render_exec(res), False, False, path)
    return ToolOutcome(res.stdout.rstrip("\n"), res.exit_code == 0, False, path)


def argument_digest(name: str, arguments: Mapping[str, Any]) -> str:
    blob = json.dumps([name, dict(arguments)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make_action(name: str, arguments: Mapping[str, Any], outcome: ToolOutcome | None) -> Action:
    """The grader's record of one call; `outcome=None` means the call was invalid and never ran."""
    return Action(
        tool=name,
        argument_digest=argument_digest(name, arguments),
        ok=outcome.ok if outcome else False,
        changed_workspace=outcome.changed_workspace if outcome else False,
        target=outcome.target if outcome else None,
    )


def render_exec(res: ExecResult) -> str:
    head = f"[exit {res.exit_code}]" if res.status == "ok" or res.exit_code is not None else ""
    if res.status not in ("ok", "nonzero_exit"):
        head = f"[{res.status}{f' exit {res.exit_code}' if res.exit_code is not None else ''}]"
    parts = [head]
    if res.stdout:
        parts.append(res.stdout.rstrip("\n"))
    if res.stderr:
        parts.append("[stderr]\n" + res.stderr.rstrip("\n"))
    return "\n".join(parts)


class Deadline:
    """One call's wall limit shared by the programs it runs one after another: each gets what is left, so
    the call ends within its limit however many programs it starts (the environment treats a call that
    overruns its limit as a hung sandbox)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.end = time.monotonic() + limits.wall_s

    def next(self) -> Limits | None:
        """Limits for the next program, or None when under 0.1 s is left."""
        left = self.end - time.monotonic()
        if left < 0.1:
            return None
        return self.limits.model_copy(update={"wall_s": min(self.limits.wall_s, left)})
