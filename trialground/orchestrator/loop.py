"""The training loop: one training step, top to bottom on one screen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from trialground.monitor.alerts import worst_action
from trialground.orchestrator.batches import AsyncBatches, SyncBatches
from trialground.orchestrator.canaries import (
    canary_metrics,
    training_canary_metrics,
    visible_check_metrics,
)
from trialground.orchestrator.dynamic import refill
from trialground.orchestrator.evaluate import EvalResult, evaluate
from trialground.orchestrator.metrics import grading_metrics, rollout_metrics, useful_token_metrics
from trialground.orchestrator.outcomes import (
    online_failure_metrics,
    queue_online_failures,
    record_eval,
    record_outcomes,
)
from trialground.orchestrator.preflight import preflight
from trialground.orchestrator.run_config import RunConfig
from trialground.orchestrator.rundir import RunDir, evaluation_records
from trialground.orchestrator.state import Cadence, restore, save
from trialground.orchestrator.wiring import Wiring, build, sync_weights
from trialground.policy.loading import base_model_dir
from trialground.rollout.branching import branch_metrics
from trialground.rollout.context_stats import WorkspaceTokens
from trialground.rollout.trajectory import Trajectory
from trialground.train.batch import score_groups

Progress = Callable[[int, dict[str, float]], None]
StopRequest = Callable[[], str | None]  # after each step: why to stop now (e.g. "SIGTERM"), or None


@dataclass(frozen=True)
class RunSummary:
    run_dir: str
    steps: int
    eval_before: float | None
    eval_after: float | None
    seconds: float
    alerts: int
    stopped_by: str | None = None
    sampled_before: float | None = None  # eval_sampled/pass@1 (loop.eval_sampled > 0)
    sampled_after: float | None = None


async def run(
    config: RunConfig,
    *,
    resume: bool = False,
    progress: Progress | None = None,
    stop: StopRequest | None = None,
) -> RunSummary:
    """Train `config.loop.steps` steps (from the run directory's newest checkpoint with `resume`). `progress`
    sees each step's metrics; `stop`, asked after each step, ends the run there, checkpointed."""
    t_start = time.perf_counter()
    preflight(config, "train", resume=resume)  # before the run directory exists: a retry is not blocked
    run_dir = RunDir(config, resume=resume)
    built: Wiring | None = None
    try:
        w = built = build(config, run_dir)
        loop, evals_at = config.loop, {0, config.loop.steps}
        trainer, policy, tasks, monitor = w.require_trainer(), w.policy, w.tasks, w.monitor
        step = restore(run_dir, trainer, tasks, policy, monitor) if resume else 0
        first_eval = first_sampled = None
        if step == 0:
            # recorded failures into the regression queue (tasks.regression_files)
            queue_online_failures(tasks, monitor, config.tasks.regression_files, config.tasks.seed)
            start = dict(w.startup_metrics)
            first_eval, first_sampled = await _eval_and_log(w, 0, start)
            if loop.probe_interval:
                start |= await _probe(w, start)
            if monitor is not None:
                monitor.observe(0, start)
            if progress:
                progress(0, start)
    except BaseException as exc:
        if built is not None:
            await built.close()
        if not resume and isinstance(exc, Exception):
            run_dir.discard()  # a failed start trained nothing: the same command can be rerun
        raise  # an interrupted one keeps its directory: `--resume` continues it from step 0

    sampling = config.policy.sampling
    batches = (
        AsyncBatches(w.collector, tasks, loop, sampling, step)
        if loop.mode == "async"
        else SyncBatches(w.collector, tasks, loop, sampling)
    )
    alerts, last_eval, last_sampled, stopped_by, cadence = 0, first_eval, first_sampled, None, Cadence(loop)
    workspace = WorkspaceTokens(policy.tokenizer, config.policy.max_context_tokens)
    base = base_model_dir(config.policy)
    try:
        while step < loop.steps:
            batch = await batches.next(step)  # k scored trajectories per task, stamped with policy versions
            kept: list[list[Trajectory]] | None = None
            fmetrics: dict[str, float] = {}
            if loop.dynamic_sampling:  # drop groups without a learning signal, refill from new tasks
                batch, kept, fmetrics = await refill(batches, batch)
            scored = score_groups(batch.groups, config.trainer, kept=kept)
            if not isinstance(batches, AsyncBatches):  # nothing generates until the push: free the engine
                await asyncio.to_thread(policy.idle)
            version, t0 = trainer.version, time.perf_counter()
            metrics = await asyncio.to_thread(trainer.step, scored)
            metrics["train/step_s"] = time.perf_counter() - t0
            # Rollouts from now on carry the new version. In a thread: loading weights waits for an
            # in-flight generation, and async rollouts must keep running meanwhile.
            t0 = time.perf_counter()
            await asyncio.to_thread(sync_weights, trainer, policy)
            metrics["train/weight_sync_s"] = time.perf_counter() - t0
            step += 1
            if isinstance(batches, AsyncBatches):
                await batches.advance(step)
                metrics["async/trainer_wait_s"] = batches.wait_s
            record_outcomes(tasks, monitor, step, batch.tasks, batch.groups)  # pass rates, regressions
            metrics |= rollout_metrics(batch.groups, w.domains, version) | useful_token_metrics(scored)
            metrics |= grading_metrics(batch.groups, w.sources, config.reward) | fmetrics | tasks.stats()
            metrics |= training_canary_metrics(batch.tasks, batch.groups)  # hack/canary_cheat_rate
            metrics |= visible_check_metrics(batch.groups)  # hack/visible_tests_changed_rate
            metrics |= online_failure_metrics(batch.tasks, batch.groups)  # regressions/online_*
            metrics |= workspace.metrics(batch.tasks)
            if w.env_pool is not None:
                metrics |= w.env_pool.metrics()
            metrics["rollout/batch_s"] = batch.rollout_s
            metrics |= branch_metrics(batch.groups, branching=loop.branch != "off")
            decode = policy.tokenizer.decode
            texts = [decode(r.trajectory.completion()[0], skip_special_tokens=True) for r in scored]
            await asyncio.to_thread(run_dir.write_step, step, scored, texts, w.domains)
            if (loop.eval_interval and step % loop.eval_interval == 0) or step in evals_at:
                last_eval, last_sampled = await _eval_and_log(w, step, metrics)
            if loop.probe_interval and step % loop.probe_interval == 0:
                metrics |= await _probe(w, metrics)
            raised = monitor.observe(step, metrics) if monitor else []
            alerts, halt = alerts + len(raised), worst_action(raised) in ("pause", "stop")
            if halt:  # an alert rule asked to pause or stop: checkpointed, resumable with --resume
                stopped_by = ", ".join(a.rule for a in raised if a.action in ("pause", "stop"))
            elif stop is not None:  # a signal (Ctrl-C, SIGTERM) asked to stop after this step
                stopped_by = stop()
            if cadence.due(step) or stopped_by:  # every N steps and every T seconds by default
                save(run_dir, step, trainer, tasks, policy, base_model=base, keep=loop.keep_checkpoints)
                cadence.saved()
            if progress:
                progress(step, metrics)
            if stopped_by:
                break
    finally:
        await batches.close()
        await w.close()
    seconds = time.perf_counter() - t_start
    return RunSummary(
        str(run_dir.path),
        step,
        first_eval,
        last_eval,
        seconds,
        alerts,
        stopped_by,
        first_sampled,
        last_sampled,
    )


async def _probe(w: Wiring, metrics: dict[str, float]) -> dict[str, float]:
    """`probe/*`: greedy pass@1 on a fixed small subset of the held-out split (the correlation's points);
    taken from this step's full evaluation when that covered the same tasks."""
    config = w.config
    tasks = w.eval_tasks[: config.loop.probe_tasks]
    if len(tasks) == len(w.eval_tasks) and "eval/pass@1" in metrics and config.loop.eval_samples == 1:
        return {"probe/" + k[5:]: v for k, v in metrics.items() if k.startswith("eval/pass@")}
    return (await evaluate(w.collector, tasks, params=config.policy.eval_sampling, prefix="probe")).metrics


async def _write_episodes(w: Wiring, step: int, result: EvalResult, prefix: str) -> None:
    """The evaluation's episodes to the run directory (`evaluations/{prefix}_step_{step}.parquet`)."""
    if w.run is None or not result.trajectories:
        return
    records, texts = evaluation_records(result.trajectories, w.policy.tokenizer.decode)
    await asyncio.to_thread(w.run.write_step, step, records, texts, w.domains, evaluation=prefix)


async def _eval_and_log(
    w: Wiring, step: int, metrics: dict[str, float] | None = None
) -> tuple[float | None, float | None]:
    """Evaluate the held-out split: greedy (`eval/*`, at `policy.eval_sampling`) and, with
    `loop.eval_sampled`, sampled at the training temperature (`eval_sampled/*`). Returns both pass@1s.
    Failures reach training only with `loop.eval_feedback`."""
    config = w.config
    result = await evaluate(
        w.collector, w.eval_tasks, params=config.policy.eval_sampling, samples=config.loop.eval_samples
    )
    await _write_episodes(w, step, result, "eval")
    if config.loop.eval_feedback:
        record_eval(w.tasks, w.monitor, step, w.eval_tasks, result.failed_task_ids)
    scores = dict(result.metrics)
    if config.loop.eval_sampled:
        sampled = await evaluate(
            w.collector,
            w.eval_tasks,
            params=config.policy.sampling,
            samples=config.loop.eval_sampled,
            prefix="eval_sampled",
        )
        await _write_episodes(w, step, sampled, "eval_sampled")
        scores |= sampled.metrics
    scores |= await canary_metrics(w.grader, w.eval_tasks, config.reward.canaries, step)  # reward_drift input
    if metrics is not None:
        metrics |= scores
    elif w.monitor is not None:
        w.monitor.observe(step, {**w.startup_metrics, **scores})
    return scores.get("eval/pass@1"), scores.get("eval_sampled/pass@1")
