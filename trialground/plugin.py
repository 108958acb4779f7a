"""The one shape every open set's plugin takes: sandbox and policy backends, environment kinds, pool
backends.

    BACKENDS: Registry[SandboxBackend] = Registry("sandbox backend", SandboxBackend, SandboxError)
    BACKENDS.register(SandboxBackend(
        name="bwrap",                                   # what the config section's name field says
        factory="trialground.sandbox.backends.bwrap.sandbox:BwrapSandbox",  # or the object itself
        capabilities=SandboxCaps(isolated=True, ...),   # what the core may ask of it
        settings=NoSettings,                            # the model its `params` mapping validates into
        requires=(Requirement(program="bwrap", why="..."),),  # checked before a run starts
    ))

A plugin is a frozen record: `name`, `factory` (what builds it; each set says what the factory is),
`capabilities` (a frozen record of the set's own questions, so the core asks what a plugin can do and never
compares its name), `settings` (a frozen `extra="forbid"` pydantic model; a config section's `params`
mapping is validated into it when the config loads) and `requires` (the modules and programs it needs, each
with the extra that brings it and why: preflight lists the missing ones before a run starts). Each set
subclasses `Plugin` with its capabilities type, so a registry refuses another set's plugin. A user adds one
without editing the package: `register` from their own module, or `package.module:NAME` as the name in the
config section.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, NoReturn, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator, model_validator

from trialground.errors import TrialgroundError
from trialground.registry import Registry, import_path

C = TypeVar("C")


class FrozenParams(dict[str, Any]):
    """A config section's `params` mapping: read-only and hashable, so the section stays a frozen, hashable
    model (sandbox configs are dictionary keys)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(json.dumps(self, sort_keys=True, default=repr))

    def __reduce__(self) -> tuple[type[FrozenParams], tuple[dict[str, Any]]]:  # pickle, deepcopy
        return (FrozenParams, (dict(self),))

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a config section's params are read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]


Params = Annotated[dict[str, Any], AfterValidator(FrozenParams)]
"""The type of a config section's `params` field: the plugin's own settings, validated against its model
when the config loads."""


class NoSettings(BaseModel):
    """The settings of a plugin that takes none: any `params` key is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class Requirement:
    """A Python module (`module`) or an executable (`program`) a plugin needs, the trialground extra that
    brings it, and why; `install` overrides the default `pip install 'trialground[extra]'` advice."""

    module: str = ""
    program: str = ""
    extra: str = ""
    why: str = ""
    install: str = ""

    def met(self) -> bool:
        if self.program and not (shutil.which(self.program) or shutil.which(self.program, path=os.defpath)):
            return False
        if self.module:
            try:
                return importlib.util.find_spec(self.module) is not None
            except (ImportError, ValueError):
                return False
        return True

    def problem(self, who: str) -> str:
        """What is missing, for whom (`policy.backend=vllm`), and how to get it."""
        thing = f"the {self.module!r} package" if self.module else f"the program {self.program!r}"
        advice = self.install or (f"pip install 'trialground[{self.extra}]'" if self.extra else "install it")
        why = f" ({self.why})" if self.why else ""
        return f"{who} needs {thing}{why}, which is not installed: {advice}"


@dataclass(frozen=True)
class Plugin(Generic[C]):
    """One entry of an open set. Subclassed once per set with its capabilities type."""

    name: str
    factory: Any
    capabilities: C
    settings: type[BaseModel] = NoSettings
    requires: tuple[Requirement, ...] = ()
    check: Any = None
    doc: str = ""
    _resolved: list[Any] = field(default_factory=list, repr=False, compare=False)

    def load(self, what: str, error: type[TrialgroundError]) -> Any:
        """The factory, its dotted path imported on first use."""
        if not isinstance(self.factory, str):
            return self.factory
        if not self._resolved:
            where = f"{what} {self.name!r}"
            self._resolved.append(import_path(self.factory, what=where, error=error, kind="config"))
        return self._resolved[0]

    def settings_of(self, params: Mapping[str, Any]) -> BaseModel:
        """`params` as this plugin's typed settings (the config already validated them once)."""
        return self.settings.model_validate(dict(params))

    def missing(self, who: str) -> list[str]:
        """One line per requirement that is not met on this machine."""
        return [r.problem(who) for r in self.requires if not r.met()]


P = TypeVar("P", bound=Plugin[Any])


def resolve(obj: Any, what: str, error: type[TrialgroundError]) -> Any:
    """`obj`, or the object at its dotted path `package.module:NAME` (a plugin's hook)."""
    return import_path(obj, what=what, error=error, kind="config") if isinstance(obj, str) else obj


def typed_settings(registry: Registry[P], name: str, params: Mapping[str, Any], where: str) -> BaseModel:
    """`params` validated against the settings model of the plugin `name`; the error names each bad field
    under `where` (e.g. `policy.params.`)."""
    plugin = registry.lookup(name)
    return registry.params(plugin.settings, params, where=where)


def section_validators(field_name: str, registry: str, where: str) -> tuple[Any, Any]:
    """The two validators of a config section that names a plugin in `field_name` and holds its `params`:
    the name checked against the registry at the dotted path `registry` (pydantic reports it at the
    field), then the params against the plugin's settings and its own `check` (reported at the section).
    Assign both in the class body: `_known, _params = section_validators("backend", "pkg.mod:REG", "x.")`."""

    def known(cls: type, value: str) -> str:
        return check_name(import_path(registry, what="registry", error=TrialgroundError), value)

    def params(section: Any) -> Any:
        reg = import_path(registry, what="registry", error=TrialgroundError)
        check_section(reg, getattr(section, field_name), section.params, where, section)
        return section

    return field_validator(field_name)(classmethod(known)), model_validator(mode="after")(params)


def check_name(registry: Registry[P], name: str) -> str:
    """For a config field's validator: `name` when it is a plugin of `registry` (a dotted path imports it),
    else `ValueError` listing the known names (pydantic reports it at the field)."""
    try:
        registry.lookup(name)
    except TrialgroundError as e:
        raise ValueError(str(e)) from None
    return name


def check_section(
    registry: Registry[P], name: str, params: Mapping[str, Any], where: str, section: object
) -> None:
    """For a config section's validator: raise `ValueError` (pydantic reports it at the section) when `name`
    is no plugin of `registry`, `params` does not fit its settings, or its own `check(section)` refuses."""
    try:
        typed_settings(registry, name, params, where)
        check = registry.lookup(name).check
        if check is not None:
            resolve(check, f"{registry.what} {name!r} check", TrialgroundError)(section)
    except TrialgroundError as e:
        raise ValueError(str(e)) from None
