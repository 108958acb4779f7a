"""The vLLM backends on a GPU: the in-process engine (generation with logprobs, a pushed weight update
through the worker extension) and, opt-in, the remote backend against a running `vllm serve`."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA GPU"),
]

TASK = [{"role": "user", "content": "Write f(x) for an integer x: add 3."}]


async def test_vllm_generates_and_takes_weights() -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'trialground[vllm]')")
    from trialground.policy.backends.hf.hf import HFPolicy
    from trialground.policy.backends.vllm.vllm import VLLMPolicy
    from trialground.policy.base import SamplingParams
    from trialground.policy.config import PolicyConfig

    config = PolicyConfig(backend="vllm", model="tiny", gpu_memory_utilization=0.2)
    policy = VLLMPolicy(config)
    hf = HFPolicy(PolicyConfig(model="tiny"))
    prompt = hf.encode_chat(TASK)
    (g,) = await policy.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=30, seed=0))
    assert len(g.token_ids) == len(g.logprobs) > 0
    again = hf.score(prompt, g.token_ids, temperature=1.0)
    assert again == pytest.approx(list(g.logprobs), abs=1e-2)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=30)
    (before,) = await policy.generate([prompt], greedy)
    state = {k: v * 0 for k, v in hf.model.state_dict().items() if k.endswith("down_proj.weight")}
    policy.load_weights(state, version=2)
    (h,) = await policy.generate([prompt], greedy)
    assert h.version == 2
    assert h.token_ids != before.token_ids  # the MLPs now add nothing: the pushed weights are in use


@pytest.mark.skipif(
    not os.environ.get("TRIALGROUND_TEST_VLLM_URL"),
    reason="set TRIALGROUND_TEST_VLLM_URL to a `vllm serve` of the tiny model (docs/serving.md flags)",
)
async def test_remote_backend_against_a_vllm_server() -> None:
    from trialground.policy.backends.hf.hf import HFPolicy
    from trialground.policy.backends.remote.remote import RemotePolicy
    from trialground.policy.base import SamplingParams
    from trialground.policy.config import PolicyConfig

    url = os.environ["TRIALGROUND_TEST_VLLM_URL"]
    remote = RemotePolicy(PolicyConfig(backend="remote", model="tiny", servers=(url,)))
    hf = HFPolicy(PolicyConfig(model="tiny"))
    prompt = hf.encode_chat(TASK)
    gens = await remote.generate([prompt] * 4, SamplingParams(temperature=1.0, max_new_tokens=30))
    for g in gens:
        assert len(g.token_ids) == len(g.logprobs) > 0
        assert hf.score(prompt, g.token_ids, temperature=1.0) == pytest.approx(list(g.logprobs), abs=1e-2)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=30)
    (before,) = await remote.generate([prompt], greedy)
    state = {k: v * 0 for k, v in hf.model.state_dict().items() if k.endswith("down_proj.weight")}
    remote.load_weights(state, 1)
    (after,) = await remote.generate([prompt], greedy)
    assert after.version == 1 and after.token_ids != before.token_ids
    remote.load_weights(hf.model.state_dict(), 2)  # leave the server as it was
    remote.close()
