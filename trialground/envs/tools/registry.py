"""The tool registry and the tools of one environment config: what is callable, what the prompt lists,
the JSON schemas chat templates take, and how a call is checked and run. Every rendering of a tool (the
prompt's line, its schema, the TRL method) is generated from its `Tool` record, so they cannot disagree.

The prompt lists the tools whose `ToolCaps.listed` is on, then those an `env` flag turns on
(`navigation_tools`, `patch_tool`, `repair_tools`), then `env.tools` in order, then the tools that end the
episode. Every built-in tool is callable either way (a policy trained on the shorter list keeps seeing the
prompt it was trained on); a plugin tool is callable where `env.tools` names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from trialground.envs.tools import (
    apply_fix,
    apply_patch,
    bash,
    edit_file,
    fixes,
    python,
    read_file,
    read_lines,
    run_tests,
    search,
    submit,
    write_file,
)
from trialground.envs.tools.base import Tool, ToolCall, ToolOutcome
from trialground.envs.tools.toolbox import Toolbox
from trialground.errors import EnvError
from trialground.registry import Registry


class _Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...


class ToolsSection(Protocol):
    """What a tool set is read from: `env.tools` and the flag fields, read by name (the env config imports
    this module, so it is described here rather than imported)."""

    @property
    def tools(self) -> Sequence[_Named]: ...


TOOLS: Registry[Tool] = Registry("tool", Tool, EnvError, error_kind="config")
# the built-in tools in the order the prompt lists them
BUILTIN: tuple[str, ...] = tuple(
    TOOLS.register(m.TOOL).name
    for m in (
        bash,
        python,
        read_file,
        write_file,
        edit_file,
        run_tests,
        search,
        read_lines,
        apply_patch,
        fixes,
        apply_fix,
        submit,
    )
)
# the env flags that list built-in tools the prompt leaves out by default
FLAG_TOOLS: dict[str, tuple[str, ...]] = {
    "navigation_tools": (search.TOOL.name, read_lines.TOOL.name),
    "patch_tool": (apply_patch.TOOL.name,),
    "repair_tools": (fixes.TOOL.name, apply_fix.TOOL.name),
}
HEADER = "Tools (one or more calls per message):"


class ToolSet:
    """The tools of one environment: the built-ins plus `named` (tool, params) pairs; `flags` the env
    flags that are on (keys of FLAG_TOOLS)."""

    def __init__(
        self, named: Sequence[tuple[str, Mapping[str, Any]]] = (), flags: Sequence[str] = ()
    ) -> None:
        self.callable: dict[str, Tool] = {name: TOOLS.lookup(name) for name in BUILTIN}
        self.settings: dict[str, BaseModel] = {}
        extra: list[Tool] = []
        for name, params in named:
            tool = TOOLS.lookup(name)
            self.callable[tool.name] = tool
            self.settings[tool.name] = TOOLS.params(tool.settings, params, where=f"env.tools {tool.name!r} ")
            extra.append(tool)
        flagged = [self.callable[n] for f in flags for n in FLAG_TOOLS[f]]
        base = [
            t for t in self.callable.values() if t.capabilities.listed and not t.capabilities.ends_episode
        ]
        last = [t for t in self.callable.values() if t.capabilities.ends_episode]
        self.listed: list[Tool] = list({t.name: t for t in (*base, *flagged, *extra, *last)}.values())

    @classmethod
    def of(cls, config: ToolsSection) -> ToolSet:
        flags = [f for f in FLAG_TOOLS if getattr(config, f)]
        return cls([(s.name, s.params) for s in config.tools], flags)

    def docs(self) -> str:
        """The prompt's tool list."""
        lines = [f"- {t.signature()}: {t.prompt}" for t in self.listed]
        return "\n".join([HEADER, *lines])

    def schemas(self) -> list[dict[str, Any]]:
        """One `{"type": "function", "function": {...}}` entry per callable tool."""
        return [t.schema() for t in self.callable.values()]

    def example(self) -> tuple[str, Mapping[str, str]]:
        """A call the prompt shows: the first listed tool that has an example."""
        tool = next(t for t in (*self.listed, *self.callable.values()) if t.example is not None)
        assert tool.example is not None
        return tool.name, tool.example

    def validate(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """Why a call cannot run, or None when it can."""
        tool = self.callable.get(name)
        if tool is None:
            return f"unknown tool {name!r}; available: {', '.join(self.callable)}"
        required = [p.name for p in tool.params if p.required]
        known = [p.name for p in tool.params]
        missing = [p for p in required if p not in arguments]
        if missing:
            return f"{name}: missing parameter(s) {', '.join(missing)}"
        extra = [p for p in arguments if p not in known]
        if extra:
            return f"{name}: unknown parameter(s) {', '.join(extra)}; takes {', '.join(known)}"
        wrong = [p for p in arguments if not isinstance(arguments[p], str | int | float)]
        if wrong:
            return f"{name}: parameter(s) {', '.join(wrong)} must be text"
        return None

    async def run(
        self, box: Toolbox, name: str, args: Mapping[str, Any], wall_s: float, memos: dict[type, Any]
    ) -> ToolOutcome:
        """Run a validated call (see `run_call`)."""
        tool = self.callable[name]
        return await run_call(box, tool, args, wall_s, memos, self.settings.get(tool.name))


async def run_call(
    box: Toolbox,
    tool: Tool,
    args: Mapping[str, Any],
    wall_s: float,
    memos: dict[type, Any] | None = None,
    settings: BaseModel | None = None,
) -> ToolOutcome:
    """Run `tool` on a validated call with at most `wall_s` seconds for any program it starts; `memos`: the
    episode's tool memos (a fresh set when None)."""
    limits = box.limits.model_copy(update={"wall_s": max(0.1, min(box.limits.wall_s, wall_s))})
    call = ToolCall(
        box=box,
        args={k: str(v) for k, v in args.items()},
        limits=limits,
        settings=settings if settings is not None else tool.settings(),
        memos=memos if memos is not None else {},
    )
    return await tool.run_function()(call)


_BUILTINS = ToolSet()


def tool_docs(navigation: bool, patch: bool = False, repairs: bool = False) -> str:
    """The built-in tools' prompt list, with the tools of each flag that is on."""
    on = ((navigation, "navigation_tools"), (patch, "patch_tool"), (repairs, "repair_tools"))
    return ToolSet(flags=[f for flag, f in on if flag]).docs()


TOOL_DOCS = tool_docs(False)


def tool_schemas() -> list[dict[str, Any]]:
    """The built-in tools as JSON-schema function descriptions (for chat templates that take `tools=`)."""
    return _BUILTINS.schemas()


def validate_call(name: str, arguments: Mapping[str, Any]) -> str | None:
    """Why a call of a built-in tool cannot run, or None when it can."""
    return _BUILTINS.validate(name, arguments)


async def run_named(
    box: Toolbox, name: str, args: Mapping[str, Any], wall_s: float, memos: dict[type, Any] | None = None
) -> ToolOutcome:
    """Run the built-in tool `name` on a validated call, with its default settings."""
    return await run_call(box, TOOLS.lookup(name), args, wall_s, memos)
