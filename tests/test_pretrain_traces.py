"""The pre-training traces of `scripts/pretrain_agent.py`, played in a real sandbox: a `--revise` trace whose
decisive call is the answer cannot be revised, so `--answer-revise` says whether it submits a wrong answer
(how the bundled policies were made) or is played right."""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_helpers import load_script

from trialground.envs.tool_env import ToolEnv
from trialground.families.longctx.source import longctx_instances
from trialground.orchestrator.run_config import load_config
from trialground.verify.grader import make_grader

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    return load_script("scripts/pretrain_agent.py")


async def _play(
    script: ModuleType, answer_revise: str, shortcut: float = 0.0, family: str = "doc"
) -> tuple[dict[str, Any], str]:
    config = load_config(ROOT / "examples" / "longctx_cpu.yaml")
    inst = longctx_instances(1, seed=3, split="train", families=family)[0]
    args = argparse.Namespace(
        revise=1.0, noise=0.0, redundant=0.0, answer_revise=answer_revise, shortcut=shortcut
    )
    grader = make_grader(config.sandbox, config.reward)
    env = ToolEnv(grader, config.env, config.sandbox)
    try:
        trace = await script.play(inst, env, random.Random(0), args)
    finally:
        await env.close()
        await grader.close()
    return trace, inst.task.reference or ""


def test_a_revised_answer_is_wrong_by_default_and_right_when_clean() -> None:
    script = _script()
    wrong, answer = asyncio.run(_play(script, "wrong"))
    submitted = wrong["turns"][-1][0]
    assert not wrong["solved"] and '"submit"' in submitted and f'"{answer}"' not in submitted
    clean, _ = asyncio.run(_play(script, "clean"))
    assert clean["solved"] and f'"{answer}"' in clean["turns"][-1][0]
    assert [t[0] for t in clean["turns"][:-1]] == [t[0] for t in wrong["turns"][:-1]]


@pytest.mark.parametrize("family", ["find", "log", "doc"])
def test_a_shortcut_trace_plays_the_family_shortcut_as_it_is(family: str) -> None:
    """`--shortcut`: the trace plays the family's shortcut (no revision, no noise on top) and is marked."""
    script = _script()
    trace, answer = asyncio.run(_play(script, "clean", shortcut=1.0, family=family))
    inst = longctx_instances(1, seed=3, split="train", families=family)[0]
    assert trace["shortcut"] is True
    assert [t[0] for t in trace["turns"]] == [
        script.format_tool_call(n, a, "json_tags") for n, a in inst.shortcut
    ]
    assert trace["solved"] == (inst.shortcut[-1][1]["answer"] == answer)
    plain, _ = asyncio.run(_play(script, "clean", shortcut=0.0, family=family))
    assert "shortcut" not in plain and plain["solved"]
