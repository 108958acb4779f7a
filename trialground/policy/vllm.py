"""vLLM as a policy: an in-process engine (GPU), with weights pushed from the trainer.

vLLM is imported when the policy is built, never at module import, so the package works without it.
Generation goes through `LLM.generate` with token-id prompts; each sampled token's logprob is requested
(`logprobs=0` returns the sampled token's own). vLLM versions that support `logprobs_mode` are asked for
"processed_logprobs" (after temperature and top-p), matching the hf policy's contract; older versions
return raw logprobs, which equal the processed ones only at temperature 1 with top_p 1.
`load_weights` pushes the trainer's tensors into the engine's model in place.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from trialground.errors import PolicyError
from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.tiny import BUNDLED, resolve_model_dir


class VLLMPolicy(Policy):
    def __init__(self, config: PolicyConfig) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise PolicyError("the vllm backend needs vLLM: pip install 'trialground[vllm]'") from exc
        self._vllm = vllm
        self.config = config
        model = str(resolve_model_dir(config.model)) if config.model in BUNDLED else config.model
        kwargs: dict[str, Any] = {
            "model": model,
            "dtype": config.dtype,
            "gpu_memory_utilization": config.gpu_memory_utilization,
            "max_model_len": config.max_context_tokens,
            "enable_prefix_caching": True,
        }
        try:
            self.llm = vllm.LLM(**kwargs, logprobs_mode="processed_logprobs")
        except TypeError:  # an older vLLM without logprobs_mode
            self.llm = vllm.LLM(**kwargs)
        self._tokenizer = self.llm.get_tokenizer()
        self.version = 0
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return await asyncio.to_thread(self._generate_sync, prompts, params)

    def _generate_sync(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        sp = self._vllm.SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            seed=params.seed,
            logprobs=0,
        )
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]
        with self._lock:
            try:
                outputs = self.llm.generate(inputs, sp, use_tqdm=False)
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
                    text=self._tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason=reason,
                    version=version,
                )
            )
        return gens

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Push trainer tensors (HF parameter names) into the engine's model in place."""
        items = [(name, tensor.detach()) for name, tensor in state_dict.items()]

        def push(model: Any) -> None:
            model.load_weights(weights=iter(items))

        with self._lock:
            try:
                if hasattr(self.llm, "apply_model"):
                    self.llm.apply_model(push)
                else:  # older vLLM: the single-process driver worker holds the model
                    push(self.llm.llm_engine.model_executor.driver_worker.model_runner.model)
                self.llm.reset_prefix_cache()  # cached KV of the old weights is stale
            except Exception as exc:
                raise PolicyError(f"vLLM weight update failed: {exc}") from exc
            self.version = version
