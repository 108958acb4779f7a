"""A service started by start.sh: reads its settings from the environment and reports that it is up."""

import os
import sys

ENVS = ("development", "staging", "production")
NONCE = ""


def main() -> int:
    env = os.environ.get("APP_ENV")
    if env is None:
        print("error: APP_ENV is not set", file=sys.stderr)
        return 1
    if env not in ENVS:
        print(f"error: APP_ENV={env!r} is not one of {', '.join(ENVS)}", file=sys.stderr)
        return 1
    data = os.environ.get("DATA_DIR")
    if data is None:
        print("error: DATA_DIR is not set", file=sys.stderr)
        return 1
    if not os.path.isdir(data):
        print(f"error: DATA_DIR={data!r} is not a directory", file=sys.stderr)
        return 1
    workers = os.environ.get("WORKERS", "")
    if not workers.isdigit() or not 1 <= int(workers) <= 16:
        print(f"error: WORKERS={workers!r} must be a number from 1 to 16", file=sys.stderr)
        return 1
    count = len([f for f in os.listdir(data) if f.endswith(".csv")])
    print(f"service up env={env} data_files={count} workers={workers}{NONCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
