"""The vLLM backend on a GPU: generation with logprobs and a pushed weight update."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA GPU"),
]


async def test_vllm_generates_and_takes_weights() -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'trialground[vllm]')")
    from trialground.policy.base import SamplingParams
    from trialground.policy.config import PolicyConfig
    from trialground.policy.hf import HFPolicy
    from trialground.policy.vllm import VLLMPolicy

    config = PolicyConfig(backend="vllm", model="tiny", gpu_memory_utilization=0.2)
    policy = VLLMPolicy(config)
    hf = HFPolicy(PolicyConfig(model="tiny"))
    prompt = hf.encode_chat([{"role": "user", "content": "Write f(x) for an integer x: add 3."}])
    (g,) = await policy.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=30, seed=0))
    assert len(g.token_ids) == len(g.logprobs) > 0
    again = hf.score(prompt, g.token_ids, temperature=1.0)
    assert again == pytest.approx(list(g.logprobs), abs=1e-2)
    state = {k: v * 0 for k, v in hf.model.state_dict().items() if k.endswith("down_proj.weight")}
    policy.load_weights(state, version=2)
    (h,) = await policy.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=30))
    assert h.version == 2
