"""trialground's environment server (`trialground env serve`, docs/openenv.md) as OpenEnv runs a server.

- `main()`: `uv run --project . server [--port P] [OPTIONS]`, `python -m server.app`: `trialground env
  serve` of the task source in TRIALGROUND_ENV_SOURCE (default codegen); its token from --token-file, else
  TRIALGROUND_ENV_TOKEN_FILE, else TRIALGROUND_ENV_TOKEN. Other options as `trialground env serve --help`.
- `app`: the same server as an ASGI app for hosts that import `server.app:app` (`uvicorn server.app:app`),
  configured by the environment variables of `trialground.integrations.openenv.ENV_VARS`; built on first
  use.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any


def main() -> None:
    from trialground.cli import app as cli

    argv = sys.argv[1:]
    if "--token-file" not in argv:
        token_file = os.environ.get("TRIALGROUND_ENV_TOKEN_FILE")
        if not token_file and os.environ.get("TRIALGROUND_ENV_TOKEN"):
            fd, token_file = tempfile.mkstemp(prefix="trialground-token-")  # mode 0600
            with os.fdopen(fd, "w") as f:
                f.write(os.environ["TRIALGROUND_ENV_TOKEN"])
        if token_file:
            argv += ["--token-file", token_file]
    source = os.environ.get("TRIALGROUND_ENV_SOURCE", "codegen")
    cli(["env", "serve", source, *argv], prog_name="server")


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(name)
    from trialground.integrations.openenv import app_from_environ

    app = app_from_environ(os.environ)
    globals()["app"] = app
    return app


if __name__ == "__main__":
    main()
