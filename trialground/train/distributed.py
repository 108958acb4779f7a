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

DDP or FSDP2 (`trainer.parallel`). DDP keeps full weights on every rank; in the embedded default rank 0's
policy then samples with the very module the trainer updates, and no weights move after a step. FSDP2
(`trialground.train.fsdp`) shards weights, gradients and optimiser state; rank 0's sampler keeps its own
copy, refreshed after each step by gathering shard by shard (`gathering`: the other ranks take part), and
checkpoints are written by every rank (`checkpoint`). Every FSDP forward gathers weights with the other
ranks, so all ranks run the same number of passes (`passes`: the most any rank has, idle ones padded).

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
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trialground.train.advantages import Scored
from trialground.train.config import TrainerConfig
from trialground.train.fsdp import load_sharded, save_sharded, set_gradient_sync, shard_model
from trialground.train.trainer import Sample, Trainer

_ACTIVE: DataParallel | None = None


def set_active(dp: DataParallel | None) -> None:
    """The rank this process is while a data-parallel run is open (`trialground.orchestrator.ranks`)."""
    global _ACTIVE
    _ACTIVE = dp


def active() -> DataParallel | None:
    """This process's data-parallel rank while `ranks` is open, else None."""
    return _ACTIVE


def sharding(config: TrainerConfig) -> Callable[[nn.Module], nn.Module] | None:
    """What a run's trainer applies to its model before its optimiser (`Trainer(shard=...)`): FSDP2
    sharding on the ranks of a data-parallel run with `trainer.parallel: fsdp`, else None."""
    return None if _ACTIVE is None else _ACTIVE.sharding(config)


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
        self.sharded = False  # the trainer's model is FSDP-sharded (trainer.parallel: fsdp)
        self._control = control  # the gloo group of commands, shares and counts (None: the default)
        self._trainer: Trainer | None = None
        self._ddp: DistributedDataParallel | None = None
        self._reported = False  # this rank's state bytes were printed (after its first step)
        self._replicated = False  # FSDP: the first step's checks are done
        self._in_step = False  # a step's collectives are under way: a "stop" now would not match them
        self._stopped = False  # "stop" was sent (rank 0) or received: every rank is in close()
        self.ray_ranks: list[Any] = []  # the Ray actors of ranks 1.. (rank 0 of a Ray launch)
        self.ray_runs: list[Any] = []

    def sharding(self, config: TrainerConfig) -> Callable[[nn.Module], nn.Module] | None:
        """What the trainer applies to its model before building its optimiser: FSDP2 sharding when
        `trainer.parallel: fsdp`, else None (DDP wraps the trainer at its first step)."""
        if config.parallel != "fsdp":
            return None
        self.sharded = True

        def shard(model: nn.Module) -> nn.Module:
            bf16 = config.mixed_precision == "bf16" or any(
                p.dtype == torch.bfloat16 for p in model.parameters()
            )
            return shard_model(model, config, torch.bfloat16 if bf16 else torch.float32)

        return shard

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
            # FSDP: rank 0's model is sharded already (fp32 shards); the ranks' starting models were built
            # by one rule and are cast to fp32 as they are sharded
            "dtypes": None if self.sharded else _dtypes(trainer.model),
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
                if payload["dtypes"] is not None and _dtypes(model) != payload["dtypes"]:
                    raise RuntimeError(
                        f"rank {self.rank} holds {_dtypes(model)} weights, rank 0 {payload['dtypes']}: every "
                        "rank must build its trainer by the same rule (trialground.orchestrator.wiring)"
                    )
                config = payload["config"]
                self._trainer = Trainer(
                    model,
                    config,
                    pad_id=payload["pad_id"],
                    temperature=payload["temperature"],
                    shard=self.sharding(config),
                )
                self._trainer.parallel = self
            elif self._trainer is None:
                raise RuntimeError(f"rank 0 sent {kind!r} before its trainer")
            elif kind == "step":
                self._trainer.step(payload)
            elif kind == "gather":  # take part in rank 0's gathering of the full weights
                for _bucket in self._trainer.weight_buckets(*payload):
                    pass
            elif kind in ("save", "load"):  # take part in rank 0's sharded checkpoint
                self.checkpoint(kind, payload)
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
        if self._ddp is not None or self._replicated:
            return
        trainer = self._trainer
        if trainer is None:
            raise RuntimeError("a data-parallel step before the trainer was attached")
        if self.sharded:  # every rank sharded the same starting model; the optimiser state is empty
            if trainer.version != 0 or trainer.optimizer.state:
                raise RuntimeError(
                    "an FSDP trainer resumed on rank 0 alone: its ranks do not share the state"
                )
            self._replicated = True
            return
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
        if self.sharded:
            trainer = cast(Trainer, self._trainer)
            set_gradient_sync(trainer.model, sync)
            return trainer.chunk_logprobs(trainer.model, chunk, entropy)
        ddp = cast(DistributedDataParallel, self._ddp)
        if sync:
            return cast(tuple[torch.Tensor, torch.Tensor | None], ddp(chunk, entropy))
        with ddp.no_sync():
            return cast(tuple[torch.Tensor, torch.Tensor | None], ddp(chunk, entropy))

    def passes(self, count: int, *, grad: bool) -> int:
        """How many micro-batch passes this rank runs, given `count` of its own. DDP: its own (at least one
        training pass, so that the all-reduce happens); FSDP: the most any rank runs, since every pass
        gathers weights with the others."""
        if not self.sharded:
            return max(count, 1) if grad else count
        t = torch.tensor([count], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._control)
        return int(t.item())

    def idle_backward(self, sync: bool = True) -> None:
        """A pass a rank runs to match the others' (nothing to train this epoch under DDP, fewer micro-batches
        under FSDP): a two-token dummy whose loss is multiplied by zero, so its gradients are zeros; `sync`:
        the epoch's last pass, which reduces the gradients."""
        trainer = cast(Trainer, self._trainer)
        pad = trainer.pad_id
        dummy = Sample(ids=[pad, pad], mask=[0], old_logprobs=[0.0], advantage=0.0, prompt_len=1)
        logp, _ = self.logprobs([dummy], False, sync=sync)
        (logp.sum() * 0.0).backward()

    def _trainer_kind(self) -> str:
        return "fsdp" if self.sharded else "ddp"

    def checkpoint(self, kind: str, path: str) -> None:
        """A sharded trainer's weights and optimiser state saved to / loaded from the directory `path` by
        every rank at once (rank 0 asks the others; `trialground.train.fsdp.save_sharded`)."""
        trainer = cast(Trainer, self._trainer)
        if self.rank == 0:
            self._send(kind, [path] * self.world_size)
        if kind == "save":
            save_sharded(trainer.model, trainer.optimizer, path)
        else:
            load_sharded(trainer.model, trainer.optimizer, path)

    def gathering(self, dtype: torch.dtype | None, bucket_bytes: int) -> None:
        """Rank 0, before it gathers the full weights of a sharded trainer: the other ranks gather too (the
        caller must then iterate all the buckets). Nothing to do without sharding."""
        if self.sharded and self.rank == 0:
            self._send("gather", [(dtype, bucket_bytes)] * self.world_size)

    def sum_floats(self, values: dict[str, float]) -> dict[str, float]:
        """`values` summed key by key over ranks (a key missing on a rank counts 0). Ends the step."""
        trainer = cast(Trainer, self._trainer)
        if not self._reported and trainer.state_bytes:  # once: what this rank holds, by the run's log
            self._reported = True
            held = trainer.state_bytes
            print(
                f"rank {self.rank}/{self.world_size} ({self._trainer_kind()}): parameters {held['params']} + "
                f"gradients {held['grads']} + optimiser {held['optimizer']} = {sum(held.values())} bytes",
                file=sys.stderr,
                flush=True,
            )
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
