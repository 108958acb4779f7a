"""The trialground extras a run needs: what its install line (`pip install 'trialground[...]'`) must name.

Collected from what the config's parts declare (the policy, pool and env-kind plugins' requirements, the
task sources' packages, the metric sinks, a packaged or GGUF model, LoRA), not from what happens to be
installed, so a machine with everything installed still checks an example's install line
(tests/test_examples.py).
"""

from __future__ import annotations

from trialground.orchestrator.run_config import RunConfig
from trialground.plugin import Requirement

# Extras that install only on a machine with an accelerator (vLLM builds against CUDA): a CPU machine
# validates a config that needs one up to that extra's line
GPU_EXTRAS = frozenset({"vllm"})


def needed_extras(config: RunConfig, *, train: bool = True) -> list[str]:
    """The extras a run of `config` (training, or evaluation when not `train`) imports, sorted."""
    from trialground.envs.kinds import KINDS as ENV_KINDS
    from trialground.orchestrator.preflight import SINK_PACKAGES
    from trialground.policy.backends import BACKENDS as POLICY_BACKENDS
    from trialground.policy.packaged import MODELS, is_packaged
    from trialground.pool.backends import BACKENDS as POOL_BACKENDS
    from trialground.tasks.sources import lookup

    out = {"train" if train else "run"}
    requires: list[Requirement] = [
        *POLICY_BACKENDS.lookup(config.policy.backend).requires,
        *ENV_KINDS.lookup(config.env.kind).requires,
        *POOL_BACKENDS.lookup(config.pool_config.backend).requires,
    ]
    out |= {r.extra for r in requires if r.extra}
    for source in (*config.tasks.sources, *config.tasks.eval_sources):
        found = lookup(source.source)
        if found is not None:
            out |= {extra for _module, extra in found[0].requires}
    out |= {SINK_PACKAGES[sink][1] for sink in config.monitor.sinks if SINK_PACKAGES[sink][1]}
    if is_packaged(config.policy.model):
        out.add(MODELS.lookup(config.policy.model).extra)
    elif config.policy.model.endswith(".gguf"):
        from trialground.policy.gguf import GGUF_EXTRA

        out.add(GGUF_EXTRA)
    return sorted(out)
