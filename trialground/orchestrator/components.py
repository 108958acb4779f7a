"""Build every component of a run from its `RunConfig`, and take them down again."""

from __future__ import annotations

import copy
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trialground.envs.base import Environment
from trialground.monitor.monitor import Monitor
from trialground.orchestrator.run_config import RunConfig, require_extras
from trialground.orchestrator.rundir import RunDir
from trialground.policy.base import Policy
from trialground.tasks.dedup import eval_contamination
from trialground.tasks.model import Task
from trialground.tasks.pool import TaskPool, load_task_sets
from trialground.train.advantages import Scored
from trialground.verify.grader import Grader, make_grader

if TYPE_CHECKING:  # torch and the pool's backends are imported only when a run needs them
    from trialground.pool.pool import EnvPool
    from trialground.train.trainer import Trainer


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Components:
    """The parts of one run. `env` opens an environment for a task (from the pool for tool episodes);
    `trainer` is None for an evaluation."""

    config: RunConfig
    run: RunDir | None
    tasks: TaskPool
    eval_tasks: list[Task]
    policy: Policy
    trainer: Trainer | None
    grader: Grader
    monitor: Monitor | None
    env_pool: EnvPool | None = None
    domains: dict[str, str] = field(default_factory=dict)
    startup_metrics: dict[str, float] = field(default_factory=dict)

    def require_trainer(self) -> Trainer:
        if self.trainer is None:
            raise RuntimeError("these components were built for evaluation (train=False): no trainer")
        return self.trainer

    def env_factory(self, task: Task) -> Callable[[], Environment | Awaitable[Environment]]:
        """Zero-argument maker of an environment for `task`: pooled for tool episodes, else a fresh
        single-turn environment (grading opens its own fresh sandbox either way)."""
        if self.env_pool is not None:
            pool = self.env_pool
            return lambda: pool.acquire(task)
        from trialground.envs.single_turn import SingleTurnEnv

        return lambda: SingleTurnEnv(self.grader)

    @property
    def env_release(self) -> Callable[[Environment], Awaitable[None]] | None:
        return None if self.env_pool is None else self.env_pool.release

    def sync_weights(self) -> None:
        """After a trainer step: the policy samples with the new weights, stamped with the new version."""
        trainer = self.require_trainer()
        if trainer.base_model is self.policy.shared_module():  # shared module (LoRA too: adapters inside)
            self.policy.version = trainer.version
        else:
            self.policy.load_weights(trainer.state_dict(), trainer.version)

    def texts(self, batch: Sequence[Scored]) -> list[str]:
        """Each record's completion, decoded (for the run's trajectory files)."""
        decode = self.policy.tokenizer.decode
        return [decode(r.trajectory.completion()[0], skip_special_tokens=True) for r in batch]

    def component_metrics(self) -> dict[str, float]:
        """What the components measured since the last call: grading, hack flags, task pool, env pool."""
        out = dict(self.grader.metrics(reset=True)) | dict(self.tasks.stats())
        if self.env_pool is not None:
            out |= dict(self.env_pool.metrics())
        return out

    def policy_state(self) -> dict[str, object]:
        rng = self.policy.sampling_rng_state()
        return {} if rng is None else {"rng": rng}

    def load_policy_state(self, state: Mapping[str, object]) -> None:
        if "rng" in state:
            self.policy.set_sampling_rng_state(state["rng"])

    async def close(self) -> None:
        if self.env_pool is not None:
            await self.env_pool.close()
        await self.grader.close()
        self.policy.close()
        if self.monitor is not None:
            self.monitor.close()


def build(config: RunConfig, run: RunDir | None, *, train: bool = True) -> Components:
    """Everything a run (train=True) or an evaluation (train=False) needs."""
    from trialground.policy.factory import make_policy

    require_extras(config)
    seed_everything(config.seed)
    policy = make_policy(config.policy)  # first: a policy in a child process loads while tasks load
    pool, evals = load_task_sets(config.tasks)
    policy.seed_sampling(config.seed)  # the run's seed decides what the policy samples, not just global RNGs
    trainer = None
    if train:
        from trialground.policy.factory import require_trainable
        from trialground.train.trainer import Trainer

        require_trainable(config.policy, policy)
        model = policy.shared_module()
        if model is None:  # the policy generates elsewhere (a child process): the trainer loads its own
            from trialground.policy.hf import load_model

            model = load_model(config.policy)
        elif config.loop.mode == "async":
            # Async sampling must not read weights the optimizer is changing: the trainer owns a copy
            # and pushes it to the policy between generations (as it would to a vLLM server).
            model = copy.deepcopy(model)
        trainer = Trainer(
            model,
            config.trainer,
            pad_id=policy.tokenizer.pad_token_id,
            temperature=max(config.policy.sampling.temperature, 1e-3),
        )
        from trialground.train.distributed import join_data_parallel

        join_data_parallel(trainer)  # under torchrun / Ray: the other ranks train shares of each step
        if policy.push_at_start:  # servers may hold another run's weights
            policy.load_weights(trainer.state_dict(), trainer.version)
    backend = None
    if config.cluster == "ray":  # episodes' sandboxes and grading sandboxes both on Ray actors
        from trialground.pool.ray_backend import RayBackend

        backend = RayBackend(config.sandbox, config.pool)
    grader = make_grader(config.sandbox, config.reward, opener=backend.opener() if backend else None)
    monitor = Monitor(run.path, config.monitor) if run is not None else None
    env_pool = None
    if config.env.kind == "tool" or config.cluster == "ray":
        from trialground.pool.pool import EnvPool

        pool_config = config.pool
        if config.cluster == "ray":
            pool_config = pool_config.model_copy(update={"backend": "ray"})
        env_pool = EnvPool(
            pool_config, env_config=config.env, sandbox_config=config.sandbox, grader=grader, backend=backend
        )
    domains = {t.id: t.domain for t in [*pool.tasks, *evals]}
    overlap = eval_contamination(pool.tasks, evals)
    startup = {
        "eval/overlap_same_id": float(len(overlap.same_id)),
        "eval/overlap_near_dup_frac": overlap.near_dup_frac,
        "tasks/train": float(len(pool.tasks)),
        "tasks/eval": float(len(evals)),
    }
    if monitor is not None and env_pool is not None:
        monitor.add_live_source(env_pool.metrics)
    return Components(config, run, pool, evals, policy, trainer, grader, monitor, env_pool, domains, startup)
