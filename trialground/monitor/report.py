"""`trialground report RUN_DIR`: one self-contained HTML file, readable offline (inline SVG, inline CSS).

Sections: summary, reward by domain, training reward vs evaluation, pass rates, environment latency and
error rates, pool utilisation, reward-hacking signals, training, alert timeline and table, most-flagged
trajectories with their evidence, sample completions of the latest step, the regression loop, cost, the
run's configuration. A section with no data says so. Everything taken from the run is HTML-escaped.
"""

from __future__ import annotations

import time
from html import escape
from pathlib import Path

from trialground.monitor.rundata import CONFIG_CHARS, RunData, load_run
from trialground.monitor.svgplot import bar_chart, line_chart, timeline

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f3f4f6;color:#111}
header{background:#111827;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .sub{color:#9ca3af;font-size:13px;margin-top:4px}
main{padding:12px 24px}section{background:#fff;border-radius:8px;padding:12px 16px;margin:12px 0;
box-shadow:0 1px 2px rgba(0,0,0,.08)}h2{font-size:16px;margin:4px 0 10px}
.grid{display:flex;flex-wrap:wrap;gap:10px}.chart{border:1px solid #e5e7eb;border-radius:4px}
table{border-collapse:collapse;font-size:12px;width:100%}th,td{border-bottom:1px solid #e5e7eb;
padding:4px 6px;text-align:left;vertical-align:top}th{background:#f9fafb}
.kpi{display:inline-block;margin:0 18px 6px 0}.kpi b{display:block;font-size:20px}
.kpi span{font-size:11px;color:#6b7280}.warning{color:#b45309}.critical{color:#b91c1c;font-weight:600}
.empty{color:#6b7280;font-style:italic}pre{white-space:pre-wrap;font-size:11px;margin:0;max-height:120px;
overflow:auto;background:#f9fafb;padding:4px}.ok{color:#15803d}.no{color:#b91c1c}
pre.tall{max-height:480px}
"""


def _section(title: str, body: str, sid: str) -> str:
    return f'<section id="{sid}"><h2>{escape(title)}</h2>{body}</section>'


def _charts(*svgs: str) -> str:
    return '<div class="grid">' + "".join(svgs) + "</div>"


def _empty(text: str) -> str:
    return f'<p class="empty">{escape(text)}</p>'


def _series(data: RunData, keys: list[str], strip: str = "") -> dict[str, list[tuple[float, float]]]:
    return {k.removeprefix(strip) or k: s for k in keys if (s := data.series(k))}


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def _summary(d: RunData) -> str:
    last = d.metrics[-1] if d.metrics else {}
    kpis = [
        ("steps logged", len(d.metrics)),
        ("last step", d.last_step if d.last_step is not None else "-"),
        ("reward/mean", last.get("reward/mean", "-")),
        ("eval/pass@1", next((v for _, v in reversed(d.series("eval/pass@1"))), "-")),
        ("alerts", len(d.alerts)),
        ("trajectories", d.trajectory_rows),
        ("infra errors", d.error_rows),
        ("cost (USD)", last.get("cost/total_usd", "-")),
    ]
    return "".join(f'<div class="kpi"><b>{_fmt(v)}</b><span>{escape(k)}</span></div>' for k, v in kpis)


def _reward(d: RunData) -> str:
    keys = [k for k in d.keys("reward/mean/")]
    series = _series(d, keys, "reward/mean/") or d.domain_reward
    if not series:
        return _empty("no per-domain reward yet")
    return _charts(line_chart(series, title="Mean reward by domain", ylabel="reward"))


def _train_vs_eval(d: RunData) -> str:
    evals = [k for k in d.keys("eval/pass@") if k.count("/") == 1]
    series = _series(d, ["reward/mean", *evals])
    if not series:
        return _empty("no training reward or evaluation yet")
    chart = line_chart(series, title="Training reward vs evaluation", ylabel="value", markers=evals)
    return _charts(chart)


def _pass_rates(d: RunData) -> str:
    per_domain = [k for k in d.keys("eval/pass@") if k.count("/") == 2]
    if not per_domain and not d.keys("eval/pass@"):
        return _empty("no evaluation yet")
    latest = {k.removeprefix("eval/"): s[-1][1] for k in per_domain if (s := d.series(k))}
    over_time = _series(d, per_domain, "eval/")
    parts = []
    if latest:
        parts.append(bar_chart(latest, title="Latest pass rates by domain", ylabel="pass rate"))
    if over_time:
        parts.append(
            line_chart(over_time, title="Pass rates over time", ylabel="pass rate", markers=list(over_time))
        )
    overall = {
        k.removeprefix("eval/"): s[-1][1]
        for k in d.keys("eval/pass@")
        if k.count("/") == 1 and (s := d.series(k))
    }
    table = "".join(f"<tr><td>{escape(k)}</td><td>{v:.4f}</td></tr>" for k, v in overall.items())
    return _charts(*parts) + (
        f"<table><tr><th>metric</th><th>latest</th></tr>{table}</table>" if table else ""
    )


def _env(d: RunData) -> str:
    lat = [k for k in d.keys("env/") if k.endswith("_s") and k != "env/sandbox_s"]
    rates = [k for k in d.keys("env/") if k.endswith("_rate")]
    parts = []
    if lat:
        parts.append(line_chart(_series(d, lat, "env/"), title="Environment latency", ylabel="seconds"))
    if rates:
        parts.append(
            line_chart(_series(d, rates, "env/"), title="Sandbox error and timeout rates", ylabel="rate")
        )
    if d.errors_by_kind:
        parts.append(bar_chart(dict(d.errors_by_kind.most_common(8)), title="Trajectory errors by kind"))
    return _charts(*parts) if parts else _empty("no environment metrics yet")


def _context(d: RunData) -> str:
    """Tokens per episode and how often the context and observation budgets cut (`context/*`)."""
    size = [k for k in ("context/tokens_mean", "context/tokens_p90", "context/tokens_max") if d.series(k)]
    rates = [k for k in d.keys("context/") if "_rate" in k]
    if not size and not rates:
        return _empty("no context metrics yet")
    parts = []
    if size:
        parts.append(line_chart(_series(d, size, "context/"), title="Tokens per episode", ylabel="tokens"))
    if rates:
        parts.append(line_chart(_series(d, rates, "context/"), title="Truncation rates", ylabel="rate"))
    workspace = [k for k in d.keys("context/workspace_")]
    latest = {k.removeprefix("context/"): s[-1][1] for k in [*size, *rates, *workspace] if (s := d.series(k))}
    table = "".join(f"<tr><td>{escape(k)}</td><td>{_fmt(v)}</td></tr>" for k, v in latest.items())
    return _charts(*parts) + f"<table><tr><th>metric</th><th>latest</th></tr>{table}</table>"


def _pool(d: RunData) -> str:
    keys = d.keys("pool/")
    if not keys:
        return _empty("no pool metrics yet")
    queue = [k for k in keys if "queue" in k or "wait" in k]
    scaling: list[str] = [k for k in ("pool/max_active", "pool/autoscale_target") if k in keys]
    usage = [k for k in keys if k not in queue and not k.startswith("pool/autoscale_")]
    parts, decisions = [], ""
    if d.series("pool/autoscale_resizes"):  # the autoscaler ran: its decisions over time
        parts.append(line_chart(_series(d, scaling, "pool/"), title="Autoscaler: max_active", ylabel="envs"))
        decisions = _resize_table(d)
    if usage:
        parts.append(line_chart(_series(d, usage, "pool/"), title="Pool utilisation", ylabel="environments"))
    if queue:
        parts.append(line_chart(_series(d, queue, "pool/"), title="Queue depth and wait", ylabel="tasks / s"))
    return _charts(*parts) + decisions


def _resize_table(d: RunData) -> str:
    """The autoscaler's decisions: the first step's `pool/max_active`, then each step where it or the
    count of resizes changed."""
    sizes = dict(d.series("pool/max_active"))
    rows, last = [], None
    for step, resizes in d.series("pool/autoscale_resizes"):
        now = (sizes.get(step), resizes)
        if now != last:
            size = "" if now[0] is None else f"{now[0]:g}"
            rows.append(f"<tr><td>{step:g}</td><td>{size}</td><td>{resizes:g}</td></tr>")
        last = now
    head = "<tr><th>step</th><th>max_active</th><th>autoscaler resizes so far</th></tr>"
    return f"<table>{head}{''.join(rows[-50:])}</table>"


def _hacking(d: RunData) -> str:
    keys = [
        *d.keys("hack/"),
        *(
            k
            for k in ("rollout/clip_ratio", "train/zero_var_group_frac", "verify/judge_disagreement")
            if d.series(k)
        ),
    ]
    parts = []
    if keys:
        parts.append(line_chart(_series(d, keys), title="Reward-hacking signals", ylabel="share"))
    if d.series("rollout/response_len_mean"):
        parts.append(
            line_chart(
                _series(d, ["rollout/response_len_mean"]), title="Mean response length", ylabel="tokens"
            )
        )
    canary = d.keys("canary/")
    if canary:
        parts.append(line_chart(_series(d, canary, "canary/"), title="Canary re-scores", ylabel="pass rate"))
    return _charts(*parts) if parts else _empty("no hacking signals logged")


_TRAIN_FIRST = (
    "train/loss",
    "train/entropy",
    "train/kl",
    "train/clip_frac",
    "train/grad_norm",
    "train/adv_abs_mean",
    "train/tokens_per_s",
)


def _training(d: RunData) -> str:
    skip = {"train/step_s", "train/zero_var_group_frac", "train/version", "train/lr", "train/sequences"}
    keys = [k for k in d.keys("train/") if k not in skip]
    if not keys:
        return _empty("no trainer metrics yet")
    first = [k for k in _TRAIN_FIRST if k in keys]
    keys = first + [k for k in keys if k not in first]
    return _charts(*(line_chart(_series(d, [k]), title=k, ylabel="") for k in keys[:6]))


def _alerts(d: RunData) -> str:
    if not d.alerts:
        return _empty("no alerts fired")
    events = [(float(a.step), a.rule, a.severity, f"step {a.step}: {a.message}") for a in d.alerts]
    steps = [float(r["step"]) for r in d.metrics] or [e[0] for e in events]
    chart = timeline(events, title="Alert timeline", x_range=(min(steps), max(steps)))
    rows = []
    for a in d.alerts[-200:]:
        ev = a.evidence
        det = ", ".join(f"{k}={_fmt(v)}" for k, v in ev.details.items())
        vals = ", ".join(f"{v:.4g}" for v in ev.values[-12:])
        rows.append(
            f'<tr><td>{a.step}</td><td class="{a.severity}">{escape(a.rule)}</td><td>{a.action}</td>'
            f"<td>{escape(a.message)}</td><td>{escape(ev.key)}: steps {ev.window[0]}..{ev.window[1]}<br>"
            f"{escape(ev.statistic)} = {ev.value:.4g} (threshold {ev.threshold:.4g})<br>values: {vals}"
            f"<br><small>{det}</small></td></tr>"
        )
    head = "<tr><th>step</th><th>rule</th><th>action</th><th>message</th><th>evidence</th></tr>"
    return chart + f"<table>{head}{''.join(rows)}</table>"


def _flagged(d: RunData) -> str:
    if not d.flagged:
        return _empty("no flagged trajectories")
    rows = []
    for f in d.flagged:
        flags = ", ".join(f"{k} x{v}" for k, v in f.flags.most_common())
        ev = "<br>".join(escape(e[:300]) for e in list(dict.fromkeys(f.evidence))[:4])
        steps = ", ".join(str(s) for s in sorted(f.steps)[:10])
        example = f"<pre>{escape(f.example)}</pre>" if f.example else ""
        rows.append(
            f"<tr><td><code>{escape(f.task_id[:16])}</code></td><td>{f.count}</td><td>{escape(flags)}</td>"
            f"<td>{ev}{example}</td><td>{steps}</td></tr>"
        )
    head = "<tr><th>task</th><th>flagged</th><th>flags</th><th>evidence</th><th>steps</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _samples(d: RunData) -> str:
    if not d.samples:
        return _empty("no completions in the trajectories yet")
    rows = []
    for s in d.samples:
        reward = "-" if s.reward is None else f"{s.reward:.4g}"
        outcome = "" if s.outcome is None else f" (outcome {s.outcome:.4g})"
        notes = ", ".join(escape(x) for x in [*s.flags, *([s.error] if s.error else [])])
        rows.append(
            f"<tr><td><code>{escape(s.task_id[:24])}</code><br>{escape(s.domain)}</td>"
            f"<td>{reward}{outcome}</td><td>{notes}</td><td><pre>{escape(s.completion)}</pre></td></tr>"
        )
    head = "<tr><th>task</th><th>reward</th><th>flags / error</th><th>completion</th></tr>"
    return f"<p>Step {d.samples[0].step}, one completion per task.</p><table>{head}{''.join(rows)}</table>"


def _config(d: RunData) -> str:
    if d.config_text is None:
        return _empty("no config.yaml in the run directory")
    text = d.config_text
    cut = f"<p>(first {CONFIG_CHARS} characters)</p>" if len(text) > CONFIG_CHARS else ""
    return f'{cut}<pre class="tall">{escape(text[:CONFIG_CHARS])}</pre>'


def _regressions(d: RunData) -> str:
    if not d.regressions:
        return _empty("nothing sent to the regression queue")
    solved = sum(r.solved_step is not None for r in d.regressions)
    came_back = sum(r.attempts > 0 for r in d.regressions)
    rows = "".join(
        f"<tr><td><code>{escape(r.task_id[:16])}</code></td><td>{r.queued_step}</td><td>{escape(r.reason)}</td>"
        f"<td>{escape(r.detail)}</td><td>{r.attempts}</td>"
        + (
            f'<td class="ok">solved at step {r.solved_step}</td>'
            if r.solved_step is not None
            else f'<td class="no">{"not yet solved" if r.attempts else "not yet seen"}</td>'
        )
        + "</tr>"
        for r in d.regressions[:300]
    )
    summary = f"<p>{len(d.regressions)} queued, {came_back} came back, {solved} solved afterwards.</p>"
    head = (
        "<tr><th>task</th><th>queued</th><th>reason</th><th>detail</th><th>attempts</th><th>status</th></tr>"
    )
    return summary + f"<table>{head}{rows}</table>"


def _cost(d: RunData) -> str:
    per_step = _series(
        d, ["cost/step_usd", "cost/sandbox_usd", "cost/generation_usd", "cost/trainer_usd"], "cost/"
    )
    if not per_step:
        return _empty("no cost inputs logged (env/sandbox_s, rollout/generated_tokens, train/step_s)")
    parts = [line_chart(per_step, title="Cost per step", ylabel="USD")]
    if d.series("cost/total_usd"):
        parts.append(
            line_chart(_series(d, ["cost/total_usd"], "cost/"), title="Cumulative cost", ylabel="USD")
        )
    last = d.metrics[-1]
    keys = [k for k in d.keys("cost/") if k.endswith(("total", "_total_usd", "total_usd", "cum_usd"))]
    table = "".join(f"<tr><td>{escape(k)}</td><td>{_fmt(last.get(k, '-'))}</td></tr>" for k in keys)
    return _charts(*parts) + f"<table><tr><th>total</th><th>value</th></tr>{table}</table>"


SECTIONS = (
    ("Summary", "summary", _summary),
    ("Reward by domain", "reward", _reward),
    ("Training reward vs evaluation", "train-eval", _train_vs_eval),
    ("Pass rates", "pass", _pass_rates),
    ("Environment", "env", _env),
    ("Pool", "pool", _pool),
    ("Context", "context", _context),
    ("Reward-hacking signals", "hacking", _hacking),
    ("Training", "training", _training),
    ("Alerts", "alerts", _alerts),
    ("Most-flagged trajectories", "flagged", _flagged),
    ("Sample completions", "samples", _samples),
    ("Regression loop", "regressions", _regressions),
    ("Cost", "cost", _cost),
    ("Config", "config", _config),
)


def render_sections(data: RunData) -> str:
    """The body of the report (shared with the dashboard)."""
    return "".join(_section(title, fn(data), sid) for title, sid, fn in SECTIONS)


def render_page(data: RunData, *, script: str = "") -> str:
    name = escape(data.path.resolve().name)
    sub = f"{escape(str(data.path))} · generated {time.strftime('%Y-%m-%d %H:%M:%S')}"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width'><title>trialground · {name}</title>"
        f"<style>{CSS}</style></head><body><header><h1>trialground run: {name}</h1>"
        f'<div class="sub" id="sub">{sub}</div></header><main id="content">{render_sections(data)}</main>'
        f"{script}</body></html>"
    )


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write `report.html` (or `out`) for `run_dir`; returns its path."""
    data = load_run(run_dir)
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    target.write_text(render_page(data), encoding="utf-8")
    return target
