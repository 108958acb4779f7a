"""One registry for every open set: verifier kinds, task sources, policy backends, sandbox backends, judges
and rubric parts.

    KINDS: Registry[VerifierKind] = Registry("verifier kind", VerifierKind, TaskError)
    KINDS.register(VerifierKind(...))
    KINDS.lookup("numeric")                   # a registered name
    KINDS.lookup("my_pkg.verifiers:EDIT")     # a plugin: imported on first use, registered under its name

An entry is any object with a `name`; entries that take settings carry their own frozen pydantic params
model, and `Registry.params` validates a mapping against it with an error that names each bad field (and,
for a misspelt one, the closest field the model has). A user adds an entry without editing the package:
`register` from their own module, or its dotted path `package.module:NAME` wherever a name is accepted (a
task file, the run config).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from trialground.errors import TrialgroundError


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """Entries of one type by name; `error` is the boundary's error type raised for a bad name or params."""

    def __init__(
        self,
        what: str,
        entry_type: type[T] | tuple[type, ...],
        error: type[TrialgroundError],
        *,
        error_kind: str = "bad_name",
    ) -> None:
        self.what = what
        self._type = entry_type
        self._error = error
        self._kind = error_kind
        self._entries: dict[str, T] = {}

    def register(self, entry: T, *, replace: bool = False) -> T:
        """Add `entry` under its name. Another entry under a taken name is an error unless `replace`."""
        old = self._entries.get(entry.name)
        if old is not None and old is not entry and not replace:
            raise ValueError(f"{self.what} {entry.name!r} is already registered")
        self._entries[entry.name] = entry
        return entry

    def lookup(self, name: str) -> T:
        """The entry called `name`, or the entry at the dotted path `package.module:NAME`."""
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            obj: T = import_path(name, what=f"{self.what} plugin", error=self._error, kind=self._kind)
            if not isinstance(obj, self._type):
                expected = getattr(self._type, "__name__", str(self._type))
                raise self._error(
                    f"{self.what} plugin {name!r} is a {type(obj).__name__}, not a {expected}",
                    kind=self._kind,
                )
            existing = self._entries.get(obj.name)
            if existing is not None and existing is not obj:
                raise self._error(
                    f"{self.what} plugin {name!r} is named {obj.name!r}, which is already another entry",
                    kind=self._kind,
                )
            self._entries[obj.name] = self._entries[name] = obj
            return obj
        raise self._error(
            f"unknown {self.what} {name!r}: known are {', '.join(self.names()) or '(none)'}, or name a "
            "plugin as 'package.module:NAME'",
            kind=self._kind,
        )

    def names(self) -> list[str]:
        """The registered names (plugins' dotted aliases left out)."""
        return sorted(k for k in self._entries if ":" not in k)

    def entries(self) -> list[T]:
        """The registered entries, by name (plugins' dotted aliases left out)."""
        return [self._entries[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def params(self, model: type[BaseModel], values: Mapping[str, Any], *, where: str = "") -> BaseModel:
        """`values` validated against an entry's params `model`; the error names every bad field."""
        try:
            return model.model_validate(dict(values))
        except ValidationError as e:
            problems = "; ".join(_problem(model, err) for err in e.errors())
            raise self._error(f"{where}params: {problems}", kind=self._kind) from None


def _problem(model: type[BaseModel], err: Any) -> str:
    """One field's problem; a field the model does not have names the closest one it has."""
    text = f"{'.'.join(map(str, err['loc'])) or '-'}: {err['msg']}"
    if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
        close = difflib.get_close_matches(str(err["loc"][0]), list(model.model_fields), n=1)
        text += f" (did you mean {close[0]!r}?)" if close else ""
    return text


def import_path(path: str, *, what: str, error: type[TrialgroundError], kind: str = "bad_name") -> Any:
    """The object at `package.module:NAME` (a plugin, or a lazily resolved built-in)."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise error(f"{what}: {path!r} is not 'package.module:NAME'", kind=kind)
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise error(f"{what}: cannot import {path!r}: {e}", kind=kind) from e
