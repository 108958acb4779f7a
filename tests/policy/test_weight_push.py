"""Weight files for inference servers, and the vLLM weight push as far as it runs without vLLM: the
engine arguments, and the worker extension loading a pushed directory into a model with vLLM's
`load_weights(weights)` interface."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from trialground.errors import PolicyError
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.vllm.vllm import WORKER_EXTENSION, engine_kwargs, push_weights
from trialground.policy.backends.vllm.vllm_worker import WeightReload
from trialground.policy.config import PolicyConfig
from trialground.policy.weight_files import (
    RELOAD_METHOD,
    iter_weights,
    prune,
    read_weights,
    weight_headers,
    write_weights,
)

torch = pytest.importorskip("torch")


def test_write_then_read_round_trips_and_writes_tied_weights_once(tiny: HFPolicy, tmp_path: Path) -> None:
    state = tiny.model.state_dict()
    assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()  # tied
    directory = write_weights(state, tmp_path, 3)
    assert directory == tmp_path / "v00000003" and [p.name for p in directory.iterdir()] == [
        "bucket-00001.safetensors"  # the tiny model fits one bucket of the default 512 MiB
    ]
    back = read_weights(directory)
    assert set(back) == set(state) - {"lm_head.weight"}
    assert all(torch.equal(back[k], state[k]) for k in back)
    # a second push of the same version replaces it; no temporary directory is left behind
    write_weights({"w": torch.ones(2)}, tmp_path, 3)
    assert set(read_weights(directory)) == {"w"}
    for v in (4, 5):
        write_weights({"w": torch.full((2,), float(v))}, tmp_path, v)
    prune(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v00000004", "v00000005"]
    with pytest.raises(PolicyError, match=r"no \*\.safetensors weights"):
        read_weights(tmp_path / "missing")


def test_buckets_are_bounded_cast_and_streamed_back(tiny: HFPolicy, tmp_path: Path) -> None:
    state = tiny.model.state_dict()
    bucket = 256 * 1024
    directory = write_weights(state, tmp_path, 1, bucket_bytes=bucket, dtype=torch.bfloat16)
    files = sorted(directory.iterdir())
    headers = weight_headers(directory)
    biggest = max(v.numel() * 2 for v in state.values())
    assert len(files) > 1 and all(f.name.startswith("bucket-") for f in files)
    # each file holds at most one bucket of data, or one tensor larger than a bucket
    assert all(f.stat().st_size <= max(bucket, biggest) + 8 * 1024 for f in files)
    assert {dtype for dtype, _ in headers.values()} == {"BF16"}
    assert {k: shape for k, (_, shape) in headers.items()} == {
        k: tuple(v.shape) for k, v in state.items() if k != "lm_head.weight"
    }
    seen = []
    for name, tensor in iter_weights(directory):  # one tensor at a time, bucket by bucket
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, state[name].to(torch.bfloat16))
        seen.append(name)
    assert sorted(seen) == sorted(k for k in state if k != "lm_head.weight")
    # an iterator of pairs (an FSDP gather, shard by shard) writes the same
    again = write_weights(iter(state.items()), tmp_path / "b", 1, bucket_bytes=bucket, dtype=torch.bfloat16)
    assert [f.read_bytes() for f in sorted(again.iterdir())] == [f.read_bytes() for f in files]


def test_written_weights_are_a_copy(tmp_path: Path) -> None:
    w = torch.zeros(3)
    directory = write_weights({"w": w}, tmp_path, 0)
    w.add_(1.0)  # the trainer steps on; the pushed file keeps the pushed values
    assert torch.equal(read_weights(directory)["w"], torch.zeros(3))


class _Model(torch.nn.Module):
    """vLLM's model interface as the worker extension uses it: parameters, and `load_weights` taking an
    iterable of (Hugging Face name, tensor). Here it copies into a transformers model by name."""

    def __init__(self, hf: Any) -> None:
        super().__init__()
        self.hf = hf
        self.calls = 0

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> set[str]:
        self.calls += 1
        own = self.hf.state_dict()
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                own[name].copy_(tensor)
                loaded.add(name)
        return loaded


class _Runner:
    def __init__(self, model: _Model) -> None:
        self._model = model

    def get_model(self) -> _Model:
        return self._model


class _Worker(WeightReload):
    def __init__(self, model: _Model) -> None:
        self.model_runner = _Runner(model)


class _LLM:
    """`vllm.LLM`'s two calls the push makes: `collective_rpc(name, args=...)` runs the named worker
    method on every worker, as vLLM does for a string method; `reset_prefix_cache()`."""

    def __init__(self, workers: list[_Worker]) -> None:
        self.workers = workers
        self.resets = 0
        self.calls: list[str] = []

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        assert isinstance(method, str) and all(isinstance(a, str) for a in args)  # nothing to pickle
        self.calls.append(method)
        return [getattr(w, method)(*args) for w in self.workers]

    def reset_prefix_cache(self) -> None:
        self.resets += 1
        self.calls.append("reset_prefix_cache")

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(f"wake_up({','.join(tags)})")


def test_push_reaches_every_worker_through_the_extension(tmp_path: Path) -> None:
    trainer = HFPolicy(PolicyConfig(model="tiny")).model
    with torch.no_grad():
        for p in trainer.parameters():
            p.mul_(0.5)
    models = [_Model(HFPolicy(PolicyConfig(model="tiny")).model) for _ in range(2)]
    llm = _LLM([_Worker(m) for m in models])
    count = push_weights(llm, trainer.state_dict(), tmp_path, bucket_bytes=2**20)  # many buckets
    assert count == len(trainer.state_dict()) - 1  # the tied lm_head travels once
    assert llm.resets == 1 and list(tmp_path.iterdir()) == []  # the files are gone after the load
    for m in models:
        assert m.calls == 1
        got = m.hf.state_dict()
        assert all(torch.equal(got[k], v) for k, v in trainer.state_dict().items())


def test_engine_is_built_with_the_worker_extension() -> None:
    kwargs = engine_kwargs(PolicyConfig(backend="vllm", model="tiny", max_context_tokens=512))
    assert (
        kwargs["worker_extension_cls"]
        == WORKER_EXTENSION
        == "trialground.policy.backends.vllm.vllm_worker.WeightReload"
    )
    assert Path(kwargs["model"]).name == "tiny_model" and kwargs["max_model_len"] == 512
    assert hasattr(WeightReload, RELOAD_METHOD)
    assert "enable_lora" not in kwargs
    lora = engine_kwargs(PolicyConfig(backend="vllm", model="tiny", vllm_max_lora_rank=8))
    assert lora["enable_lora"] is True and lora["max_lora_rank"] == 8 and lora["max_loras"] == 2


def test_a_sleeping_engine_wakes_its_weights_for_the_push_and_its_cache_after(tmp_path: Path) -> None:
    import threading

    from trialground.policy.backends.vllm.vllm import VLLMPolicy

    trainer = HFPolicy(PolicyConfig(model="tiny")).model
    llm = _LLM([_Worker(_Model(HFPolicy(PolicyConfig(model="tiny")).model))])
    policy = object.__new__(VLLMPolicy)  # the engine is the fake above: vLLM does not run here
    policy.config = PolicyConfig(backend="vllm", model="tiny", vllm_sleep=True)
    policy.llm, policy._scratch, policy._lock, policy._asleep, policy.version = (
        llm,
        tmp_path,
        threading.Lock(),
        False,
        0,
    )
    policy.idle()
    policy.load_weights(trainer.state_dict(), 1)
    assert llm.calls == [
        "sleep(1)",
        "wake_up(weights)",
        RELOAD_METHOD,
        "reset_prefix_cache",
        "wake_up(kv_cache)",
    ]
    assert policy.version == 1 and not policy._asleep
