"""The `trialground` command. Each command group lives in its own module beside this one."""

from __future__ import annotations

import json
import os
import sys

import typer

from trialground.cli import (
    config_cmd,
    env_cmd,
    export_cmd,
    helpstyle,
    policy_cmd,
    report_cmd,
    run_cmd,
    sandbox_cmd,
    sft_cmd,
    tasks_cmd,
    verify_cmd,
)

helpstyle.install()  # `--json`, `--set KEY=VALUE ...`, `--samples INTEGER RANGE`, not `<bool>`, `<list[str]>`
app = typer.Typer(
    name="trialground",
    help="Environment-first RL post-training for language-model agents on execution-verified tasks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(config_cmd.app, name="config")
app.add_typer(tasks_cmd.app, name="tasks")
app.add_typer(sandbox_cmd.app, name="sandbox")
app.add_typer(env_cmd.app, name="env")
app.add_typer(policy_cmd.app, name="policy")
app.command("train")(run_cmd.train)
app.command("eval")(run_cmd.evaluate)
app.command("verify")(verify_cmd.verify)
app.command("report")(report_cmd.report)
app.command("dashboard")(report_cmd.dashboard)
app.command("export")(export_cmd.export)
app.command("sft")(sft_cmd.sft)


def _version(value: bool) -> None:
    if value:
        from trialground import __version__

        typer.echo(f"trialground {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit"
    ),
) -> None:
    """Environment-first RL post-training for language-model agents on execution-verified tasks."""
    # transformers' and the hub's own bars ("Loading weights", "Writing model shards") would break into the
    # command's progress display; HF_HUB_DISABLE_PROGRESS_BARS=0 brings them back
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def main() -> None:
    from trialground.cli.common import json_errors

    # OpenMP's waiting threads spin by default; where other processes share the cores, torch's 2 threads
    # then wait on each other's lost time slices (the same GRPO step of the tiny model at load 14-44:
    # 8.4-11.4 s spinning, 0.02 s with PASSIVE; docs/benchmarks.md). The runtime reads this when torch
    # loads, so before anything imports it; a value already set is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    as_json = "--json" in sys.argv[1:]
    json_errors(as_json)  # an error of a --json command is a JSON object too
    if len(sys.argv) > 1 and sys.argv[1] in ("train", "eval"):
        # glibc reads its tunables when a process starts: re-execute before the run does any work
        from trialground.hugepages import reexec_with_hugepages

        reexec_with_hugepages()
    if not as_json:
        app()
        return
    try:  # the command line's own errors (a missing argument, a bad value) as the same JSON object
        code = app(standalone_mode=False)
    except Exception as exc:
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):  # not a usage error
            raise
        param = getattr(exc, "param", None)
        where = (getattr(param, "opts", None) or [None])[0] if param is not None else None
        print(json.dumps({"error": exc.format_message(), "kind": "usage", "where": where}))
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
