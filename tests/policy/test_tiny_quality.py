"""The committed tiny model leaves RL room: held-out greedy pass@1 in [0.10, 0.60], real sandboxed grading."""

from __future__ import annotations

import pytest

from trialground.families.codegen.source import generate_codegen_tasks
from trialground.monitor.quality import measure_pass_rates
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.sandbox.base import SandboxConfig
from trialground.verify.grader import make_grader


@pytest.mark.slow
async def test_held_out_greedy_pass_at_1_is_between_10_and_60_percent(tiny: HFPolicy) -> None:
    tasks = generate_codegen_tasks(64, seed=0, split="eval")  # the quickstart's held-out set
    grader = make_grader(SandboxConfig())
    try:
        rates = await measure_pass_rates(tiny, tasks, grader, samples=0)
    finally:
        await grader.close()
    assert 0.10 <= rates.greedy_pass_at_1 <= 0.60, rates
