"""Per-step metrics, each computed once, from the step's scored trajectories: reward, rollout, env, grading,
hack and staleness statistics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from trialground.monitor.cost import useful_tokens
from trialground.rollout.context_stats import context_metrics
from trialground.rollout.trajectory import Trajectory
from trialground.train.advantages import Scored
from trialground.verify.config import RewardConfig
from trialground.verify.judges.judge import disagreement_rate


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def rollout_metrics(
    groups: Sequence[Sequence[Trajectory]], domains: Mapping[str, str], trainer_version: int
) -> dict[str, float]:
    """`reward/*`, `rollout/*`, `env/*` and `async/*` keys for one step's groups."""
    trajs = [t for g in groups for t in g]
    ok = [t for t in trajs if t.ok]
    out: dict[str, float] = {"rollout/trajectories": float(len(trajs))}
    if not trajs:
        return out
    totals = [t.reward.total for t in ok if t.reward is not None]
    outcomes = [t.reward.outcome for t in ok if t.reward is not None]
    out["reward/mean"] = float(np.mean(totals)) if totals else 0.0
    out["reward/std"] = float(np.std(totals)) if totals else 0.0
    out["reward/outcome_mean"] = float(np.mean(outcomes)) if outcomes else 0.0
    by_domain: dict[str, list[float]] = defaultdict(list)
    for t in ok:
        if t.reward is not None:
            by_domain[domains.get(t.task_id, "unknown")].append(t.reward.total)
    for domain, values in by_domain.items():
        out[f"reward/mean/{domain}"] = float(np.mean(values))
    tasks_by_domain: dict[str, set[str]] = defaultdict(set)
    for t in ok:
        tasks_by_domain[domains.get(t.task_id, "unknown")].add(t.task_id)
    for domain, ids in tasks_by_domain.items():  # how many tasks stand behind reward/mean/<domain>
        out[f"reward/tasks/{domain}"] = float(len(ids))
    out |= _episode_metrics(trajs, ok)
    out |= context_metrics(trajs, domains)
    errors = [t for t in trajs if t.error is not None]
    out["env/error_rate"] = len(errors) / len(trajs)
    ends = [t.end for t in trajs if t.end is not None]
    attempts = sum(e.tool_calls + e.invalid_calls for e in ends)
    if attempts:  # what the model wrote that was no usable call: its failure, never an error above
        out["env/invalid_action_rate"] = sum(e.invalid_calls for e in ends) / attempts
    # episodes started again after the infrastructure lost their environment (rollout.agent)
    out["env/episodes_retried"] = float(sum(t.retries for t in trajs))
    out["env/timeout_rate"] = sum("timeout" in (t.error.kind if t.error else "") for t in trajs) / len(trajs)
    kinds: dict[str, int] = defaultdict(int)
    for t in errors:
        assert t.error is not None
        kinds[f"env/errors/{t.error.boundary}/{t.error.kind}"] += 1
    out.update({k: float(v) for k, v in kinds.items()})
    segments = [len(t.segments()) for t in trajs if t.turns]
    if segments:  # gateway episodes whose program rewrote its history train as several segments
        out["rollout/segments_mean"] = float(np.mean(segments))
        out["rollout/history_rewrites"] = float(sum(n - 1 for n in segments))
    lengths = [len(t.completion()[0]) for t in trajs]
    out["rollout/response_len_mean"] = float(np.mean(lengths))
    out["rollout/generated_tokens"] = float(
        sum(len(turn.token_ids) for t in trajs for turn in t.turns if turn.role == "policy")
    )
    out["env/sandbox_s"] = float(sum(t.timings.get("env_s", 0.0) for t in trajs))
    out["rollout/clip_ratio"] = sum(t.finish_reason == "length" for t in trajs) / len(trajs)
    for phase in ("generate_s", "env_s", "grade_s", "total_s"):
        values = [t.timings[phase] for t in trajs if phase in t.timings]
        if values:
            key = phase.removesuffix("_s")
            out[f"env/{key}_p50_s"] = _pct(values, 50)
            out[f"env/{key}_p99_s"] = _pct(values, 99)
    stale = [trainer_version - t.policy_version for t in trajs]
    out["async/staleness_mean"] = float(np.mean(stale))
    out["async/staleness_max"] = float(max(stale))
    out |= token_staleness(ok, trainer_version)
    zero_var = 0
    for g in groups:
        vals = [t.reward.total for t in g if t.ok and t.reward is not None]
        zero_var += int(len(vals) >= 2 and max(vals) - min(vals) < 1e-9)
    out["train/zero_var_group_frac"] = zero_var / max(1, len(groups))
    return out


def token_staleness(trained: Sequence[Trajectory], trainer_version: int) -> dict[str, float]:
    """Policy-version lag per sampled token of the trained trajectories (`Turn.version`, else the
    trajectory's version): a harness episode's calls, or an async turn sampled before a weight push, may
    come from different versions within one trajectory, which the per-trajectory lag hides."""
    lags: dict[int, int] = defaultdict(int)  # lag -> tokens
    for t in trained:
        for turn in t.turns:
            if turn.role == "policy" and turn.token_ids:
                version = turn.version if turn.version is not None else t.policy_version
                lags[trainer_version - version] += len(turn.token_ids)
    tokens = sum(lags.values())
    if not tokens:
        return {}
    return {
        "async/token_staleness_mean": sum(lag * n for lag, n in lags.items()) / tokens,
        "async/token_staleness_max": float(max(lags)),
        "async/stale_token_frac": sum(n for lag, n in lags.items() if lag > 0) / tokens,
    }


def _component(t: Trajectory, name: str) -> float | None:
    c = t.reward.component(name) if t.reward is not None else None
    return None if c is None else c.value


def _episode_metrics(trajs: Sequence[Trajectory], ok: Sequence[Trajectory]) -> dict[str, float]:
    """Multi-turn shape and the shaping terms: `rollout/turns_mean`, `reward/process_mean`,
    `reward/redundant_actions_mean` (per graded episode) and `reward/redundant_per_solved`."""
    out = {"rollout/turns_mean": float(np.mean([sum(u.role == "policy" for u in t.turns) for t in trajs]))}
    process = [v for t in ok if (v := _component(t, "process")) is not None]
    redundant = [(-v, t) for t in ok if (v := _component(t, "redundant_actions")) is not None]
    if process:
        out["reward/process_mean"] = float(np.mean(process))
    if redundant:
        out["reward/redundant_actions_mean"] = float(np.mean([r for r, _ in redundant]))
        solved = [r for r, t in redundant if t.reward is not None and t.reward.solved]
        if solved:
            out["reward/redundant_per_solved"] = float(np.mean(solved))
    return out


def useful_token_metrics(batch: Sequence[Scored]) -> dict[str, float]:
    """Tokens that carry gradient (trainable, non-zero advantage): the denominator of cost per useful
    token; and how many records the loss left out, by reason (`train/excluded/<reason>`)."""
    trained = [r for r in batch if r.trainable]
    n_tokens = [sum(len(u.token_ids) for u in r.trajectory.turns if u.role == "policy") for r in trained]
    out = {"rollout/useful_tokens": float(useful_tokens([r.advantage for r in trained], n_tokens))}
    for r in batch:
        if r.excluded is not None:
            key = f"train/excluded/{r.excluded}"
            out[key] = out.get(key, 0.0) + 1.0
    return out


def grading_metrics(
    groups: Sequence[Sequence[Trajectory]], sources: Mapping[str, str], reward: RewardConfig
) -> dict[str, float]:
    """`verify/*` and `hack/*` for one step's gradings (its trajectories only: evaluation is apart).

    `verify/gradings` (trajectories that were graded), `verify/errors` (gradings that reached no decision),
    `verify/pass_rate` (passed verdicts among decided gradings: for trajectories that were all graded it
    equals `reward/outcome_mean`), `verify/grade_s_mean`, `verify/shared` (gradings that took the verdict of
    an identical one in flight) and `verify/host_decided` (solutions that do not compile, failed on the
    host), `verify/error_rate/<source>` (`sources` maps task
    ids to `tasks.pool.default_group`), `hack/flag_rate` (decided gradings with a hack flag) and
    `hack/<flag>` counts, and the judge cross-check of this step: `verify/judge_calls`, `/judge_samples`,
    `/judge_errors`, `/judge_disagreement` (a pass being a score >= `reward.judge.threshold`)."""
    graded = [(t, t.end.graded) for g in groups for t in g if t.end is not None and t.end.graded is not None]
    decided = [gr for _, gr in graded if gr.verdict.error is None]
    n = max(len(decided), 1)
    out: dict[str, float] = {
        "verify/gradings": float(len(graded)),
        "verify/errors": float(len(graded) - len(decided)),
        "verify/pass_rate": sum(gr.verdict.passed for gr in decided) / n,
        "verify/grade_s_mean": sum(gr.seconds for _, gr in graded) / max(len(graded), 1),
        # decided without a sandbox run of their own (`grading.share_identical`, `grading.precheck_syntax`)
        "verify/shared": float(sum(gr.verdict.shortcut == "shared" for gr in decided)),
        "verify/host_decided": float(sum(gr.verdict.shortcut == "host_syntax" for gr in decided)),
    }
    hacked = [{f.name for f in gr.verdict.flags if f.severity == "hack"} for gr in decided]
    out["hack/flag_rate"] = sum(bool(h) for h in hacked) / n
    for names in hacked:
        for name in names:
            out[f"hack/{name}"] = out.get(f"hack/{name}", 0.0) + 1.0
    per_source: dict[str, list[bool]] = defaultdict(list)
    for t, gr in graded:
        per_source[sources.get(t.task_id, "unknown")].append(gr.verdict.error is not None)
    for source, errors in per_source.items():
        out[f"verify/error_rate/{source}"] = sum(errors) / len(errors)
    judged = [gr for gr in decided if gr.judge_score is not None]
    failed = sum(gr.judge_failed for gr in decided)
    if judged or failed:
        threshold = reward.judge.threshold if reward.judge is not None else 0.5
        out["verify/judge_calls"] = float(len(judged) + failed)
        out["verify/judge_samples"] = float(len(judged))
        out["verify/judge_errors"] = float(failed)
        out["verify/judge_disagreement"] = disagreement_rate(
            [gr.verdict.passed for gr in judged], [float(gr.judge_score or 0.0) for gr in judged], threshold
        )
    return out
