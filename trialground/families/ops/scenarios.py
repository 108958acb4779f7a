"""The ops task families: each builder draws one broken setup (files, symptom, fix, check spec).

The services, scripts and the check program are real files under `assets/` in this folder;
builders fill in names and values. See `source.py` here for the contract.
"""

from __future__ import annotations

import configparser
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

ASSETS = Path(__file__).resolve().parent / "assets"
KEYS = ("name", "port", "workers", "log_level", "pid_file")
LEVELS = ("debug", "info", "warning", "error")
NAMES = ("billing", "catalog", "inventory", "notifier", "search", "ledger", "gateway", "metrics", "mailer")
OWNERS = ("legacy-api", "postgres-proxy", "cache-warmer", "admin-ui", "exporter")
MISSPELL = {
    "name": ("nmae", "service_name"),
    "port": ("prot", "listen_port"),
    "workers": ("wokers", "worker"),
    "log_level": ("loglevel", "log-level"),
    "pid_file": ("pidfile", "pid_path"),
}


@dataclass(frozen=True)
class Case:
    variant: str
    files: dict[str, str]
    fix_path: str
    fixed: str
    symptom: str
    goal: str
    constraint: str
    check_spec: dict[str, object] = field(default_factory=dict)


@cache
def asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def check_program(spec: dict[str, object]) -> str:
    """The check program with its spec baked in (the spec line is replaced, nothing else)."""
    text = asset("check_ops.py")
    line = 'SPEC_JSON = "{}"  # replaced by the task generator'
    if line not in text:
        raise RuntimeError("check_ops.py lost its SPEC_JSON line")
    return text.replace(line, f"SPEC_JSON = {json.dumps(spec, sort_keys=True)!r}")


def _choice(rng: np.random.Generator, options: tuple[str, ...] | list[str]) -> str:
    return str(options[int(rng.integers(len(options)))])


def _render(cfg: dict[str, object], path: str) -> str:
    if path.endswith(".json"):
        return json.dumps(cfg, indent=2) + "\n"
    parser = configparser.ConfigParser()
    parser["service"] = {k: str(v) for k, v in cfg.items()}
    buf = io.StringIO()
    parser.write(buf)
    return buf.getvalue()


def _service(rng: np.random.Generator) -> tuple[dict[str, object], str, str, dict[int, str]]:
    """A sound config, its file name, the service source and the ports held by others."""
    name = _choice(rng, NAMES)
    cfg: dict[str, object] = {
        "name": name,
        "port": int(rng.integers(2000, 9000)),
        "workers": int(rng.integers(1, 17)),
        "log_level": _choice(rng, LEVELS),
        "pid_file": f"run/{name}.pid",
    }
    path = _choice(rng, ("service.json", "service.ini"))
    app = asset("config_service.py").replace('CONFIG = "service.json"', f"CONFIG = {path!r}")
    held: dict[int, str] = {}
    while len(held) < 3:
        port = int(rng.integers(2000, 9000))
        if port != cfg["port"]:
            held[port] = _choice(rng, OWNERS)
    return cfg, path, app, held


def _config_family(rng: np.random.Generator, kind: str) -> Case:
    cfg, path, app, held = _service(rng)
    bad: dict[str, object] = dict(cfg)
    expect = {k: v for k, v in cfg.items()}
    constraint = "Do not modify service.py or etc/ports.lock; keep every setting that is already right."
    if kind == "config_key":
        key = _choice(rng, KEYS)
        wrong = _choice(rng, MISSPELL[key])
        bad = {(wrong if k == key else k): v for k, v in cfg.items()}
        variant, error = f"{key}->{wrong}", f"missing key {key!r} in {path}"
        constraint = "Do not modify service.py; keep every configured value as it is."
    elif kind == "config_value":
        key = _choice(rng, ("port", "workers", "log_level"))
        wrong_value: object = {
            "port": int(_choice(rng, ("80", "443", "22", "70000"))),
            "workers": int(_choice(rng, ("0", "64", "100"))),
            "log_level": _choice(rng, ("verbose", "trace", "WARN", "fatal")),
        }[key]
        bad[key] = wrong_value
        del expect[key]
        variant = f"{key}={wrong_value}"
        error = {
            "port": f"port {wrong_value} is outside 1024-65535 (the service runs unprivileged)",
            "workers": f"workers must be between 1 and 16, got {wrong_value}",
            "log_level": f"log_level {wrong_value!r} is not one of {', '.join(LEVELS)}",
        }[key]
    elif kind == "port_conflict":
        owner = _choice(rng, OWNERS)
        held[int(cfg["port"])] = owner  # type: ignore[call-overload]
        fixed_port = int(cfg["port"]) + 1  # type: ignore[call-overload]
        while fixed_port in held:
            fixed_port += 1
        cfg["port"] = fixed_port
        del expect["port"]
        variant, error = f"port-held-by-{owner}", f"port {bad['port']} is already in use by {owner}"
    else:  # pid_path
        bad["pid_file"] = f"run/pids/{cfg['name']}.pid"
        del expect["pid_file"]
        variant, error = (
            "pid-dir-missing",
            f"cannot write pid file {bad['pid_file']}: No such file or directory",
        )
    if kind == "config_value":
        cfg[key] = {"port": 8000 + int(rng.integers(0, 900)), "workers": 4, "log_level": "info"}[key]
        while key == "port" and cfg["port"] in held:
            cfg["port"] = int(cfg["port"]) + 1  # type: ignore[call-overload]
    lock_text = "".join(f"{port} {owner}\n" for port, owner in sorted(held.items()))
    files = {
        "service.py": app,
        path: _render(bad, path),
        "etc/ports.lock": lock_text,
        "run/README": "Runtime files (pid files) of the services.\n",
    }
    spec: dict[str, object] = {
        "kind": "config",
        "app": app,
        "lock": lock_text,
        "lock_path": "etc/ports.lock",
        "expect": expect,
    }
    return Case(
        variant=f"{path}:{variant}",
        files=files,
        fix_path=path,
        fixed=_render(cfg, path),
        symptom=f"The {cfg['name']} service does not start: `python3 service.py` exits with "
        f"`config error: {error}`.",
        goal="`python3 service.py` starts and reports `ready`.",
        constraint=constraint,
        check_spec=spec,
    )


PIPELINES = {
    "lines": 'cat "$LOG_DIR"/*.log | wc -l',
    "errors": 'cat "$LOG_DIR"/*.log | grep -c ERROR',
    "users": "cut -d' ' -f2 \"$LOG_DIR\"/*.log | sort -u | wc -l",
}
METRIC_WORDS = {
    "lines": "the total number of lines in logs/*.log",
    "errors": "the number of lines containing ERROR in logs/*.log",
    "users": "the number of distinct users (second field) in logs/*.log",
}
SCRIPT_BUGS = ("unbound_variable", "wrong_glob", "wrong_dir", "mkdir_exists")


LOG_DIRS = ("logs", "applogs", "journal")
OUT_DIRS = ("out", "reports", "build")


def _script_case(rng: np.random.Generator) -> Case:
    metric, bug = _choice(rng, list(PIPELINES)), _choice(rng, SCRIPT_BUGS)
    log_dir, out_dir = _choice(rng, LOG_DIRS), _choice(rng, OUT_DIRS)
    good = (
        asset("report_run.sh")
        .replace("__METRIC__", metric)
        .replace("__PIPELINE__", PIPELINES[metric])
        .replace('LOG_DIR="logs"', f'LOG_DIR="{log_dir}"')
        .replace('OUT_DIR="out"', f'OUT_DIR="{out_dir}"')
        .replace("out/report.txt", f"{out_dir}/report.txt")
    )
    broken = {
        "unbound_variable": good.replace('"$LOG_DIR"/*.log', '"$LOGDIR"/*.log'),
        "wrong_glob": good.replace('"$LOG_DIR"/*.log', '"$LOG_DIR"/*.txt'),
        "wrong_dir": good.replace(f'LOG_DIR="{log_dir}"', f'LOG_DIR="{log_dir[:-1]}"'),
        "mkdir_exists": good.replace('mkdir -p "$OUT_DIR"', 'mkdir "$OUT_DIR"'),
    }[bug]
    seed = int(rng.integers(1, 1_000_000))
    files = {"run.sh": broken, f"{out_dir}/.keep": ""}
    for i in range(int(rng.integers(2, 5))):
        lines = [
            f"2024-03-0{j % 9 + 1}T0{j % 10}:00:00 user{int(rng.integers(1, 20))} "
            f"{_choice(rng, ('INFO', 'INFO', 'WARN', 'ERROR'))} request {j}"
            for j in range(int(rng.integers(4, 15)))
        ]
        files[f"{log_dir}/web{i}.log"] = "\n".join(lines) + "\n"
    words = METRIC_WORDS[metric].replace("logs/", f"{log_dir}/")
    return Case(
        variant=f"{metric}:{bug}:{log_dir}:{out_dir}",
        files=files,
        fix_path="run.sh",
        fixed=good,
        symptom=f"`bash run.sh` should write {out_dir}/report.txt with one line `{metric}=<{words}>`, "
        "but it fails.",
        goal=f"`bash run.sh` succeeds and {out_dir}/report.txt holds the right `{metric}=` line for whatever "
        f"logs are in {log_dir}/.",
        constraint="Do not hard-code the result; the script must keep working when the logs change.",
        check_spec={
            "kind": "script",
            "script": "run.sh",
            "metric": metric,
            "seed": seed,
            "log_dir": log_dir,
            "out_dir": out_dir,
        },
    )


ENV_BUGS = ("env_value_typo", "variable_name", "not_exported", "wrong_path")
TYPOS = {"production": "prodution", "staging": "stagin", "development": "developement"}


def _env_case(rng: np.random.Generator) -> Case:
    env, workers, bug = _choice(rng, list(TYPOS)), int(rng.integers(1, 17)), _choice(rng, ENV_BUGS)
    data_dir = _choice(rng, ("data", "datasets", "input"))
    good_env = f"APP_ENV={env}\nDATA_DIR=./{data_dir}\nWORKERS={workers}\n"
    start = asset("start.sh")
    files = {"start.sh": start, ".env": good_env, "service.py": asset("env_service.py")}
    count = int(rng.integers(2, 6))
    for i in range(count):
        files[f"{data_dir}/part{i}.csv"] = f"id,value\n{i},{int(rng.integers(0, 100))}\n"
    fix_path, fixed = ".env", good_env
    if bug == "env_value_typo":
        files[".env"] = good_env.replace(f"APP_ENV={env}", f"APP_ENV={TYPOS[env]}")
        error = f"error: APP_ENV='{TYPOS[env]}' is not one of development, staging, production"
    elif bug == "variable_name":
        files[".env"] = good_env.replace("DATA_DIR=", "DATADIR=")
        error = "error: DATA_DIR is not set"
    elif bug == "wrong_path":
        files[".env"] = good_env.replace(f"./{data_dir}", f"./{data_dir[:-1]}")
        error = f"error: DATA_DIR='./{data_dir[:-1]}' is not a directory"
    else:
        files["start.sh"] = start.replace("set -a\n", "").replace("set +a\n", "")
        fix_path, fixed = "start.sh", start
        error = "error: APP_ENV is not set"
    return Case(
        variant=bug,
        files=files,
        fix_path=fix_path,
        fixed=fixed,
        symptom=f"`bash start.sh` should start the service in {env} with the data in {data_dir}/ and "
        f"{workers} workers, but it exits with `{error}`.",
        goal=f"`bash start.sh` prints `service up env={env} data_files={count} workers={workers}`.",
        constraint="Do not modify service.py and do not move the data.",
        check_spec={
            "kind": "env",
            "app": asset("env_service.py"),
            "expect": f"env={env} data_files={count} workers={workers}",
        },
    )


HELPERS = (  # (module file, the wrong name the service imports)
    ("helpers.py", "helper"),
    ("textutil.py", "textutils"),
    ("kvtools.py", "kv_tools"),
    ("lineparse.py", "line_parse"),
    ("records.py", "record"),
    ("parsing_utils.py", "parsingutils"),
    ("fields.py", "field_utils"),
    ("kvparse.py", "kv_parser"),
)
FUNCS = ("parse_line", "parse_entry", "split_pair")
SERVICES = ("service.py", "totals.py", "aggregator.py")
INPUTS = ("input.txt", "readings.txt", "metrics.txt")
HELPER_SOURCE = '''"""Parsing of `key = value` lines."""


def {func}(line):
    """(key, int value) of one `key = value` line, or None for blank lines and comments."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    key, _, value = line.partition("=")
    return key.strip(), int(value)
'''
SERVICE_SOURCE = '''"""Totals: reads {input} (`key = value` lines), prints `key total` per key, sorted."""

import sys

from {module} import {func}


def main():
    totals = {{}}
    with open({input!r}) as f:
        for line in f:
            parsed = {func}(line)
            if parsed is not None:
                key, value = parsed
                totals[key] = totals.get(key, 0) + value
    for key in sorted(totals):
        print(key, totals[key])
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _import_case(rng: np.random.Generator) -> Case:
    helper_path, wrong = HELPERS[int(rng.integers(len(HELPERS)))]
    func, service, data = _choice(rng, FUNCS), _choice(rng, SERVICES), _choice(rng, INPUTS)
    module = helper_path[:-3]
    keys = ("cpu", "disk", "net", "mem")
    rows = [f"{_choice(rng, keys)} = {int(rng.integers(0, 100))}" for _ in range(int(rng.integers(4, 12)))]
    helper = HELPER_SOURCE.format(func=func)
    return Case(
        variant=f"{service}:{wrong}->{module}.{func}",
        files={
            service: SERVICE_SOURCE.format(module=wrong, func=func, input=data),
            helper_path: helper,
            data: "\n".join(rows) + "\n",
        },
        fix_path=service,
        fixed=SERVICE_SOURCE.format(module=module, func=func, input=data),
        symptom=f"`python3 {service}` fails with `ModuleNotFoundError: No module named '{wrong}'`.",
        goal=f"`python3 {service}` prints the totals of {data}.",
        constraint="Do not rename or edit the helper module and do not hard-code any output.",
        check_spec={
            "kind": "import",
            "service": service,
            "helper_path": helper_path,
            "helper": helper,
            "input": data,
            "seed": int(rng.integers(1, 1_000_000)),
        },
    )


BUILDERS: dict[str, Callable[[np.random.Generator], Case]] = {
    "config_key": lambda rng: _config_family(rng, "config_key"),
    "config_value": lambda rng: _config_family(rng, "config_value"),
    "port_conflict": lambda rng: _config_family(rng, "port_conflict"),
    "pid_path": lambda rng: _config_family(rng, "pid_path"),
    "script_bug": _script_case,
    "env_file": _env_case,
    "import_error": _import_case,
}
