"""The agentic recipe end to end: the bundled agent policy in real tool episodes, real sandboxes, updates.

A few steps of `examples/agent.yaml`: episodes are multi-turn, rewards vary within groups (so there is a
gradient), the parameters move, the shaping terms and the pool are in the metrics, and the k samples of a
task start from byte-identical workspaces.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trialground.envs.toolcalls import ToolCall, parse_tool_calls
from trialground.envs.tools.registry import validate_call
from trialground.orchestrator.run_config import load_config

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "agent.yaml"
SMALL = [
    "loop.steps=2",
    "loop.eval_interval=0",
    "loop.batch_tasks=4",
    "loop.samples_per_task=6",
    "tasks.num_train=60",
    "tasks.num_eval=6",
]

pytestmark = pytest.mark.slow


def test_a_few_agent_steps_learn_from_multi_turn_episodes(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run
    from trialground.orchestrator.wiring import build

    cfg = load_config(AGENT, [*SMALL, f"output_dir={tmp_path}", "name=agent"])
    before = {k: v.clone() for k, v in build(cfg, None, train=False).policy.model.state_dict().items()}
    summary = asyncio.run(run(cfg))
    run_dir = Path(summary.run_dir)
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [m for m in metrics if m.get("train/loss") is not None]
    assert len(steps) == 2
    for m in steps:
        assert m["rollout/turns_mean"] >= 2.0
        assert "reward/process_mean" in m and "reward/redundant_actions_mean" in m
        assert m["pool/created"] > 0
    assert max(m["reward/std"] for m in steps) > 0  # some group has a gradient
    tables = [pq.read_table(run_dir / "trajectories" / f"step_{s}.parquet") for s in (1, 2)]
    rows = [r for table in tables for r in table.to_pylist()]
    assert all(r["error_kind"] is None for r in rows), [r["error_message"] for r in rows if r["error_kind"]]
    by_group: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        by_group[r["group_id"]].add(r["workspace_digest"])
    assert all(len(d) == 1 and None not in d for d in by_group.values())  # identical starting workspaces
    state = torch.load(run_dir / "checkpoints" / "step_2" / "model.pt", weights_only=True)
    assert max(float((state[k] - v).abs().max()) for k, v in before.items()) > 0


def test_the_agent_policy_calls_tools_the_environment_understands() -> None:
    """Greedy first turns of the bundled agent policy on held-out prompts parse as valid tool calls."""
    from trialground.families.agent.source import agent_tasks
    from trialground.orchestrator.wiring import build
    from trialground.rollout.chat import ChatRenderer

    cfg = load_config(AGENT, ["tasks.num_train=1", "tasks.num_eval=1"])
    c = build(cfg, None, train=False)
    renderer = ChatRenderer(c.policy.tokenizer)
    tasks = agent_tasks(12, seed=31, split="eval")
    from trialground.envs.tool_env import ToolEnv

    async def first_texts() -> list[str]:
        prompts = []
        for t in tasks:
            env = ToolEnv(c.grader, cfg.env, cfg.sandbox)
            prompts.append(renderer.prompt_ids([{"role": "user", "content": (await env.reset(t)).text}]))
            await env.close()
        gens = await c.policy.generate(prompts, cfg.policy.eval_sampling)
        await c.close()
        return [g.text for g in gens]

    texts = asyncio.run(first_texts())
    calls = [parse_tool_calls(t, cfg.env.tool_format) for t in texts]
    assert all(len(cs) == 1 and isinstance(cs[0], ToolCall) for cs in calls), texts
    assert all(validate_call(cs[0].name, cs[0].arguments) is None for cs in calls), texts  # type: ignore[union-attr]
