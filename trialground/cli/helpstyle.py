"""`--help` in the ecosystem's style: a flag shows no type (`--json`, not `--json <bool>`), a value shows its
kind as click, argparse and the Hugging Face CLIs print it (`INTEGER`, `PATH`, `TEXT ...` for a repeatable
option), and defaults show as `[default: ...]` (typer's own).

typer (0.29) labels every parameter with its Python type (`<bool>`, `<list[str]>`); this wraps its one label
method, `display_type_rich`, on options and arguments, and keeps any `metavar` a command sets."""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption

_KINDS = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "path": "PATH", "file": "FILE",
          "directory": "DIRECTORY", "bool": "BOOLEAN", "datetime": "DATETIME"}  # fmt: skip


def ecosystem_label(label: str | None) -> str | None:
    """`<int>`: `INTEGER`; `<int range>`: `INTEGER RANGE`; `<list[str]>`: `TEXT ...`; `<a|b>`: `[a|b]`."""
    if label is None or not (label.startswith("<") and label.endswith(">")):
        return label
    inner = label[1:-1]
    if inner.startswith("list[") and inner.endswith("]"):
        return f"{ecosystem_label(f'<{inner[5:-1]}>')} ..."
    if "|" in inner:
        return f"[{inner}]"
    words = inner.split(" ")
    return " ".join([_KINDS.get(words[0], words[0].upper()), *(w.upper() for w in words[1:])])


def install() -> None:
    option_label = TyperOption.display_type_rich
    argument_label = TyperArgument.display_type_rich

    def option(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag:
            return None
        return self.metavar if self.metavar is not None else ecosystem_label(option_label(self, ctx))

    def argument(self: TyperArgument, ctx: Any) -> str | None:
        return ecosystem_label(argument_label(self, ctx))

    TyperOption.display_type_rich = option  # type: ignore[method-assign]
    TyperArgument.display_type_rich = argument  # type: ignore[method-assign,assignment]
