"""The `configfix` family: a service's configuration file that its parser refuses, repaired and changed.

The workspace holds `config.toml`, `config.ini` or `config.json` (a service's settings in 3-4 sections,
random per task) that the standard library's parser (`tomllib`, `configparser`, `json`) rejects: one or
two lines are broken the way hand edits break them (an unterminated string, a section header without its
`]`, `:` where TOML wants `=`, a bare word where TOML wants a string, an option line without `=`, a
trailing comma, single quotes, a missing comma, a `//` comment in JSON). The prompt names the file, says it
does not parse, and asks for one or two changes besides (set a value, remove a key, double a number). The
agent's answer is the repaired file itself.

The hidden check (the shared `check_files.py`, running nothing) parses the file with the real parser in
its own process and compares the whole parsed configuration with the intended one: every value the file
held must survive the repair, and the requested changes must be made. A file that still fails to parse, a
repair that drops or retypes a value, and a change left undone all fail.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from trialground.families.configfix.breaks import BREAKS, render
from trialground.families.draw import draw_tasks
from trialground.families.filetask import Case, files_task
from trialground.tasks.model import Split, Task
from trialground.tasks.sources import SourceRequest

Config = dict[str, dict[str, object]]
FORMATS = {"toml": "config.toml", "ini": "config.ini", "json": "config.json"}
PARSERS = {"toml": "Python's tomllib", "ini": "Python's configparser (interpolation off)", "json": "json"}


def settings(rng: random.Random) -> Config:
    """A service's settings: typed values (the INI rendering writes them as text)."""
    cfg: Config = {
        "server": {"host": rng.choice(("0.0.0.0", "127.0.0.1", "api.internal")),
                   "port": rng.choice((8000, 8080, 8443, 9000, 5000)), "workers": rng.randint(2, 16),
                   "debug": rng.random() < 0.3},
        "database": {"name": rng.choice(("shop", "ledger", "events", "crm")),
                     "pool_size": rng.randint(2, 20), "timeout_s": rng.choice((5, 10, 30, 60)),
                     "replica": rng.choice(("db-a", "db-b", "db-c"))},
        "logging": {"level": rng.choice(("debug", "info", "warning")),
                    "file": rng.choice(("/var/log/app.log", "logs/service.log", "app.log"))},
    }  # fmt: skip
    if rng.random() < 0.6:
        cfg["features"] = {"cache": rng.random() < 0.5, "beta_ui": rng.random() < 0.5,
                           "max_upload_mb": rng.choice((10, 25, 100))}  # fmt: skip
    return cfg


def change(rng: random.Random, cfg: Config) -> tuple[Config, str]:
    """One requested change and its words; the changed copy."""
    out = {s: dict(kv) for s, kv in cfg.items()}
    section = rng.choice(sorted(out))
    key = rng.choice(sorted(out[section]))
    value = out[section][key]
    kind = rng.choice(("set", "remove", "double") if isinstance(value, int) and not isinstance(value, bool)
                      else ("set", "remove"))  # fmt: skip
    if kind == "remove":
        del out[section][key]
        return out, f"remove the key `{key}` from the `{section}` section"
    if kind == "double":
        out[section][key] = 2 * int(value)  # type: ignore[call-overload]
        return out, f"double the value of `{key}` in the `{section}` section"
    if isinstance(value, bool):
        new: object = not value
    elif isinstance(value, int):
        new = value + rng.randint(1, 9)
    else:
        new = f"{value}-{rng.choice(('new', 'v2', 'b'))}"
    out[section][key] = new
    return out, f"set `{key}` in the `{section}` section to {json.dumps(new)}"


def make_task(fmt: str, cfg: Config, breaks: tuple[str, ...], rng: random.Random, split: Split) -> Task:
    want, words = cfg, []
    for _ in range(rng.randint(1, 2)):
        want, w = change(rng, want)
        words.append(w)
    text = render(fmt, cfg, breaks, rng)
    name = FORMATS[fmt]
    values = "strings" if fmt == "ini" else "numbers, booleans and strings as they are"
    prompt = (
        f"The service refuses to start: {name} in your workspace does not parse with {PARSERS[fmt]}. Repair "
        f"it so that it parses and holds every setting it has now ({values}; no key, section or value "
        "lost or changed by the repair). Then make these changes: " + "; and ".join(words) + ".\n\n"
        f"Your answer is the whole repaired {name}."
    )
    reference = render(fmt, want, (), rng)
    return files_task(
        domain="configfix",
        prompt=prompt,
        solution=name,
        files={name: text},
        cases=(Case(label=name, expected=reference, compare=fmt),),
        reference=reference,
        split=split,
        metadata={"format": fmt, "breaks": ",".join(breaks)},
        run=False,
    )


def configfix_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """`n` tasks of `split`, deterministic in the arguments; an instance is its settings, breaks and
    changes (all drawn from one seed)."""

    def instance(rng: random.Random) -> tuple[str, Callable[[], Task]]:
        fmt = rng.choice(sorted(FORMATS))
        kinds = sorted(BREAKS[fmt])
        breaks = tuple(sorted(rng.sample(kinds, rng.randint(1, 2))))
        data_seed = rng.getrandbits(48)

        def build() -> Task:
            g = random.Random(data_seed)
            return make_task(fmt, settings(g), breaks, g, split)

        return f"{fmt}|{','.join(breaks)}|{data_seed}", build

    return draw_tasks("configfix", n, seed, split, instance)


def load(request: SourceRequest) -> list[Task]:
    assert request.n is not None and request.split is not None
    return configfix_tasks(request.n, request.seed, request.split)
