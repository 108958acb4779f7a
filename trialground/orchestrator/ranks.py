"""Launching a data-parallel run's ranks (`trialground.train.distributed`): under torchrun every rank runs the
same command and joins from torchrun's environment; with `cluster: ray` and `trainer.data_parallel: N`, this
process is rank 0 and starts N - 1 Ray actors that join it through a TCP store it hosts (port 0: the kernel
picks a free one)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trialground.orchestrator.run_config import RunConfig
from trialground.pool.ray_backend import start_ray
from trialground.train.distributed import DataParallel, join, set_active, torchrun_world


def _on_cuda(config: RunConfig) -> bool:
    return config.policy.device.startswith("cuda")


def _backend(config: RunConfig) -> str:
    if config.trainer.dist_backend != "auto":
        return config.trainer.dist_backend
    return "nccl" if _on_cuda(config) else "gloo"


def _local_device(config: RunConfig, local_rank: int) -> RunConfig:
    """On CUDA, each rank's model goes to its own device (`cuda:<local rank>`)."""
    if not _on_cuda(config):
        return config
    torch.cuda.set_device(local_rank)
    policy = config.policy.model_copy(update={"device": f"cuda:{local_rank}"})
    return config.model_copy(update={"policy": policy})


def _join(config: RunConfig, rank: int, world: int, **init: Any) -> DataParallel:
    return join(_backend(config), rank, world, timeout_s=config.trainer.dist_timeout_s, **init)


def serve_rank(dp: DataParallel, config: RunConfig) -> None:
    """Ranks > 0: train the shares rank 0 sends, on the run's starting model, until it says stop. The model
    is built by the rule rank 0 follows (`trainer_module`), so every rank trains the same dtype."""
    from trialground.orchestrator.wiring import trainer_module

    dp.serve(trainer_module(config, None))


@contextmanager
def ranks(config: RunConfig) -> Iterator[tuple[RunConfig, DataParallel | None]]:
    """Around a training run: join or start its ranks, and yield (this rank's config, its side), or
    (config, None) in one process. Rank 0 runs the loop; ranks > 0 call `serve_rank`. On the way out rank 0
    stops the others and every rank leaves the process group."""
    world = torchrun_world()
    if world is not None:
        rank, size, local = world
        config = _local_device(config, local)
        dp = _join(config, rank, size)  # MASTER_ADDR / MASTER_PORT from torchrun
    elif config.cluster == "ray" and config.trainer.data_parallel > 1:
        dp = _start_ray_ranks(config)
    else:
        yield config, None
        return
    set_active(dp)
    try:
        yield config, dp
    finally:
        set_active(None)
        dp.close()


def _start_ray_ranks(config: RunConfig) -> DataParallel:
    """Rank 0 here; ranks 1..N-1 as Ray actors (one GPU each on CUDA) joining a TCP store hosted here."""
    import ray

    if not ray.is_initialized():
        start_ray(config.pool.ray_address)
    world = config.trainer.data_parallel
    timeout = timedelta(seconds=config.trainer.dist_timeout_s)
    host = ray.util.get_node_ip_address()
    store = dist.TCPStore(host, 0, world, is_master=True, timeout=timeout, wait_for_workers=False)
    actor_class = _rank_actor_class()
    gpus = 1 if _on_cuda(config) else 0
    actors = [actor_class.options(num_cpus=0 if gpus else 1, num_gpus=gpus).remote() for _ in range(1, world)]
    ray.get([a.ready.remote() for a in actors])  # an actor that cannot start fails here, not in a hang
    runs = [a.serve.remote(config, host, store.port, r) for r, a in enumerate(actors, start=1)]
    dp = _join(config, 0, world, store=store)
    dp.ray_ranks, dp.ray_runs = actors, runs
    return dp


_ACTOR_CLASS: Any = None


def _rank_actor_class() -> Any:
    """The Ray actor of one training rank (defined on first use: Ray is an optional extra)."""
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray

        @ray.remote
        class TrainingRank:
            def ready(self) -> bool:
                return True

            def serve(self, config: RunConfig, host: str, port: int, rank: int) -> None:
                world = config.trainer.data_parallel
                timeout = timedelta(seconds=config.trainer.dist_timeout_s)
                store = dist.TCPStore(host, port, world, is_master=False, timeout=timeout)
                local = _local_device(config, 0)  # Ray hands the actor its GPU as device 0
                dp = _join(local, rank, world, store=store)
                try:
                    serve_rank(dp, local)
                finally:
                    dp.close()

        _ACTOR_CLASS = TrainingRank
    return _ACTOR_CLASS
