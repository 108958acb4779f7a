"""A small service: reads its config, validates it, writes its pid file and reports ready.

Exit 0 and one line `ready name=... port=... workers=... log_level=... pid_file=...` when the config is
sound; otherwise exit 1 with `config error: ...` on stderr.
"""

import configparser
import json
import os
import sys

CONFIG = "service.json"
LOCK = "etc/ports.lock"
LEVELS = ("debug", "info", "warning", "error")
KEYS = ("name", "port", "workers", "log_level", "pid_file")


def load() -> dict:
    if CONFIG.endswith(".json"):
        with open(CONFIG) as f:
            cfg = json.load(f)
        if not isinstance(cfg, dict):
            raise ValueError(f"{CONFIG} must hold an object")
        return cfg
    parser = configparser.ConfigParser()
    if not parser.read(CONFIG):
        raise OSError(f"cannot read {CONFIG}")
    if not parser.has_section("service"):
        raise ValueError(f"{CONFIG} has no [service] section")
    return dict(parser["service"])


def held_ports() -> dict[int, str]:
    held = {}
    if os.path.exists(LOCK):
        with open(LOCK) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit():
                    held[int(parts[0])] = parts[1]
    return held


def problem(cfg: dict) -> str | None:
    for key in KEYS:
        if key not in cfg:
            return f"missing key {key!r} in {CONFIG}"
    extra = sorted(set(cfg) - set(KEYS))
    if extra:
        return f"unknown key(s) {', '.join(extra)} in {CONFIG}"
    try:
        port, workers = int(cfg["port"]), int(cfg["workers"])
    except (TypeError, ValueError):
        return "port and workers must be integers"
    if not 1024 <= port <= 65535:
        return f"port {port} is outside 1024-65535 (the service runs unprivileged)"
    if not 1 <= workers <= 16:
        return f"workers must be between 1 and 16, got {workers}"
    if cfg["log_level"] not in LEVELS:
        return f"log_level {cfg['log_level']!r} is not one of {', '.join(LEVELS)}"
    owner = held_ports().get(port)
    if owner is not None:
        return f"port {port} is already in use by {owner} (see {LOCK})"
    pid_file = str(cfg["pid_file"])
    if os.path.isabs(pid_file) or ".." in pid_file.split("/"):
        return f"pid_file {pid_file!r} must be a relative path inside the service directory"
    try:
        with open(pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    except OSError as e:
        return f"cannot write pid file {pid_file}: {e.strerror}"
    return None


def main() -> int:
    try:
        cfg = load()
    except (OSError, ValueError, configparser.Error) as e:
        print(f"config error: {e}", file=sys.stderr)
        return 1
    error = problem(cfg)
    if error is not None:
        print(f"config error: {error}", file=sys.stderr)
        return 1
    fields = " ".join(f"{k}={cfg[k]}" for k in KEYS)
    print(f"ready {fields}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
