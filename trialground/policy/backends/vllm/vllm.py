"""vLLM as a policy: an in-process engine (GPU), with weights pushed from the trainer.

vLLM is imported when the policy is built, never at module import, so the package works without it.
Generation goes through `LLM.generate` with token-id prompts; each sampled token's logprob is requested
(`logprobs=0` returns the sampled token's own). vLLM versions that support `logprobs_mode` are asked for
"processed_logprobs" (after temperature and top-p), matching the hf policy's contract; older versions
return raw logprobs, which equal the processed ones only at temperature 1 with top_p 1.

Sleep (`policy.vllm_sleep`, sync loop): the engine is built with `enable_sleep_mode`; once a step's
rollouts are done the loop calls `idle()`, which puts it to sleep (`LLM.sleep(level=1)`: weights offloaded
to host memory, KV cache freed) so the colocated trainer has the GPU's memory for the update, and
`load_weights` wakes it in two parts, `wake_up(tags=["weights"])` before the push and
`wake_up(tags=["kv_cache"])` after it. Not yet run on a GPU by this project.

Weight push: `load_weights` writes the trainer's tensors to a directory (`weight_files.write_weights`,
on /dev/shm when the machine has it) and asks every engine worker to load it with
`LLM.collective_rpc("trialground_load_weights", args=(directory,))`, a method of the worker extension
`trialground.policy.backends.vllm.vllm_worker.WeightReload` that the engine is built with. Only the method
name and a path cross into the engine processes, so this works with vLLM's default serialization; the earlier
`apply_model(closure)` needed `VLLM_ALLOW_INSECURE_SERIALIZATION=1` on current (V1) engines. It needs a
vLLM with `worker_extension_cls` and `LLM.collective_rpc`. Not yet run on a GPU by this project.

LoRA (`policy.vllm_max_lora_rank` > 0 and `policy.push_lora_adapter`): the engine is built with
`enable_lora`, and a LoRA run's sync hands `load_adapter` the adapter alone; it is written in PEFT's format
(`policy/adapters.py`) to the scratch directory, and every later generation passes it as
`lora_request=LoRARequest(name, id, path)` (a new id per version, so the engine loads it fresh; the one
two versions back is removed with `llm_engine.remove_lora`). Not yet run on a GPU by this project.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialground.errors import PolicyError
from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.decoding import completion_text
from trialground.policy.tiny import BUNDLED, resolve_model_dir
from trialground.policy.weight_files import DEFAULT_BUCKET_BYTES, RELOAD_METHOD, write_weights

if TYPE_CHECKING:
    from trialground.policy.adapters import Adapter

WORKER_EXTENSION = "trialground.policy.backends.vllm.vllm_worker.WeightReload"


def engine_kwargs(config: PolicyConfig) -> dict[str, Any]:
    """`vllm.LLM` arguments for `config` (without `logprobs_mode`, which older versions lack)."""
    model = str(resolve_model_dir(config.model)) if config.model in BUNDLED else config.model
    return {
        "model": model,
        "dtype": config.dtype,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "max_model_len": config.max_context_tokens,
        "enable_prefix_caching": True,
        "enable_sleep_mode": config.vllm_sleep,
        "worker_extension_cls": WORKER_EXTENSION,
        **lora_kwargs(config),
    }


def lora_kwargs(config: PolicyConfig) -> dict[str, Any]:
    """`vllm.LLM`'s LoRA arguments: two adapters resident (the current one and the one running requests
    may still use), up to `vllm_max_lora_rank`."""
    if config.vllm_max_lora_rank == 0:
        return {}
    return {"enable_lora": True, "max_lora_rank": config.vllm_max_lora_rank, "max_loras": 2}


def weight_scratch_dir() -> Path:
    """A fresh private directory for pushed weights: in shared memory (/dev/shm) when there is one,
    so a push costs no disk I/O."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="trialground-vllm-weights-", dir=base))


def push_weights(
    llm: Any,
    state_dict: Mapping[str, Any],
    scratch: Path,
    *,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    dtype: Any = None,
) -> int:
    """Write `state_dict` under `scratch` (buckets of `bucket_bytes`, cast to `dtype`), have every worker of
    `llm` load it bucket by bucket, drop the prefix cache (its KV was computed with the old weights) and
    delete the files. Returns the tensors each worker loaded."""
    directory = write_weights(state_dict, scratch, 0, bucket_bytes=bucket_bytes, dtype=dtype)
    try:
        loaded = llm.collective_rpc(RELOAD_METHOD, args=(str(directory),))
        llm.reset_prefix_cache()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    counts = {int(n) for n in loaded}
    if len(counts) != 1:
        raise PolicyError(f"vLLM workers loaded different numbers of tensors: {sorted(counts)}")
    return counts.pop()


class VLLMPolicy(Policy):
    def __init__(self, config: PolicyConfig) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise PolicyError("the vllm backend needs vLLM: pip install 'trialground[vllm]'") from exc
        self._vllm = vllm
        self.config = config
        kwargs = engine_kwargs(config)
        try:
            self.llm = vllm.LLM(**kwargs, logprobs_mode="processed_logprobs")
        except TypeError:  # an older vLLM without logprobs_mode
            try:
                self.llm = vllm.LLM(**kwargs)
            except TypeError as exc:
                raise PolicyError(
                    f"this vLLM ({getattr(vllm, '__version__', '?')}) cannot take pushed weights: it has "
                    f"no worker_extension_cls ({exc}); upgrade vLLM"
                ) from exc
        self._scratch = weight_scratch_dir()
        self._tokenizer = self.llm.get_tokenizer()
        self.version = 0
        self._lock = threading.Lock()
        self._asleep = False
        self.takes_adapters = config.vllm_max_lora_rank > 0 and config.push_lora_adapter
        self._lora: Any = None  # the LoRARequest every generation passes (None: no adapter)
        self._lora_ids: list[int] = []

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return await asyncio.to_thread(self._generate_sync, prompts, params)

    def _generate_sync(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        sp = self._vllm.SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,  # -1: off, in old and new vLLM alike
            min_p=params.min_p,
            repetition_penalty=params.repetition_penalty,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            seed=params.seed,
            logprobs=0,
        )
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]
        with self._lock:
            try:
                outputs = self.llm.generate(inputs, sp, use_tqdm=False, lora_request=self._lora)
            except Exception as exc:  # the engine raises many types; all are a failed generation
                raise PolicyError(f"vLLM generation failed: {exc}") from exc
            version = self.version
        eos = self._tokenizer.eos_token_id
        gens = []
        for out in outputs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            lps = [float(step[tok].logprob) for step, tok in zip(comp.logprobs or [], ids, strict=False)]
            if len(lps) != len(ids):
                raise PolicyError(f"vLLM returned {len(lps)} logprobs for {len(ids)} tokens")
            if comp.finish_reason == "length":
                reason = "length"
            elif ids and ids[-1] == eos:
                reason = "eos"
            else:
                reason = "stop"
            gens.append(
                Generation(
                    token_ids=tuple(ids),
                    logprobs=tuple(lps),
                    text=completion_text(self._tokenizer, ids),
                    finish_reason=reason,
                    version=version,
                )
            )
        return gens

    def idle(self) -> None:
        """Between a sync step's rollouts and its weight push: with `policy.vllm_sleep` the engine sleeps
        (level 1: weights offloaded to host memory, KV cache freed) so the trainer has the GPU's memory;
        `load_weights` wakes it."""
        if self.config.vllm_sleep and not self._asleep:
            with self._lock:
                self.llm.sleep(level=1)
                self._asleep = True

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Push trainer tensors (HF parameter names) into every engine worker (see the module doc)."""
        with self._lock:
            try:
                import torch

                bucket = self.config.weight_bucket_mb * 2**20
                dtype = getattr(torch, self.config.dtype)
                if self._asleep:  # the weights' memory first, the KV cache once they are loaded
                    if torch.cuda.is_available():  # what the trainer's update cached goes back to the device
                        torch.cuda.empty_cache()
                    self.llm.wake_up(tags=["weights"])
                push_weights(self.llm, state_dict, self._scratch, bucket_bytes=bucket, dtype=dtype)
                if self._asleep:
                    self.llm.wake_up(tags=["kv_cache"])
                    self._asleep = False
                self._lora = None  # full weights: no adapter on top
            except PolicyError:
                raise
            except Exception as exc:  # the engine raises many types; all are a failed update
                raise PolicyError(f"vLLM weight update failed: {exc}") from exc
            self.version = version

    def load_adapter(self, adapter: Adapter, version: int) -> None:
        """Sample with `adapter` from now on (the module doc); the base weights stay as loaded."""
        from vllm.lora.request import LoRARequest

        from trialground.policy.adapters import write_adapter

        rank, most = int(adapter.config.get("r", 0)), self.config.vllm_max_lora_rank
        if rank > most:
            raise PolicyError(
                f"the adapter's rank {rank} is over policy.vllm_max_lora_rank {most}", kind="config"
            )
        lora_id = version + 1  # vLLM's ids are > 0
        path = self._scratch / f"lora-v{version:08d}"
        if path.exists():
            shutil.rmtree(path)
        write_adapter(adapter, path)
        with self._lock:
            self._lora = LoRARequest(f"trialground-lora-v{version}", lora_id, str(path))
            self._lora_ids.append(lora_id)
            while len(self._lora_ids) > 2:
                old = self._lora_ids.pop(0)
                with contextlib.suppress(Exception):  # never loaded (no generation used it): nothing to free
                    self.llm.llm_engine.remove_lora(old)
                shutil.rmtree(self._scratch / f"lora-v{old - 1:08d}", ignore_errors=True)
            self.version = version

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)
