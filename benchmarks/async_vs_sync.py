"""Async vs sync orchestration, side by side in one run, with environment latency comparable to generation.

Both modes run the real training loop (`trialground.orchestrator.loop.run`) on the quickstart config with
the bundled tiny model, real bubblewrap grading and the same seed. Every environment step additionally
waits `--latency` seconds, standing in for a slow environment (a remote sandbox, a long test run); by
default the latency is set to the measured time of one batch's generation. The held-out evaluations at
the start and end are skipped in both modes (they are identical work and not what is compared).

Both modes run the same policy set-up: by default in a child process (`policy.separate_process`),
`--no-separate-process` keeps it in the trainer's process.

`--env-service` puts the environment behind the sandbox service: a `trialground sandbox serve` process is
started on 127.0.0.1 and both modes grade through it (`sandbox.backend: remote`: every grading sandbox is a
session of that service, every command an HTTP round trip), with `--latency` on top of each step as before.

Reported per mode: wall seconds for the N steps, the steady-state seconds per step (after the first
WARMUP steps: start-up and pipeline fill left out), steps/s and samples/s, mean staleness of the trained
samples and the trainer's idle time waiting for batches; and the async/sync speed-up, steady state and
including start-up.

    .venv/bin/python benchmarks/async_vs_sync.py --steps 8 [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trialground.envs.base import Environment, Observation
from trialground.families.codegen.source import generate_codegen_tasks
from trialground.orchestrator import loop as loop_module
from trialground.orchestrator.collect import Collector
from trialground.orchestrator.run_config import load_config
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.config import PolicyConfig
from trialground.tasks.model import Task

WARMUP = 3  # steps left out of the steady-state rate
QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"


class SlowEnv(Environment):
    """Wraps an environment; each `step` first waits `latency` seconds (I/O-like: no CPU used)."""

    def __init__(self, inner: Environment, latency: float) -> None:
        self.inner, self.latency = inner, latency

    async def reset(self, task: Task) -> Observation:
        return await self.inner.reset(task)

    async def step(self, action: str) -> Observation:
        await asyncio.sleep(self.latency)
        return await self.inner.step(action)

    async def close(self) -> None:
        await self.inner.close()


def install_latency(latency: float) -> None:
    original = Collector._factory

    def env_factory(self: Collector, task: Task) -> Any:
        make = original(self, task)

        async def slow() -> Environment:
            made = make()
            env = await made if asyncio.iscoroutine(made) else made
            return SlowEnv(env, latency)  # type: ignore[arg-type]

        return slow

    Collector._factory = env_factory  # type: ignore[method-assign]


async def skip_eval(*_: Any, **__: Any) -> tuple[None, None]:
    """Stands in for `loop._eval_and_log` (greedy and sampled pass@1) where held-out evaluation is not
    what a benchmark compares; also used by branching.py."""
    return None, None


def measure_generation(n_tasks: int, k: int, max_new_tokens: int) -> float:
    """Seconds to generate one batch in the loop's own shape: `n_tasks` prompts, `k` samples of each."""
    from trialground.policy.base import SamplingParams

    policy = HFPolicy(PolicyConfig(model="tiny"))
    tasks = generate_codegen_tasks(n_tasks, seed=123, split="train")
    prompts = [policy.encode_chat([{"role": "user", "content": t.prompt}]) for t in tasks for _ in range(k)]
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    policy.generate_sync(prompts, params)  # warm-up
    t0 = time.perf_counter()
    for _ in range(2):
        policy.generate_sync(prompts, params)
    return (time.perf_counter() - t0) / 2


SERVED = {"sessions": 0, "execs": 0}  # requests the sandbox service logged (--env-service)


@contextlib.contextmanager
def sandbox_service(work: Path, max_sessions: int) -> Iterator[tuple[str, Path]]:
    """A `trialground sandbox serve` process on 127.0.0.1 (any free port): its URL and token file."""
    token = work / "token"
    token.write_text(secrets.token_hex(24))
    cli = str(Path(sys.executable).parent / "trialground")
    proc = subprocess.Popen(
        [
            *(cli, "sandbox", "serve", "--port", "0", "--token-file", str(token)),
            *("--max-sessions", str(max_sessions)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = proc.stdout
    assert out is not None
    url, seen = None, []
    for line in out:  # uvicorn's start-up lines, then the one naming the address
        seen.append(line)
        if m := re.search(r"listening on (http://\S+)", line):
            url = m.group(1)
            break
    if url is None:
        proc.kill()
        raise SystemExit("the sandbox service did not start:\n" + "".join(seen)[-2000:])

    def drain() -> None:  # keep reading the service's log, so its pipe never fills and blocks it
        for line in out:
            if '"POST /sessions HTTP' in line:
                SERVED["sessions"] += 1
            elif "/exec HTTP" in line:
                SERVED["execs"] += 1

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield url, token
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        proc.kill()  # nothing if it has exited
        reader.join(timeout=5)


def run_mode(
    mode: str, args: argparse.Namespace, out_dir: str, service: tuple[str, Path] | None
) -> dict[str, Any]:
    overrides = [
        f"name={mode}",
        f"output_dir={out_dir}",
        f"loop.mode={mode}",
        f"loop.steps={args.steps}",
        f"loop.batch_tasks={args.tasks}",
        f"loop.samples_per_task={args.k}",
        f"loop.max_staleness={args.max_staleness}",
        f"seed={args.seed}",
        f"policy.separate_process={str(args.separate_process).lower()}",
        f"policy.stream={str(args.stream).lower()}",
    ]
    if service is not None:
        overrides += [
            "sandbox.backend=remote",
            f"sandbox.remote_url={service[0]}",
            f"sandbox.token_file={service[1]}",
        ]
    config = load_config(QUICKSTART, overrides)
    served = dict(SERVED)
    ends: list[float] = []  # when each step finished

    def progress(step: int, _metrics: dict[str, float]) -> None:
        if step > 0:  # step 0 reports the start-up, not a step
            ends.append(time.perf_counter())

    t0 = time.perf_counter()
    asyncio.run(loop_module.run(config, progress=progress))
    seconds = time.perf_counter() - t0
    # steady state: from the end of the warm-up steps (start-up, pipeline fill) to the last step
    steady = (ends[-1] - ends[WARMUP - 1]) / (len(ends) - WARMUP)
    lines = [json.loads(x) for x in (Path(out_dir) / mode / "metrics.jsonl").read_text().splitlines() if x]
    steps = [m for m in lines if "train/loss" in m or "train/skipped" in m]

    def mean(key: str) -> float | None:
        vals = [m[key] for m in steps if key in m]
        return round(sum(vals) / len(vals), 3) if vals else None

    return {
        "mode": mode,
        "seconds": round(seconds, 1),
        "steady_step_s": round(steady, 3),
        "steps_timed": len(ends),
        "steps_per_s": round(args.steps / seconds, 3),
        "samples_per_s": round(args.steps * args.tasks * args.k / seconds, 2),
        "reward_mean": mean("reward/mean"),
        "staleness_mean": mean("async/staleness_mean") or mean("rollout/staleness_mean"),
        "trainer_wait_s": mean("async/trainer_wait_s"),
        "train_step_s": mean("train/step_s"),
        "weight_sync_s": mean("train/weight_sync_s"),
        "rollout_batch_s": mean("rollout/batch_s"),
        # requests the sandbox service logged during this mode (--env-service; its log lags a little)
        "service_sessions": SERVED["sessions"] - served["sessions"],
        "service_execs": SERVED["execs"] - served["execs"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=8, help="tasks per step")
    ap.add_argument("--k", type=int, default=8, help="samples per task")
    ap.add_argument("--max-staleness", type=int, default=1)
    ap.add_argument(
        "--latency",
        type=float,
        default=None,
        help="seconds per env step (default: one batch's generation time)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--separate-process",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="both modes generate in a child process (policy.separate_process; default on)",
    )
    ap.add_argument(
        "--stream",
        action="store_true",
        help="policy.stream: episodes get their rows as they finish "
        "(in-process policy only: with --no-separate-process)",
    )
    ap.add_argument(
        "--env-service", action="store_true", help="grade through a `trialground sandbox serve` process "
        "(sandbox.backend: remote) instead of sandboxes of this process",
    )  # fmt: skip
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.steps <= WARMUP:
        ap.error(f"--steps must be more than the {WARMUP} warm-up steps")
    gen_s = measure_generation(args.tasks, args.k, 48)
    latency = gen_s if args.latency is None else args.latency
    n = args.tasks * args.k
    print(f"generation of one batch ({n} samples): {gen_s:.2f}s; env latency per step: {latency:.2f}s")
    install_latency(latency)
    loop_module._eval_and_log = skip_eval  # type: ignore[assignment]
    out_dir = tempfile.mkdtemp(prefix="async_vs_sync_")
    try:
        with contextlib.ExitStack() as stack:
            service = None
            if args.env_service:
                service = stack.enter_context(sandbox_service(Path(out_dir), max_sessions=4 * n))
                print(f"environment behind the sandbox service at {service[0]}")
            rows = [run_mode(mode, args, out_dir, service) for mode in ("sync", "async")]
            if service is not None and not all(r["service_execs"] for r in rows):
                raise SystemExit(f"--env-service: a mode ran no command through the service: {rows}")
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    out = {"args": vars(args), "generation_s": round(gen_s, 2), "latency_s": latency, "results": rows}
    print(json.dumps(out, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    total = rows[0]["seconds"] / rows[1]["seconds"]
    steady = rows[0]["steady_step_s"] / rows[1]["steady_step_s"]
    print(f"speed-up async/sync: {steady:.2f}x steady state, {total:.2f}x including start-up")


if __name__ == "__main__":
    main()
