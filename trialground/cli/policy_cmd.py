"""`trialground policy serve`: the reference inference server (vLLM's OpenAI-compatible API over the
project's HF sampler), for decoupled sampling and training without a GPU (docs/serving.md)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from trialground.cli.common import EXIT_USAGE, fail, listen_or_fail
from trialground.ports import POLICY_SERVE_PORT

app = typer.Typer(help="Policy commands.", no_args_is_help=True)


@app.command("serve")
def serve(
    model: Annotated[str, typer.Option(help="'tiny', 'tiny-agent' or a local HF model directory")] = "tiny",
    host: Annotated[str, typer.Option(help="Address to bind")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="TCP port; 0 picks a free one (printed on start)")
    ] = POLICY_SERVE_PORT,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the API key every route but /health then needs (Bearer); without one, "
            "inference is open and the weight-loading routes are refused"
        ),
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model name in /v1/models and requests (default: --model)")
    ] = None,
    device: Annotated[str, typer.Option(help="torch device")] = "cpu",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16")] = "float32",
    cpu_threads: Annotated[int, typer.Option(help="torch threads on CPU")] = 1,
    decode: Annotated[str, typer.Option(help="auto (lean decoder where exact) or transformers")] = "auto",
    default_top_k: Annotated[
        int,
        typer.Option(
            help="top_k of a request that does not state one (0: off), as vLLM takes it from a model's "
            "generation_config.json; trialground's own requests always state it"
        ),
    ] = 0,
) -> None:
    """Serve a model over HTTP until interrupted. The first line on stdout is `serving URL`."""
    from trialground.errors import PolicyError
    from trialground.policy.base import SamplingParams
    from trialground.policy.config import PolicyConfig

    if not 0 <= port <= 65535:
        fail(f"--port: {port} is not a TCP port (0..65535)", EXIT_USAGE)
    if default_top_k < 0:
        fail(f"--default-top-k: {default_top_k} is negative (0 turns top-k off)", EXIT_USAGE)
    try:
        config = PolicyConfig(
            model=model,
            device=device,
            dtype=dtype,
            cpu_threads=cpu_threads,
            decode=decode,  # type: ignore[arg-type]
        )
        defaults = SamplingParams(top_k=default_top_k)
    except ValidationError as exc:
        problems = sorted({f"--{str(e['loc'][-1]).replace('_', '-')}: {e['msg']}" for e in exc.errors()})
        fail(f"invalid option: {'; '.join(problems)}", EXIT_USAGE)
    try:
        from trialground.gateway.reference import ReferenceServer
        from trialground.policy.backends.hf import HFPolicy
    except ImportError as exc:
        fail(f"policy serve needs the [train] extra (torch, transformers): {exc}", EXIT_USAGE)
    api_key = None
    if api_key_file is not None:
        try:
            api_key = api_key_file.read_text().strip()
        except OSError as exc:
            fail(f"--api-key-file: cannot read {api_key_file}: {exc.strerror}", EXIT_USAGE)
        if not api_key:
            fail(f"--api-key-file: {api_key_file} is empty", EXIT_USAGE)
    sock = listen_or_fail(host, port)  # before the model loads: a port in use fails at once
    try:
        policy = HFPolicy(config)
    except (PolicyError, FileNotFoundError) as exc:
        sock.close()
        fail(str(exc), EXIT_USAGE)
    server = ReferenceServer(
        policy, served_name=served_model_name or model, sock=sock, api_key=api_key, sampling_defaults=defaults
    )

    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"serving {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    sys.exit(0)


@app.command("check-template")
def check_template(
    model_dir: Annotated[
        str,
        typer.Argument(
            help="A model or tokenizer directory, a bundled or packaged model's name, a .gguf file"
        ),
    ],
    style: Annotated[
        str | None, typer.Option(help="Tool-call style (tags, llama3, mistral); default: from the template")
    ] = None,
    tool_role: Annotated[str, typer.Option(help="The role tool results are rendered in")] = "tool",
    chat_template: Annotated[
        str,
        typer.Option(
            help="auto (the tokenizer's, else plain), own, plain, or a Jinja file (policy.chat_template)"
        ),
    ] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Check a chat template for token-exact multi-turn training: per turn, whether the rendered prefix
    is preserved and tool calls round-trip through the parser; whether a tool tag is a special token that
    decoding would drop; and which mode (one trajectory, or segments) episodes will train in."""
    from trialground.gateway.conformance import check, load_tokenizer_dir

    try:
        tokenizer = load_tokenizer_dir(model_dir, chat_template)
    except (OSError, ImportError, ValueError) as exc:
        fail(f"{model_dir}: {exc}", EXIT_USAGE)
    try:
        report = check(tokenizer, style=style, tool_role=tool_role)
    except ValueError as exc:
        fail(f"{model_dir}: {exc}", EXIT_USAGE)
    if json_out:
        print(report.model_dump_json(indent=2))
    else:
        print(report.text())
    sys.exit(0)
