"""The `configfix` family's scripted expert: repairs the file line by line the way an operator would (its
own rules per format, not the generator's), parses it, applies the prompt's changes to the parsed settings
and writes the file again with its own writer."""

from __future__ import annotations

import configparser
import io
import json
import re
import tomllib
from collections.abc import Callable

from trialground.tasks.model import Task

Settings = dict[str, dict[str, object]]


def _repair_toml(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith("[") and not line.endswith("]"):
            line += "]"
        m = re.match(r"^(\w+)\s*[:=]\s*(.*)$", line)
        if m:
            key, value = m[1], m[2]
            if value.startswith('"') and (len(value) == 1 or not value.endswith('"')):
                value += '"'
            elif not re.fullmatch(r'true|false|-?\d+|".*"', value):
                value = json.dumps(value)
            line = f"{key} = {value}"
        out.append(line)
    return "\n".join(out)


def _repair_ini(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith("[") and not line.endswith("]"):
            line += "]"
        elif line and not line.startswith("[") and "=" not in line:
            key, _, value = line.partition(" ")
            line = f"{key} = {value}"
        out.append(line)
    return "\n".join(out)


def _repair_json(text: str) -> str:
    lines = [line for line in text.splitlines() if not line.strip().startswith("//")]
    fixed = []
    for i, line in enumerate(lines):
        line = re.sub(r"'([^']*)'", r'"\1"', line)
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if following.startswith("}") and line.endswith(","):
            line = line[:-1]
        elif following.startswith('"') and not line.endswith((",", "{", "[")):
            line += ","
        fixed.append(line)
    return "\n".join(fixed)


def _toml_text(cfg: Settings) -> str:
    parts = []
    for section, kv in cfg.items():
        parts.append(f"[{section}]")
        parts += [f"{k} = {json.dumps(v)}" for k, v in kv.items()]
        parts.append("")
    return "\n".join(parts)


def _ini_text(cfg: Settings) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_dict(cfg)
    buf = io.StringIO()
    parser.write(buf)
    return buf.getvalue()


def _ini_read(text: str) -> Settings:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return {s: dict(parser.items(s, raw=True)) for s in parser.sections()}


_FORMATS: dict[str, tuple[Callable[[str], str], Callable[[str], Settings], Callable[[Settings], str]]] = {
    "config.toml": (_repair_toml, tomllib.loads, _toml_text),
    "config.ini": (_repair_ini, _ini_read, _ini_text),
    "config.json": (_repair_json, json.loads, lambda cfg: json.dumps(cfg, indent=2) + "\n"),
}


def solve(task: Task) -> str | None:
    """The expert's repaired file for `task`, or None when it does not recognise the file or a change."""
    name = next((n for n in _FORMATS if n in task.files), None)
    if name is None:
        return None
    repair, read, write = _FORMATS[name]
    cfg: Settings = read(repair(task.files[name]))
    ini = name.endswith(".ini")
    changes = re.finditer(r"(set|double the value of|remove the key) `(\w+)` (?:in|from) the `(\w+)` section"
                          r"(?: to (\S+?)(?:;|\.\n))?", task.prompt)  # fmt: skip
    for m in changes:  # in the prompt's order: a later change may touch the same key
        verb, key, section = m[1], m[2], m[3]
        if verb == "remove the key":
            del cfg[section][key]
        elif verb == "double the value of":
            doubled = 2 * int(str(cfg[section][key]))
            cfg[section][key] = str(doubled) if ini else doubled
        else:
            value = json.loads(m[4])
            cfg[section][key] = (
                (str(value).lower() if isinstance(value, bool) else str(value)) if ini else value
            )
    return write(cfg)
