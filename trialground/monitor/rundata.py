"""Read a run directory for the report and dashboard, tolerating missing files and columns.

Reads `config.yaml`, `metrics.jsonl`, `alerts.jsonl`, `flagged.jsonl`, `regressions.jsonl` and
`trajectories/*.parquet` (columns used when present: step, task_id, domain, reward, outcome, flags,
flag_evidence, error_boundary/error_kind/error_message or error, completion). A run still being written
is fine: a half-written line or Parquet file is skipped.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trialground.monitor.alerts import Alert, read_alerts
from trialground.monitor.regressions import read_events
from trialground.monitor.sinks.jsonl import read_jsonl, read_metrics

_WANTED = (
    "step",
    "task_id",
    "domain",
    "reward",
    "outcome",
    "flags",
    "flag_evidence",
    "error",
    "error_kind",
    "error_message",
    "completion",
)
_STEP = re.compile(r"(\d+)")
CONFIG_CHARS = 200_000  # a config.yaml larger than this is shown cut


@dataclass
class FlaggedTask:
    task_id: str
    count: int = 0
    flags: Counter[str] = field(default_factory=Counter)
    evidence: list[str] = field(default_factory=list)
    steps: set[int] = field(default_factory=set)
    example: str = ""


@dataclass
class RegressionRow:
    task_id: str
    queued_step: int
    reason: str
    detail: str
    attempts: int = 0
    solved_step: int | None = None


@dataclass
class Sample:
    """One trajectory of the latest step, for the report's sample completions."""

    step: int
    task_id: str
    domain: str
    reward: float | None
    outcome: float | None
    flags: list[str]
    error: str
    completion: str


@dataclass
class RunData:
    path: Path
    metrics: list[dict[str, Any]]
    alerts: list[Alert]
    flagged: list[FlaggedTask]
    regressions: list[RegressionRow]
    domain_reward: dict[str, list[tuple[float, float]]]  # from trajectories, when metrics lack it
    trajectory_rows: int = 0
    error_rows: int = 0
    errors_by_kind: Counter[str] = field(default_factory=Counter)
    config_text: str | None = None  # the run's config.yaml, when it has one
    samples: list[Sample] = field(default_factory=list)  # a few completions of the latest trajectories

    def series(self, key: str) -> list[tuple[float, float]]:
        out = []
        for row in self.metrics:
            v = row.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.append((float(row["step"]), float(v)))
        return out

    def keys(self, prefix: str = "") -> list[str]:
        seen: dict[str, None] = {}
        for row in self.metrics:
            for k in row:
                if k.startswith(prefix) and k not in ("step", "time"):
                    seen[k] = None
        return list(seen)

    @property
    def last_step(self) -> int | None:
        return self.metrics[-1]["step"] if self.metrics else None


def _read_rows(path: Path) -> tuple[dict[str, Any], ...] | None:
    """The wanted columns of one Parquet file as rows, cached by (path, size, mtime) for the dashboard."""
    try:
        st = path.stat()
    except OSError:
        return None
    return _read_rows_cached(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _read_rows_cached(path: str, size: int, mtime_ns: int) -> tuple[dict[str, Any], ...] | None:
    try:
        names = set(pq.read_schema(path).names)
        table = pq.read_table(path, columns=[c for c in _WANTED if c in names])
    except (pa.ArrowException, OSError):
        return None  # half-written or foreign file: skipped
    rows = table.to_pylist()
    for r in rows:  # keep the cache small: the report shows 600 characters at most
        if isinstance(r.get("completion"), str):
            r["completion"] = r["completion"][:600]
    return tuple(rows)


def _file_step(file: Path) -> int:
    m = _STEP.search(file.stem)
    return int(m.group(1)) if m else 0


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _samples(files: list[Path], n: int) -> list[Sample]:
    """Up to `n` completions (one per task, in file order) of the newest readable trajectories file."""
    for file in sorted(files, key=_file_step, reverse=True):
        rows = _read_rows(file)
        if not rows:
            continue
        out: list[Sample] = []
        seen: set[str] = set()
        for r in rows:
            tid = str(r.get("task_id"))
            if not r.get("completion") or tid in seen:
                continue
            seen.add(tid)
            raw_step = r.get("step")
            out.append(
                Sample(
                    step=raw_step if isinstance(raw_step, int) else _file_step(file),
                    task_id=tid,
                    domain=str(r.get("domain") or ""),
                    reward=_number(r.get("reward")),
                    outcome=_number(r.get("outcome")),
                    flags=[str(x) for x in (r.get("flags") or [])],
                    error=str(r.get("error_kind") or r.get("error") or ""),
                    completion=str(r["completion"]),
                )
            )
            if len(out) == n:
                break
        return out
    return []


def _config_text(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(CONFIG_CHARS + 1)
    except OSError:
        return None


def load_run(run_dir: str | Path, *, top_flagged: int = 20, samples: int = 5) -> RunData:
    """Everything the report shows, from the files of `run_dir` (which must exist)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"no run directory at {path}")
    events = read_events(path / "regressions.jsonl")
    regs: dict[str, RegressionRow] = {}
    for e in events:
        if e["event"] == "queued" and e["task_id"] not in regs:
            regs[e["task_id"]] = RegressionRow(
                e["task_id"], int(e.get("step", 0)), str(e.get("reason", "")), str(e.get("detail", ""))
            )
    explicit_attempts = any(e["event"] == "attempt" for e in events)
    for e in events:
        reg = regs.get(e["task_id"])
        if e["event"] == "attempt" and reg and int(e.get("step", 0)) > reg.queued_step:
            _attempt(reg, int(e["step"]), bool(e.get("solved")))

    flagged: dict[str, FlaggedTask] = {}
    for row in read_jsonl(path / "flagged.jsonl"):
        f = flagged.setdefault(str(row.get("task_id")), FlaggedTask(str(row.get("task_id"))))
        f.count += 1
        f.flags.update(str(x) for x in row.get("flags", []))
        ev = row.get("evidence", [])
        if isinstance(ev, dict):
            f.evidence.extend(f"{k}: {v}" for k, v in ev.items())
        elif isinstance(ev, list):
            f.evidence.extend(str(x) for x in ev)
        else:
            f.evidence.append(str(ev))
        if isinstance(row.get("step"), int):
            f.steps.add(row["step"])
    from_flag_file = bool(flagged)

    domain_sum: dict[tuple[str, float], list[float]] = defaultdict(list)
    n_rows = n_err = 0
    kinds: Counter[str] = Counter()
    files = sorted((path / "trajectories").glob("*.parquet"))
    for file in files:
        rows = _read_rows(file)
        if rows is None:
            continue
        file_step = _file_step(file)
        for r in rows:
            n_rows += 1
            raw_step = r.get("step")
            step: int = raw_step if isinstance(raw_step, int) else file_step
            err = r.get("error_kind") or r.get("error")
            if err:
                n_err += 1
                kinds[str(err)] += 1
            reward = r.get("reward")
            if isinstance(reward, int | float) and not err:
                domain_sum[(str(r.get("domain") or "all"), float(step))].append(float(reward))
            names = r.get("flags") or []
            if names:
                tid = str(r.get("task_id"))
                # flagged.jsonl, when present, is the record; trajectories still supply a sample completion.
                ft = flagged.get(tid) if from_flag_file else flagged.setdefault(tid, FlaggedTask(tid))
                if ft is not None and not from_flag_file:
                    ft.count += 1
                    ft.flags.update(str(x) for x in names)
                    ft.evidence.extend(str(x) for x in (r.get("flag_evidence") or [])[:3])
                    ft.steps.add(step)
                if ft is not None and not ft.example and r.get("completion"):
                    ft.example = str(r["completion"])[:600]
            reg = regs.get(str(r.get("task_id")))
            if reg and not explicit_attempts and step > reg.queued_step and not err:
                score = r.get("outcome") if r.get("outcome") is not None else reward
                _attempt(reg, step, isinstance(score, int | float) and score > 0)
    domain_reward: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (domain, at), vals in sorted(domain_sum.items(), key=lambda kv: kv[0][1]):
        domain_reward[domain].append((at, sum(vals) / len(vals)))
    ranked = sorted(flagged.values(), key=lambda f: (-f.count, f.task_id))[:top_flagged]
    return RunData(
        path=path,
        metrics=read_metrics(path / "metrics.jsonl"),
        alerts=read_alerts(path / "alerts.jsonl"),
        flagged=ranked,
        regressions=sorted(regs.values(), key=lambda r: (r.queued_step, r.task_id)),
        domain_reward=dict(domain_reward),
        trajectory_rows=n_rows,
        error_rows=n_err,
        errors_by_kind=kinds,
        config_text=_config_text(path / "config.yaml"),
        samples=_samples(files, samples),
    )


def _attempt(reg: RegressionRow, step: int, solved: bool) -> None:
    reg.attempts += 1
    if solved and (reg.solved_step is None or step < reg.solved_step):
        reg.solved_step = step
