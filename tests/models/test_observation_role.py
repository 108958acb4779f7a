"""`policy.observation_role` reaches the episodes: the environment's answers are rendered as that role."""

from __future__ import annotations

from pathlib import Path

import pytest

from trialground.orchestrator.run_config import load_config

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("role", "marker"), [("user", "<|user|>"), ("tool", "<|tool|>")])
async def test_observation_role_sets_the_role_of_environment_turns(role: str, marker: str) -> None:
    from trialground.orchestrator.collect import collect
    from trialground.orchestrator.components import build

    overrides = ["tasks.num_train=4", "tasks.num_eval=2", f"policy.observation_role={role}"]
    cfg = load_config(ROOT / "examples" / "agent.yaml", overrides)
    c = build(cfg, None, train=False)
    try:
        groups = await collect(c, c.eval_tasks[:2], 1, cfg.policy.eval_sampling)
        decode = c.policy.tokenizer.decode
    finally:
        await c.close()
    env_turns = [t for g in groups for traj in g for t in traj.turns if t.role == "env"]
    assert env_turns, "the bundled agent made no tool call"
    for turn in env_turns:
        text = decode(list(turn.token_ids))
        assert marker in text and text.count("<|user|>") + text.count("<|tool|>") == 1, text


def test_a_bad_observation_role_is_a_config_error() -> None:
    from trialground.errors import ConfigError

    with pytest.raises(ConfigError, match=r"policy\.observation_role"):
        load_config(ROOT / "examples" / "agent.yaml", ["policy.observation_role=not a role"])
