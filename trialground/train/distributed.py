"""Data-parallel training on torch.distributed: DDP across ranks started by torchrun or by Ray.

One run, many ranks. Rank 0 is the run: it owns the run directory, the policy, the task pool, rollouts,
grading, evaluation, metrics and checkpoints, exactly as in one process. The other ranks only train:
each holds a replica of the trainer, and never opens the run directory. Every step, rank 0 splits the
batch of trajectories it collected into one share per rank (`split_batch`: whole groups where there are
enough, balanced by tokens) and scatters the shares; each rank runs forward and backward on its share,
and DDP all-reduces the gradients, so every rank takes the same optimiser step. Generation therefore
scales through the policy backend (vLLM or OpenAI-compatible servers), sandboxes through `cluster: ray`,
and the trainer's forward and backward through ranks.

Exactness. The loss is a sum over the batch divided by a normaliser (policy tokens, or sequences) that
`sum_counts` all-reduces, so each rank's loss is its part of the one-process loss; the gradients are
summed (not averaged) across ranks by a DDP communication hook, giving the one-process gradient up to
float summation order (a test compares weights after a step with one process on the same batch). A rank
whose share has nothing to train still takes part in the all-reduce, with zero gradients
(`idle_backward`). Metrics are summed over ranks before rank 0 logs them.

Why DDP and not FSDP2 (`fully_shard`): in the embedded default the policy samples with the very module
the trainer updates, on rank 0, between steps; DDP keeps full weights on every rank, so that stays true
and no weights move after a step. FSDP2 would shard the parameters into DTensors, which the sampler
cannot run without gathering the full weights every step, and gloo, the CPU backend on which the tests
run, lacks the reduce-scatter FSDP2 is built on. DDP runs unchanged on gloo (CPU) and nccl (GPU).

DDP expects one forward call per backward; the trainer's shared-prompt pass makes two model calls per
micro-batch, so DDP wraps a module whose forward is the trainer's whole micro-batch pass
(`_MicroBatch`). Micro-batches accumulate under `no_sync`; the last one of each epoch synchronises.

Control travels in torch.distributed too: commands ("hello", "step", "stop") and batch shares are
pickled objects scattered over a gloo group (over the default group when that is gloo already), so they
never occupy a GPU stream, and ranks waiting through rank 0's rollouts wait in that group
(`trainer.dist_timeout_s`). Launch: under `torchrun` every rank runs the same command and `ranks` joins
the group from torchrun's environment; with `cluster: ray` and `trainer.data_parallel: N`, this process
is rank 0 and starts N - 1 Ray actors that join it through a TCP store it hosts (port 0: the kernel
picks a free one).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trialground.train.advantages import Scored
from trialground.train.trainer import Sample, Trainer

_ACTIVE: DataParallel | None = None


def set_active(dp: DataParallel | None) -> None:
    """The rank this process is while a data-parallel run is open (`trialground.orchestrator.ranks`)."""
    global _ACTIVE
    _ACTIVE = dp


def active() -> DataParallel | None:
    """This process's data-parallel rank while `ranks` is open, else None."""
    return _ACTIVE


def join_data_parallel(trainer: Trainer) -> None:
    """Where a run builds its trainer: on rank 0 of a data-parallel run, make it the ranks' leader.
    A no-op in one process (and on other ranks, which build their trainer in `DataParallel.serve`)."""
    if _ACTIVE is not None and _ACTIVE.rank == 0:
        _ACTIVE.attach(trainer)


def split_batch(batch: Sequence[Scored], world_size: int) -> list[list[Scored]]:
    """One share per rank of the trainable records, balanced by tokens.

    Groups (trajectories sharing a `group_id`) stay whole when there are at least as many groups as
    ranks, so a share's samples share their prompt (the trainer runs each distinct prompt once); else
    records are split one by one. Largest first, each to the least-loaded rank (lowest on ties):
    deterministic, so every run splits the same batch the same way. Records that are not trainable
    (errors, dropped rewards, filtered groups) are left out: no rank would train them.
    """
    units: dict[str, list[Scored]] = {}
    for rec in batch:
        if rec.trainable and rec.advantage is not None and rec.trajectory.error is None:
            units.setdefault(rec.trajectory.group_id, []).append(rec)
    groups = list(units.values())
    if len(groups) < world_size:
        groups = [[rec] for unit in groups for rec in unit]

    def tokens(unit: list[Scored]) -> int:
        return sum(len(r.trajectory.prompt_ids) + len(r.trajectory.completion()[0]) for r in unit)

    load = [0] * world_size
    shares: list[list[Scored]] = [[] for _ in range(world_size)]
    for unit in sorted(groups, key=tokens, reverse=True):  # stable: equal sizes keep batch order
        rank = min(range(world_size), key=lambda r: (load[r], r))
        load[rank] += tokens(unit)
        shares[rank].extend(unit)
    return shares


class _MicroBatch(nn.Module):
    """What DDP wraps: one call is one micro-batch's whole training forward (the shared prompt and its
    completions are two model calls, and DDP expects one forward call per backward)."""

    def __init__(self, trainer: Trainer) -> None:
        super().__init__()
        self.model = trainer.model
        self._logprobs = trainer.chunk_logprobs

    def forward(self, chunk: list[Sample], entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._logprobs(self.model, chunk, entropy)


def _dtypes(model: nn.Module) -> list[tuple[str, int]]:
    """Bytes per dtype of a model's own parameters and buffers (LoRA adapters, which rank 0 has injected
    before the others build their trainer, left out): what DDP's first broadcast expects to match."""
    sizes: dict[str, int] = {}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if "lora_" not in name:
            sizes[str(t.dtype)] = sizes.get(str(t.dtype), 0) + t.numel() * t.element_size()
    return sorted(sizes.items())


def _sum_gradients(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: sum a bucket over ranks (DDP's default averages). Each rank's loss is
    already divided by the whole batch's normaliser, so the sum is the one-process gradient."""
    work = cast(dist.Work, dist.all_reduce(bucket.buffer(), async_op=True))
    return work.get_future().then(lambda fut: fut.value()[0])


# DDP checks a hook's annotations as objects; postponed evaluation (`from __future__`) made them strings.
_sum_gradients.__annotations__ = {
    "state": object,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


class DataParallel:
    """One rank's side of a data-parallel run (see the module docstring). Rank 0 calls `attach` with
    its trainer; the other ranks call `serve`. The trainer calls `shard`, `sum_counts`, `logprobs`,
    `idle_backward` and `sum_floats` from `Trainer.step`, the same sequence on every rank."""

    def __init__(self, rank: int, world_size: int, control: Any) -> None:
        self.rank = rank
        self.world_size = world_size
        self._control = control  # the gloo group of commands, shares and counts (None: the default)
        self._trainer: Trainer | None = None
        self._ddp: DistributedDataParallel | None = None
        self._in_step = False  # a step's collectives are under way: a "stop" now would not match them
        self._stopped = False  # "stop" was sent (rank 0) or received: every rank is in close()
        self.ray_ranks: list[Any] = []  # the Ray actors of ranks 1.. (rank 0 of a Ray launch)
        self.ray_runs: list[Any] = []

    # ------------------------------------------------------------------ commands

    def _send(self, kind: str, payloads: Sequence[Any]) -> Any:
        """Rank 0: one (kind, payload) per rank; returns rank 0's own payload."""
        out: list[Any] = [None]
        dist.scatter_object_list(out, [(kind, p) for p in payloads], src=0, group=self._control)
        return out[0][1]

    def _receive(self) -> tuple[str, Any]:
        out: list[Any] = [None]
        dist.scatter_object_list(out, None, src=0, group=self._control)
        return cast(tuple[str, Any], out[0])

    def attach(self, trainer: Trainer) -> None:
        """Rank 0: make `trainer` data-parallel; every other rank builds the same trainer from this."""
        trainer.parallel = self
        self._trainer = trainer
        spec = {
            "config": trainer.config,
            "pad_id": trainer.pad_id,
            "temperature": trainer.temperature,
            "dtypes": _dtypes(trainer.model),
        }
        self._send("hello", [spec] * self.world_size)

    def serve(self, model: nn.Module) -> None:
        """Ranks > 0: train the share rank 0 sends for each step until it says stop. `model` is the run's
        starting model (rank 0's weights and optimiser state replace it before the first step)."""
        while True:
            kind, payload = self._receive()
            if kind == "stop":
                self._stopped = True
                return
            if kind == "hello":
                if _dtypes(model) != payload["dtypes"]:
                    raise RuntimeError(
                        f"rank {self.rank} holds {_dtypes(model)} weights, rank 0 {payload['dtypes']}: every "
                        "rank must build its trainer by the same rule (trialground.orchestrator.wiring)"
                    )
                self._trainer = Trainer(
                    model, payload["config"], pad_id=payload["pad_id"], temperature=payload["temperature"]
                )
                self._trainer.parallel = self
            elif kind == "step":
                if self._trainer is None:
                    raise RuntimeError("rank 0 sent a step before its trainer")
                self._trainer.step(payload)
            else:
                raise RuntimeError(f"unknown command {kind!r} from rank 0")

    def close(self) -> None:
        """Rank 0 stops the other ranks (unless a step was cut short: then they are in that step's
        collectives, and the launcher or `ray.kill` ends them); every rank leaves the group."""
        if self.rank == 0 and not self._in_step:
            self._send("stop", [None] * self.world_size)
            self._stopped = True
        if self._stopped:
            # every rank leaves together: a gloo pair torn down while its peer still reads from it can
            # abort the peer's process ("terminate called without an active exception")
            dist.barrier(group=self._control)
        if self.ray_ranks:
            import ray

            if not self._in_step:
                ray.get(self.ray_runs, timeout=300)  # re-raises a rank's failure
            for actor in self.ray_ranks:
                ray.kill(actor)
        dist.destroy_process_group()

    # ------------------------------------------------------------------ called by Trainer.step

    def shard(self, batch: Sequence[Scored]) -> list[Scored]:
        """This rank's share of the step's batch: rank 0 splits and scatters it; the others were sent
        theirs with the "step" command, and get it back unchanged."""
        self._in_step = True
        mine = self._send("step", split_batch(batch, self.world_size)) if self.rank == 0 else list(batch)
        self._replicate()
        return cast(list[Scored], mine)

    def _replicate(self) -> None:
        """Before the first step: rank 0's optimiser state and version to every rank, and DDP, whose
        construction broadcasts rank 0's weights. Not earlier: a resumed rank 0 loads its checkpoint
        after building the trainer."""
        if self._ddp is not None:
            return
        trainer = self._trainer
        if trainer is None:
            raise RuntimeError("a data-parallel step before the trainer was attached")
        state: list[Any] = [None]
        if self.rank == 0:
            masters = trainer.masters.state() if trainer.masters is not None else None
            optimizer = trainer.optimizer.state_dict()
            state = [{"optimizer": optimizer, "version": trainer.version, "master": masters}]
        dist.broadcast_object_list(state, src=0, group=self._control)
        if self.rank != 0:
            trainer.optimizer.load_state_dict(state[0]["optimizer"])
            if trainer.masters is not None:
                trainer.masters.load(state[0]["master"])
            trainer.version = int(state[0]["version"])
        # device_ids=None: one device per rank, and the samples are token lists, nothing to move. Buffers
        # (rotary tables) are synchronised once at construction and never change.
        self._ddp = DistributedDataParallel(_MicroBatch(trainer), device_ids=None, forward_sync_buffers=False)
        self._ddp.register_comm_hook(None, _sum_gradients)

    def sum_counts(self, tokens: int, sequences: int, trainable: int) -> tuple[int, int, int]:
        """Policy tokens, sequences and trainable sequences over all ranks' shares (one all-reduce)."""
        t = torch.tensor([tokens, sequences, trainable], dtype=torch.float64)
        dist.all_reduce(t, group=self._control)
        total_tokens, total_sequences, total_trainable = (int(v) for v in t.tolist())
        if total_sequences == 0:
            self._in_step = False  # the trainer skips the step on every rank
        return total_tokens, total_sequences, total_trainable

    def logprobs(
        self, chunk: list[Sample], entropy: bool, *, sync: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A micro-batch's training forward through DDP; `sync`: its backward all-reduces the gradients
        accumulated so far (the epoch's last micro-batch)."""
        ddp = cast(DistributedDataParallel, self._ddp)
        if sync:
            return cast(tuple[torch.Tensor, torch.Tensor | None], ddp(chunk, entropy))
        with ddp.no_sync():
            return cast(tuple[torch.Tensor, torch.Tensor | None], ddp(chunk, entropy))

    def idle_backward(self) -> None:
        """A rank with nothing to train this epoch joins the all-reduce: one synchronised pass over a
        two-token dummy whose loss is multiplied by zero, so its gradients are zeros."""
        trainer = cast(Trainer, self._trainer)
        pad = trainer.pad_id
        dummy = Sample(ids=[pad, pad], mask=[0], old_logprobs=[0.0], advantage=0.0, prompt_len=1)
        logp, _ = self.logprobs([dummy], False, sync=True)
        (logp.sum() * 0.0).backward()

    def sum_floats(self, values: dict[str, float]) -> dict[str, float]:
        """`values` summed key by key over ranks (a key missing on a rank counts 0). Ends the step."""
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, values, group=self._control)
        out: dict[str, float] = {}
        for part in gathered:
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + float(v)
        self._in_step = False
        return out


# ---------------------------------------------------------------------- joining


def torchrun_world() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) under torchrun with more than one process, else None."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or "RANK" not in os.environ:
        return None
    return int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0"))


def join(backend: str, rank: int, world: int, *, timeout_s: float, **init: Any) -> DataParallel:
    """Join the process group as `rank` of `world` (commands travel over gloo whatever the backend)."""
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **init)
    control = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else None
    return DataParallel(rank, world, control)
