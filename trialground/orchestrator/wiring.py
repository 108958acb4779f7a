"""Build every part of a run from its `RunConfig` (the composition root), and take them down again."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from trialground.envs.kinds import KINDS as ENV_KINDS
from trialground.errors import ConfigError
from trialground.hugepages import heap_hugepages
from trialground.monitor.monitor import Monitor
from trialground.orchestrator.collect import Collector, RolloutSettings
from trialground.orchestrator.run_config import RunConfig, require_extras
from trialground.orchestrator.rundir import RunDir
from trialground.plugin import resolve
from trialground.policy.base import Policy
from trialground.pool.backends import make_backend
from trialground.tasks.dedup import eval_contamination
from trialground.tasks.model import Task
from trialground.tasks.pool import TaskPool, default_group, load_task_sets
from trialground.verify.grader import Grader, make_grader
from trialground.verify.reward.rubric import Rubric

if TYPE_CHECKING:  # torch and the pool's backends are imported only when a run needs them
    import torch

    from trialground.gateway.server import Gateway
    from trialground.pool.pool import EnvPool
    from trialground.train.trainer import Trainer


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Wiring:
    """The parts of one run, built from its config: the loop passes each function the ports it needs.
    `trainer` is None for an evaluation; `env_pool` is None for single-turn episodes graded locally."""

    config: RunConfig
    run: RunDir | None
    tasks: TaskPool
    eval_tasks: list[Task]
    policy: Policy
    trainer: Trainer | None
    grader: Grader
    rubric: Rubric
    collector: Collector
    monitor: Monitor | None
    env_pool: EnvPool | None = None
    domains: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    startup_metrics: dict[str, float] = field(default_factory=dict)
    gateway: Gateway | None = None  # env.kind=harness: the programs' OpenAI-compatible endpoint

    def require_trainer(self) -> Trainer:
        if self.trainer is None:
            raise RuntimeError("this run was built for evaluation (train=False): no trainer")
        return self.trainer

    async def close(self) -> None:
        if self.env_pool is not None:
            await self.env_pool.close()
        if self.gateway is not None:
            await self.gateway.stop()
        await self.grader.close()
        self.policy.close()
        if self.monitor is not None:
            self.monitor.close()


def trainer_module(config: RunConfig, shared: torch.nn.Module | None) -> torch.nn.Module:
    """The module a rank trains, in `trainer_dtype(policy.dtype)` on every rank (ranks > 0: `shared=None`).

    `shared` is the policy's own module on rank 0 of the embedded default. The trainer updates it in place
    (the policy samples with it; no second copy) when it is already in the trainer's dtype and sampling is
    synchronous; async sampling must not read weights the optimiser is changing, an fp16 sampler is
    trained through an fp32 copy, and FSDP shards what it trains: then the trainer owns a copy and pushes
    it to the policy after each step (as to a vLLM server; gathered shard by shard under FSDP). Without a
    shared module (ranks > 0, a policy in a child process or on a server) the trainer loads
    `policy.model` itself."""
    from trialground.policy.loading import load_model
    from trialground.train.distributed import sharding
    from trialground.train.precision import trainer_dtype

    dtype = trainer_dtype(config.policy.dtype)
    if shared is None:
        return cast_parameters(load_model(config.policy), dtype).eval()
    other_dtype = any(p.dtype != dtype for p in shared.parameters() if p.is_floating_point())
    if config.loop.mode == "async" or other_dtype or sharding(config.trainer) is not None:
        return cast_parameters(copy.deepcopy(shared), dtype)
    return shared


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`model` with its floating-point parameters in `dtype`; buffers as loaded (`Module.to` would also cast
    the fp32 rotary tables transformers keeps in a bf16 model, and change the positions' numerics)."""
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
    return model


def sync_weights(trainer: Trainer, policy: Policy) -> None:
    """After a trainer step: the policy samples with the new weights, stamped with the new version."""
    sampler = policy.shared_module()
    adapter = trainer.adapter() if policy.takes_adapters else None
    if trainer.base_model is sampler:  # shared module (LoRA too: adapters inside)
        policy.version = trainer.version
    elif adapter is not None:  # LoRA to servers that load adapters: the adapter alone
        policy.load_adapter(adapter, trainer.version)
    elif sampler is not None:  # an embedded sampler with its own copy: bucket by bucket, in its dtype
        dtype = next(sampler.parameters()).dtype
        for bucket in trainer.weight_buckets(dtype):  # FSDP: gathered shard by shard
            policy.load_weights(dict(bucket), trainer.version)
    else:
        policy.load_weights(trainer.state_dict(), trainer.version)


def push_start(trainer: Trainer, policy: Policy) -> None:
    """The trainer's weights to a policy that samples elsewhere, before the first generation: under LoRA
    to one that takes adapters, the base weights and then the adapter (later pushes send the adapter
    alone, on top of that base); otherwise the merged weights."""
    adapter = trainer.adapter() if policy.takes_adapters else None
    if adapter is None:
        policy.load_weights(trainer.state_dict(), trainer.version)
        return
    policy.load_weights(trainer.base_state_dict(), trainer.version)
    policy.load_adapter(adapter, trainer.version)


def build(config: RunConfig, run: RunDir | None, *, train: bool = True) -> Wiring:
    """Everything a run (train=True) or an evaluation (train=False) needs."""
    from trialground.policy.factory import make_policy

    require_extras(config)
    rubric = Rubric.from_config(config.reward)  # a bad `reward.parts` entry fails here, before any work
    seed_everything(config.seed)
    policy = make_policy(config.policy)  # first: a policy in a child process loads while tasks load
    pool, evals = load_task_sets(config.tasks)
    policy.seed_sampling(config.seed)  # the run's seed decides what the policy samples, not just global RNGs
    trainer = None
    if train:
        from trialground.policy.factory import require_trainable
        from trialground.train.trainer import Trainer

        require_trainable(config.policy, policy)
        from trialground.train.distributed import join_data_parallel, sharding

        trainer = Trainer(
            trainer_module(config, policy.shared_module()),
            config.trainer,
            pad_id=policy.tokenizer.pad_token_id,
            temperature=max(config.policy.sampling.temperature, 1e-3),
            shard=sharding(config.trainer),  # FSDP on the ranks of a data-parallel run
        )
        join_data_parallel(trainer)  # under torchrun / Ray: the other ranks train shares of each step
        if policy.push_at_start:  # servers may hold another run's weights
            push_start(trainer, policy)
    backend = None
    pool_config = config.pool_config
    if config.cluster == "ray":  # episodes' sandboxes and grading sandboxes both on Ray actors
        backend = make_backend(config.sandbox, pool_config)
    grader = make_grader(config.sandbox, config.reward, opener=backend.opener() if backend else None)
    monitor = (
        Monitor(run.path, config.monitor, run_config=config.model_dump(mode="json"))
        if run is not None
        else None
    )
    env_pool = None
    gateway = None
    sandbox_config = config.sandbox
    env_kind = ENV_KINDS.lookup(config.env.kind)
    if env_kind.capabilities.gateway:
        from trialground.gateway.server import Gateway

        gateway = Gateway()
        assert gateway.socket_dir is not None
        if env_kind.prepare_sandbox is not None:
            prepare = resolve(env_kind.prepare_sandbox, f"env kind {env_kind.name!r}", ConfigError)
            sandbox_config = prepare(config.sandbox, config.env, str(gateway.socket_dir))
    if config.uses_env_pool:
        from trialground.pool.pool import EnvPool

        env_pool = EnvPool(
            pool_config, env_config=config.env, sandbox_config=sandbox_config, grader=grader, backend=backend
        )
    domains = {t.id: t.domain for t in [*pool.tasks, *evals]}
    sources = {t.id: default_group(t) for t in pool.tasks}
    overlap = eval_contamination(pool.tasks, evals)
    startup = {
        "eval/overlap_same_id": float(len(overlap.same_id)),
        "eval/overlap_near_dup_frac": overlap.near_dup_frac,
        "tasks/train": float(len(pool.tasks)),
        "tasks/eval": float(len(evals)),
        "system/heap_hugepages": float(heap_hugepages()),
        **(pool.decontamination.metrics() if pool.decontamination is not None else {}),
    }
    if monitor is not None and env_pool is not None:
        monitor.add_live_source(env_pool.metrics)
    settings = RolloutSettings(
        concurrency=config.loop.rollout_concurrency,
        max_context_tokens=config.policy.max_context_tokens,
        observation_role=config.policy.observation_role,
    )
    make_env = None
    if env_pool is None:  # an env kind without sandboxes: its environments come straight from its factory
        make = env_kind.load("environment kind", ConfigError)
        env_config, sandbox = config.env, config.sandbox
        make_env = partial(
            make, grader, env_config, sandbox, sandbox=None, task=None, owns_sandbox=True,
            initial_snapshot=None, on_exec=None,
        )  # fmt: skip
    collector = Collector(
        policy, rubric, settings, grader, envs=env_pool, gateway=gateway, make_env=make_env,
        alternatives=policy.alternatives,
    )  # fmt: skip
    return Wiring(
        config,
        run,
        pool,
        evals,
        policy,
        trainer,
        grader,
        rubric,
        collector,
        monitor,
        env_pool,
        domains,
        sources,
        startup,
        gateway,
    )
