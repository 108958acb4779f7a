"""A vLLM worker extension: load new weights from a directory that the trainer wrote.

vLLM mixes the class named by `--worker-extension-cls` (server) or `worker_extension_cls=` (`vllm.LLM`)
into every GPU worker; `collective_rpc("trialground_load_weights", args=(directory,))` then runs the
method below on each worker. The trainer sends a directory path, a string, so this works with vLLM's
default msgpack serialization (no `VLLM_ALLOW_INSECURE_SERIALIZATION`, unlike `LLM.apply_model` with a
closure). Each tensor-parallel worker reads the directory's bucket files one tensor at a time, and the
model's own `load_weights` (which takes an iterator) keeps its shard of each as it comes, as at start-up:
no worker ever holds the whole pushed model beside its own.

This module must not import vLLM at import time: vLLM imports it inside its worker processes, and the
rest of trialground imports it without vLLM installed. It has not run on a GPU in this project's CI.
"""

from __future__ import annotations

from typing import Any

from trialground.policy.weight_files import RELOAD_METHOD, iter_weights


def model_of(worker: Any) -> Any:
    """The worker's torch model: `model_runner.get_model()` (unwrapped from compilation/CUDA-graph
    wrappers) where the runner has it, else `model_runner.model`."""
    runner = worker.model_runner
    getter = getattr(runner, "get_model", None)
    return getter() if callable(getter) else runner.model


def load_weights_from_dir(model: Any, directory: str) -> int:
    """Stream every tensor of `directory` into `model` (vLLM's `load_weights(weights)` interface: an
    iterable of `(hf_name, tensor)`, read here one at a time); returns how many tensors were given."""
    try:
        device = next(model.parameters()).device
    except StopIteration:
        device = "cpu"
    given = 0

    def counted() -> Any:
        nonlocal given
        for item in iter_weights(directory, device=str(device)):
            given += 1
            yield item

    model.load_weights(weights=counted())
    return given


class WeightReload:
    """Mixed into vLLM's worker:
    `--worker-extension-cls trialground.policy.backends.vllm.vllm_worker.WeightReload`."""

    def trialground_load_weights(self, directory: str) -> int:
        return load_weights_from_dir(model_of(self), directory)


# The method's name is part of the wire protocol (weight_files.RELOAD_METHOD); keep them one.
assert hasattr(WeightReload, RELOAD_METHOD)
