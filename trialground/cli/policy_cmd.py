"""`trialground policy serve`: the reference inference server (vLLM's OpenAI-compatible API over the
project's HF sampler), for decoupled sampling and training without a GPU (docs/serving.md)."""

from __future__ import annotations

import signal
import sys
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from trialground.cli.common import EXIT_INFRA, EXIT_USAGE, fail

app = typer.Typer(help="Policy commands.", no_args_is_help=True)


@app.command("serve")
def serve(
    model: Annotated[str, typer.Option(help="'tiny', 'tiny-agent' or a local HF model directory")] = "tiny",
    host: Annotated[str, typer.Option(help="Address to bind (no authentication)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one (printed on start)")] = 8000,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model name in /v1/models and requests (default: --model)")
    ] = None,
    device: Annotated[str, typer.Option(help="torch device")] = "cpu",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16")] = "float32",
    cpu_threads: Annotated[int, typer.Option(help="torch threads on CPU")] = 1,
    decode: Annotated[str, typer.Option(help="auto (lean decoder where exact) or transformers")] = "auto",
) -> None:
    """Serve a model over HTTP until interrupted. The first line on stdout is `serving URL`."""
    from trialground.errors import PolicyError
    from trialground.policy.config import PolicyConfig

    if not 0 <= port <= 65535:
        fail(f"--port: {port} is not a TCP port (0..65535)", EXIT_USAGE)
    try:
        config = PolicyConfig(
            model=model,
            device=device,
            dtype=dtype,
            cpu_threads=cpu_threads,
            decode=decode,  # type: ignore[arg-type]
        )
    except ValidationError as exc:
        problems = sorted({f"--{str(e['loc'][-1]).replace('_', '-')}: {e['msg']}" for e in exc.errors()})
        fail(f"invalid option: {'; '.join(problems)}", EXIT_USAGE)
    try:
        from trialground.policy.hf import HFPolicy
        from trialground.policy.serve import ReferenceServer
    except ImportError as exc:
        fail(f"policy serve needs the [train] extra (torch, transformers): {exc}", EXIT_USAGE)
    try:
        policy = HFPolicy(config)
    except (PolicyError, FileNotFoundError) as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        server = ReferenceServer(policy, served_name=served_model_name or model, host=host, port=port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_INFRA)

    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"serving {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    sys.exit(0)
