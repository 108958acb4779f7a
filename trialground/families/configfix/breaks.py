"""How the `configfix` family writes a configuration and how a hand edit breaks it, per format.

`render(fmt, cfg, breaks, rng)` writes `cfg` as TOML, INI or JSON and applies each named break to a
different line; every break makes the standard library's parser refuse the file, and each has exactly one
repair that keeps the values (the prompt promises that none was meant to change).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

Config = dict[str, dict[str, object]]
Break = Callable[[str], str | None]  # one line -> the broken line, or None when it does not apply


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v) if isinstance(v, int) else json.dumps(v)


def _write(fmt: str, cfg: Config) -> list[str]:
    if fmt == "json":
        return json.dumps(cfg, indent=2).split("\n")
    lines: list[str] = []
    for section, kv in cfg.items():
        lines += [*([""] if lines else []), f"[{section}]"]
        for key, v in kv.items():
            text = (str(v).lower() if isinstance(v, bool) else str(v)) if fmt == "ini" else _toml_value(v)
            lines.append(f"{key} = {text}")
    return lines


def _sub(pattern: str, repl: str) -> Break:
    def apply(line: str) -> str | None:
        new = re.sub(pattern, repl, line, count=1)
        return new if new != line else None

    return apply


BREAKS: dict[str, dict[str, Break]] = {
    "toml": {
        "unterminated_string": _sub(r'^(\w+ = ".*)"$', r"\1"),
        "header_bracket": _sub(r"^\[(\w+)\]$", r"[\1"),
        "colon": _sub(r"^(\w+) = (?!\")", r"\1: "),
        "bare_string": _sub(r'^(\w+) = "([\w./-]+)"$', r"\1 = \2"),
    },
    "ini": {
        "header_bracket": _sub(r"^\[(\w+)\]$", r"[\1"),
        "no_equals": _sub(r"^(\w+) = (\S+)$", r"\1 \2"),
    },
    "json": {
        "trailing_comma": _sub(r"^(\s+\"\w+\": [^{\[]*[^,{\[])$", r"\1,"),
        "single_quotes": _sub(r'^(\s+)"(\w+)": "([^"\']*)"(,?)$', r"\1'\2': '\3'\4"),
        "missing_comma": _sub(r"^(\s+\"\w+\": [^{\[]+),$", r"\1"),
        "comment": _sub(r"^(\s+)(\"\w+\": \{)$", r"\1// settings below\n\1\2"),
    },
}


def render(fmt: str, cfg: Config, breaks: tuple[str, ...], rng: random.Random) -> str:
    """`cfg` in `fmt`, each of `breaks` applied to its own randomly chosen line (a ValueError when no line
    takes one)."""
    lines = _write(fmt, cfg)
    used: set[int] = set()
    for name in breaks:
        apply = BREAKS[fmt][name]
        options = [(i, new) for i, line in enumerate(lines) if i not in used and (new := apply(line))]
        if not options:
            raise ValueError(f"no line of this {fmt} file takes the break {name!r}")
        i, new = rng.choice(options)
        lines[i] = new
        used.add(i)
    return "\n".join(lines) + "\n"
