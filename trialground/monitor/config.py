"""Configuration of monitoring: sinks, the Prometheus endpoint, alert rules, prices.

Every alert rule has its own section under `monitor.rules` with `enabled`, `action` (warn, pause, stop)
and its statistical thresholds; `docs/monitoring.md` explains each threshold and the false-alarm rate
measured with the defaults.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Action = Literal["warn", "pause", "stop"]
Direction = Literal["up", "down", "both"]
SinkName = Literal["jsonl", "tensorboard", "wandb", "mlflow"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ShiftRuleConfig(_Frozen):
    """A level shift of a series against its own trailing window: CUSUM on standardised values.

    The reference is the `baseline` observations before the last `window`; the recent values are
    standardised by the reference mean and standard deviation (floored at `sd_floor`), and a Page CUSUM
    with allowance `cusum_k` fires when it passes `cusum_h`. The shift must also be practically large:
    the mean after the estimated change point differs from the reference mean by at least `min_delta`
    (and by `min_rel_delta` of the reference mean), over at least `min_run` observations. With
    `confirm="ks_or_psi"`, a two-sample KS test (p < `ks_alpha`) or the population stability index
    (PSI > `psi_threshold`) must agree.
    `level`, when set, fires on its own once the mean of the last `level_window` values passes it.
    """

    enabled: bool = Field(True, description="Evaluate this rule")
    action: Action = Field("warn", description="What the training loop should do when it fires")
    keys: tuple[str, ...] = Field((), description="Metric keys or fnmatch patterns watched")
    direction: Direction = Field("both", description="Which shifts count: up, down or both")
    window: int = Field(10, ge=1, le=10_000, description="Recent observations tested")
    baseline: int = Field(30, ge=3, le=100_000, description="Reference observations before the window")
    min_baseline: int = Field(8, ge=3, le=100_000, description="Observations needed before testing")
    cusum_k: float = Field(0.5, ge=0.0, le=10.0, description="CUSUM allowance, in reference SDs")
    cusum_h: float = Field(6.0, gt=0.0, le=1000.0, description="CUSUM decision threshold, in reference SDs")
    sd_floor: float = Field(0.02, gt=0.0, description="Lower bound of the reference SD (constant series)")
    min_delta: float = Field(0.05, ge=0.0, description="Smallest absolute shift worth an alert")
    min_rel_delta: float = Field(0.0, ge=0.0, description="Smallest shift relative to |reference mean|")
    confirm: Literal["none", "ks_or_psi"] = Field("none", description="Second test that must agree")
    ks_alpha: float = Field(0.01, gt=0.0, lt=1.0, description="KS p-value below which KS agrees")
    psi_threshold: float = Field(0.25, gt=0.0, description="PSI above which PSI agrees (0.25: major shift)")
    level: float | None = Field(None, description="Absolute level that fires on its own (None: off)")
    level_window: int = Field(3, ge=1, le=10_000, description="Observations averaged for the level test")
    min_run: int = Field(1, ge=1, le=10_000, description="Observations after the change point required")
    cooldown: int = Field(25, ge=0, le=1_000_000, description="Steps before the same rule+key fires again")
    support_key: str = Field(
        "",
        description="Metric counting the samples behind each value, '{name}' standing for the watched key's "
        "last path part (e.g. reward/tasks/{name} for reward/mean/<domain>); '' for none",
    )
    min_support: float = Field(
        0.0, ge=0.0, description="Silent while the mean support over the recent window is below this"
    )


class TrendRuleConfig(_Frozen):
    """A monotone upward trend: Mann–Kendall (Kendall's tau against step) plus the Theil–Sen slope.

    Fires when tau's p-value < `alpha`, the Theil–Sen slope is positive, and the growth it implies over
    the window (slope x span) is at least `min_growth` and `min_rel_growth` x the window's first-quarter
    median.
    """

    enabled: bool = Field(True, description="Evaluate this rule")
    action: Action = Field("warn", description="What the training loop should do when it fires")
    keys: tuple[str, ...] = Field((), description="Metric keys or fnmatch patterns watched")
    window: int = Field(20, ge=4, le=100_000, description="Recent observations tested for a trend")
    alpha: float = Field(0.001, gt=0.0, lt=1.0, description="Mann–Kendall p-value threshold")
    min_growth: float = Field(1.0, ge=0.0, description="Smallest absolute growth over the window")
    min_rel_growth: float = Field(0.5, ge=0.0, description="Smallest growth relative to the window start")
    cooldown: int = Field(25, ge=0, le=1_000_000, description="Steps before the same rule+key fires again")


class DivergenceRuleConfig(_Frozen):
    """Training reward trending up while evaluation is flat or falling over the last `k_evals` evaluations.

    Train reward is averaged over the steps since the previous evaluation. Fires when the train series
    rises (Kendall tau >= `min_train_tau`, Theil–Sen rise over the span >= `min_train_rise`), the eval
    Theil–Sen change over the span is <= `eval_tolerance`, the gap train - eval grows by at least
    `min_gap_growth` (Theil–Sen, over the span: this keeps eval noise from passing for divergence), and
    Spearman(train, eval) <= `max_spearman`, and the rise stands out of the step-to-step noise: the Welch t
    of the per-step training rewards in the window, later half against earlier half, is >= `min_train_t`
    (a batch of a few tasks moves the reward by chance; a gamed reward rises and stays).

    A hack found within the first few steps saturates the reward before the window begins, so nothing rises
    inside it. A second path compares levels with the start: the per-step training reward of the last
    `k_evals`-1 evaluation intervals against the first interval's (the policy as it started) rose by at least
    `min_level_rise` with Welch t >= `min_level_t`, while the mean of those evaluations is not above the
    first evaluation (+ `eval_tolerance`). The evaluation
    metric is `probe_key` when the run logs it, else `eval_key`; the same pairs give
    `monitor/reward_eval_spearman` (`trialground.monitor.correlation`).

    Both paths also ask the evaluation to be flat beyond its own sampling error: a pass rate over n tasks
    has a binomial standard error, and the train-minus-eval growth must reach `min_gap_z` standard errors of
    the evaluation's change (for the trend, of a least-squares slope over the window's points; for the
    level, of the mean of the last k_evals-1 evaluations minus the first).
    """

    enabled: bool = Field(True, description="Evaluate this rule")
    action: Action = Field("pause", description="What the training loop should do when it fires")
    train_key: str = Field("reward/mean", description="Training reward metric")
    eval_key: str = Field("eval/pass@1", description="Evaluation metric (higher is better)")
    probe_key: str = Field(
        "probe/pass@1",
        description="Used instead of eval_key when the run logs it (the frequent probe, "
        "loop.probe_interval); '' to always use eval_key",
    )
    k_evals: int = Field(5, ge=3, le=1000, description="Evaluations compared")
    min_train_tau: float = Field(0.6, ge=-1.0, le=1.0, description="Kendall tau of train reward vs time")
    min_train_rise: float = Field(0.1, ge=0.0, description="Smallest train-reward rise over the span")
    eval_tolerance: float = Field(0.0, description="Largest eval rise over the span still called flat")
    min_gap_growth: float = Field(0.15, ge=0.0, description="Smallest growth of (train - eval) over the span")
    max_spearman: float = Field(0.0, ge=-1.0, le=1.0, description="Spearman(train, eval) at most this")
    min_train_t: float = Field(
        2.5,
        ge=0.0,
        description="Welch t of the per-step training reward, the window's later half against its earlier "
        "half, at least this: a rise the step-to-step noise explains is not a rise (0: off)",
    )
    min_level_rise: float = Field(
        0.3,
        ge=0.0,
        description="Second path, for a reward that jumped before the window began: the per-step training "
        "reward of the last k_evals-1 evaluation intervals at least this far above the first interval's, "
        "while the mean of those evaluations is not above the first evaluation (0: off)",
    )
    min_level_t: float = Field(
        2.0, ge=0.0, description="Welch t of that rise (the first interval has few steps) at least this"
    )
    min_gap_z: float = Field(
        3.0,
        ge=0.0,
        description="Either path: the gap growth (train rise minus eval change) at least this many standard "
        "errors of the evaluation's change, from the binomial error of a pass rate over the "
        "`<eval prefix>/n_tasks` tasks the run logs (a 32-task probe moves by ±9 points by chance, so its "
        "flat stretches are weak evidence); 0, or no task count logged: off",
    )
    cooldown: int = Field(50, ge=0, le=1_000_000, description="Steps before it fires again")


class LengthRuleConfig(_Frozen):
    """Response length jumping while accuracy stays flat (padding, repetition, verbose hacks)."""

    enabled: bool = Field(True, description="Evaluate this rule")
    action: Action = Field("warn", description="What the training loop should do when it fires")
    length_key: str = Field("rollout/response_len_mean", description="Mean response length metric")
    accuracy_key: str = Field("reward/outcome_mean", description="Accuracy metric (fraction passed)")
    window: int = Field(5, ge=1, le=10_000, description="Recent steps compared")
    baseline: int = Field(20, ge=3, le=100_000, description="Reference steps before the window")
    min_rel_jump: float = Field(0.3, gt=0.0, description="Length rise relative to the reference mean")
    z_threshold: float = Field(4.0, gt=0.0, description="Length rise in reference SDs")
    accuracy_tolerance: float = Field(0.05, ge=0.0, description="Accuracy rise still called flat")
    cooldown: int = Field(25, ge=0, le=1_000_000, description="Steps before it fires again")


class CollapseRuleConfig(_Frozen):
    """A metric falling to a fraction of its early median (entropy collapse)."""

    enabled: bool = Field(True, description="Evaluate this rule")
    action: Action = Field("warn", description="What the training loop should do when it fires")
    key: str = Field("train/entropy", description="Metric watched")
    reference_steps: int = Field(10, ge=1, le=100_000, description="First observations forming the reference")
    window: int = Field(3, ge=1, le=10_000, description="Recent observations averaged")
    min_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="Fires below this fraction of reference")
    cooldown: int = Field(50, ge=0, le=1_000_000, description="Steps before it fires again")


class RulesConfig(_Frozen):
    """One section per alert rule. Metric keys are documented in `trialground.monitor.rules`."""

    env_anomaly: ShiftRuleConfig = Field(
        default_factory=lambda: ShiftRuleConfig(
            keys=("env/error_rate", "env/timeout_rate"), direction="up", window=5, min_delta=0.05
        ),
        description="Sandbox error and timeout rates jumping",
    )
    backlog: TrendRuleConfig = Field(
        default_factory=lambda: TrendRuleConfig(keys=("pool/queue_depth", "pool/wait_p99_s")),
        description="Task queue depth or wait growing",
    )
    reward_drift: ShiftRuleConfig = Field(
        default_factory=lambda: ShiftRuleConfig(
            keys=("canary/*", "verify/error_rate/*"), confirm="ks_or_psi", min_delta=0.05
        ),
        description="Signals that should stay put: canary re-scores, per-source verifier error rates",
    )
    domain_reward_shift: ShiftRuleConfig = Field(
        default_factory=lambda: ShiftRuleConfig(
            keys=("reward/mean/*",),
            window=5,
            baseline=20,
            confirm="ks_or_psi",
            min_delta=0.25,
            support_key="reward/tasks/{name}",
            min_support=4.0,
        ),
        description="Per-domain reward jumping against its trailing window (slow learning is not a shift; "
        "a domain with fewer than 4 tasks per step is too small a sample to call)",
    )
    reward_eval_divergence: DivergenceRuleConfig = Field(
        default_factory=DivergenceRuleConfig, description="Training reward up while evaluation is not"
    )
    hack_flag_rate: ShiftRuleConfig = Field(
        default_factory=lambda: ShiftRuleConfig(
            keys=("hack/flag_rate",), direction="up", window=5, min_delta=0.05, level=0.2
        ),
        description="Share of trajectories the hack detectors flagged",
    )
    response_length: LengthRuleConfig = Field(
        default_factory=LengthRuleConfig, description="Length jumping while accuracy is flat"
    )
    clip_ratio: ShiftRuleConfig = Field(
        default_factory=lambda: ShiftRuleConfig(
            keys=("rollout/clip_ratio",), direction="up", window=5, min_delta=0.1, level=0.5
        ),
        description="Share of responses cut at the token budget",
    )
    zero_var_groups: ShiftRuleConfig = Field(
        default_factory=lambda: ShiftRuleConfig(
            keys=("train/zero_var_group_frac",),
            direction="up",
            window=5,
            min_delta=0.25,
            min_run=3,
            level=0.9,
        ),
        description="Share of groups with identical rewards (no learning signal)",
    )
    entropy_collapse: CollapseRuleConfig = Field(
        default_factory=CollapseRuleConfig, description="Policy entropy collapsing"
    )
    judge_disagreement: TrendRuleConfig = Field(
        default_factory=lambda: TrendRuleConfig(
            keys=("verify/judge_disagreement",), window=30, min_growth=0.1, min_rel_growth=0.5
        ),
        description="Rule-based verifier and judge disagreeing more and more",
    )


class CostConfig(_Frozen):
    """Prices turning resource use into money. Defaults are rough public cloud list prices."""

    sandbox_usd_per_hour: float = Field(0.05, ge=0.0, description="One sandbox (about one vCPU) for an hour")
    trainer_usd_per_hour: float = Field(2.0, ge=0.0, description="The trainer's accelerators for an hour")
    usd_per_million_tokens: float = Field(0.1, ge=0.0, description="Generating one million tokens")


class MlflowConfig(_Frozen):
    """Where the `mlflow` sink records the run."""

    tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI (a server, a database, a file store); None: MLFLOW_TRACKING_URI "
        "when set, else the file store <run>/mlruns",
    )
    experiment: str = Field("trialground", min_length=1, description="MLflow experiment the run belongs to")


class MonitorConfig(_Frozen):
    sinks: tuple[SinkName, ...] = Field(("jsonl",), description="jsonl, tensorboard, wandb, mlflow")
    prometheus_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve live metrics on this port (off unless set; 9108 is the documented choice, "
        "0: any free port)",
    )
    prometheus_host: str = Field("127.0.0.1", description="Interface the Prometheus endpoint binds")
    prometheus_prefixes: tuple[str, ...] = Field(
        ("pool/", "env/", "sandbox/", "rollout/", "cost/", "queue/", "reward/", "eval/"),
        description="Metric namespaces exported as Prometheus gauges",
    )
    webhook_url: str | None = Field(None, description="POST alerts here")
    webhook_timeout_s: float = Field(5.0, gt=0.0, le=120.0, description="Webhook request timeout")
    console: bool = Field(True, description="Print alerts on the console")
    log_interval: int = Field(
        10,
        ge=1,
        description="Where stderr is not a terminal (a log file, nohup, Slurm, CI): one progress line every "
        "N steps and at the last (step, reward, loss, latest evaluation, elapsed, ETA); a terminal shows a "
        "progress bar updated every step. Every step's metrics go to the sinks whatever this is",
    )
    history: int = Field(2000, ge=50, le=10_000_000, description="Observations kept per metric for rules")
    rules: RulesConfig = Field(default_factory=RulesConfig, description="Alert rules")
    cost: CostConfig = Field(default_factory=CostConfig, description="Prices for cost accounting")
    mlflow: MlflowConfig = Field(
        default_factory=MlflowConfig, description="The mlflow sink's tracking server"
    )
