"""Long-context tasks: the needed facts are scattered and far beyond an observation; real episodes over
them are cut by the observation and context budgets, and the run report's Context section shows it."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from trialground.families.longctx.source import MIN_WORKSPACE_CHARS, Instance, longctx_instances
from trialground.tasks.model import Task
from trialground.tasks.sources import load_source


def test_tasks_are_deterministic_split_and_their_facts_scattered() -> None:
    train = load_source("longctx", n=6, seed=3)
    assert [t.id for t in train] == [t.id for t in load_source("longctx", n=6, seed=3)]
    assert not {t.id for t in train} & {t.id for t in load_source("longctx", n=3, seed=3, split="eval")}
    by_family: dict[str, list[Task]] = {}
    for t in train:
        by_family.setdefault(str(t.metadata["family"]), []).append(t)
        assert sum(len(text) for text in t.files.values()) >= MIN_WORKSPACE_CHARS  # far beyond any context
        assert t.reference is not None and t.reference not in t.prompt
    assert set(by_family) == {"longctx:find", "longctx:log", "longctx:doc"}
    for t in by_family["longctx:find"]:
        setting, service = re.search(r"what is (\w+) of the (\w+) service", t.prompt).groups()  # type: ignore[union-attr]
        homes = {
            p: m.group(1)
            for p, text in t.files.items()
            if (m := re.search(rf"^{setting} = tuning\.(\w+)$", text, re.M))
        }
        assert len({p.split("/")[1] for p in homes}) == 16 == len(homes)  # every service sets it, once
        (ref,) = [r for p, r in homes.items() if p.startswith(f"services/{service}/")]
        # the value is only behind the reference
        assert re.findall(rf"^{ref} = (\d+)$", t.files["services/common/tuning.py"], re.M) == [t.reference]
        assert not any(re.search(rf"{setting} = \d", text) for text in t.files.values())
    for t in by_family["longctx:log"]:
        endpoint, status = re.search(r"request to (\S+) failed with status (\d+)", t.prompt).groups()  # type: ignore[union-attr]
        log = t.files["logs/app.log"].splitlines()
        hits = [i for i, ln in enumerate(log) if f" {endpoint} status={status} " in ln]
        assert len(hits) == 1 and log[hits[0] + 1].startswith(f"  upstream={t.reference} ")
        assert sum(f"status={status} " in ln for ln in log) > 1  # decoys: the same status elsewhere
        assert sum(f"upstream={t.reference} " in ln for ln in log) >= 1
    for t in by_family["longctx:doc"]:
        text = t.files["docs/contract.md"]
        term = re.search(r"What is the (.+?) \(", t.prompt).group(1)  # type: ignore[union-attr]
        (clause,) = re.findall(rf"The {term} is set out in clause (\d+)\.", text)
        body = re.search(rf"^Clause {clause}\.\n(.*)$", text, re.M).group(1)  # type: ignore[union-attr]
        assert body.startswith(f"The amount agreed is {t.reference} ")
        assert text.count("The amount agreed is") == 6  # one per term: the reference decides


def test_the_expert_solves_every_family_with_search_and_paged_reads_only() -> None:
    from trialground.envs.config import EnvConfig
    from trialground.envs.tool_env import ToolEnv
    from trialground.envs.toolcalls import format_tool_call
    from trialground.sandbox.base import SandboxConfig
    from trialground.verify.grader import make_grader

    async def solve(inst: Instance) -> bool:
        grader = make_grader(SandboxConfig())
        env = ToolEnv(grader, EnvConfig(kind="tool", observation_budget_chars=1000), SandboxConfig())
        try:
            await env.reset(inst.task)
            for name, args in inst.expert:
                assert name in ("search", "read_lines", "submit")
                obs = await env.step(format_tool_call(name, args))
            assert obs.done and obs.end is not None and obs.end.graded is not None
            return obs.end.graded.verdict.passed
        finally:
            await env.close()
            await grader.close()

    instances = longctx_instances(6, seed=4, split="eval")
    assert [asyncio.run(solve(i)) for i in instances] == [True] * 6


def test_each_family_shortcut_reads_what_it_acts_on_and_is_graded_on_its_answer() -> None:
    """The shortcut (`--shortcut` pre-training traces) is a real episode: every call acts on what the
    previous observation showed (the first hit's line, its reference, the clause number), and its answer
    is graded like any other (wrong unless by chance right)."""
    from trialground.envs.config import EnvConfig
    from trialground.envs.tool_env import ToolEnv
    from trialground.envs.toolcalls import format_tool_call
    from trialground.sandbox.base import SandboxConfig
    from trialground.verify.grader import make_grader

    async def play(inst: Instance) -> tuple[list[str], bool]:
        grader = make_grader(SandboxConfig())
        env = ToolEnv(grader, EnvConfig(kind="tool", observation_budget_chars=1000), SandboxConfig())
        seen: list[str] = []
        try:
            await env.reset(inst.task)
            for name, args in inst.shortcut:
                obs = await env.step(format_tool_call(name, args))
                seen.append(obs.text)
            assert obs.done and obs.end is not None and obs.end.graded is not None
            return seen, obs.end.graded.verdict.passed
        finally:
            await env.close()
            await grader.close()

    instances = longctx_instances(6, seed=4, split="eval")
    wrong = 0
    for inst in instances:
        seen, passed = asyncio.run(play(inst))
        answer = inst.shortcut[-1][1]["answer"]
        assert passed == (answer == inst.task.reference)
        wrong += not passed
        first_hit = seen[0].splitlines()[0]
        if inst.family == "find":
            ref = inst.shortcut[1][1]["pattern"].removesuffix(" =")
            assert first_hit.endswith(f"= tuning.{ref}")
            assert f"{ref} = {answer}" in seen[1]
        elif inst.family == "log":
            start = inst.shortcut[1][1]["start"]
            assert first_hit.startswith(f"logs/app.log:{start}:")
            assert f"upstream={answer} " in seen[1]
        else:
            assert first_hit.endswith(f"is set out in clause {answer}.")
    assert wrong >= 4  # a shortcut, not a solution


@pytest.mark.slow
def test_episodes_over_them_hit_the_budgets_and_the_report_shows_it(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="uses the tiny tokenizer ([train] extra)")
    from trialground.envs.config import EnvConfig
    from trialground.envs.tool_env import ToolEnv
    from trialground.envs.toolcalls import format_tool_call
    from trialground.monitor.report import write_report
    from trialground.policy.backends.scripted.scripted import ScriptedPolicy
    from trialground.policy.base import SamplingParams
    from trialground.policy.tiny import tiny_model_dir
    from trialground.rollout.agent import rollout
    from trialground.rollout.context_stats import context_metrics
    from trialground.rollout.scoring import score
    from trialground.sandbox.base import SandboxConfig
    from trialground.verify.config import RewardConfig
    from trialground.verify.grader import make_grader
    from trialground.verify.reward.rubric import Rubric

    if not (tiny_model_dir() / "config.json").is_file():
        pytest.skip("the bundled tiny model is not built")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir()))
    task = next(t for t in load_source("longctx:log", n=3, seed=1))
    endpoint, status = re.search(r"request to (\S+) failed with status (\d+)", task.prompt).groups()  # type: ignore[union-attr]
    script = [
        format_tool_call("bash", {"command": "cat logs/app.log"}),
        format_tool_call("bash", {"command": f"grep ' {endpoint} status={status} ' logs/app.log"}),
        format_tool_call("submit", {"answer": str(task.reference)}),
    ]

    async def episode(budget: int):  # type: ignore[no-untyped-def]
        grader = make_grader(SandboxConfig())
        env = ToolEnv(grader, EnvConfig(kind="tool", observation_budget_chars=1000), SandboxConfig())
        try:
            return await rollout(ScriptedPolicy(script, tokenizer=tokenizer), env, task,
                                 params=SamplingParams(max_new_tokens=200), group_id="g", sample_index=0,
                                 max_context_tokens=budget)  # fmt: skip
        finally:
            await env.close()
            await grader.close()

    rubric = Rubric.from_config(RewardConfig())  # the loop scores every trajectory (a context-budget end: 0)
    roomy, tight = (score(rubric, asyncio.run(episode(b))) for b in (8192, 1000))
    assert roomy.error is None and roomy.reward is not None and roomy.reward.outcome == 1.0
    assert (
        not roomy.truncated and tight.truncated and tight.reward is not None and tight.reward.outcome == 0.0
    )
    metrics = context_metrics([roomy, tight], {task.id: task.domain})
    assert metrics["context/truncation_rate"] == 0.5 == metrics["context/truncation_rate/longctx"]
    assert metrics["context/observation_cut_rate"] > 0  # the whole-log cat was cut to the budget
    assert metrics["context/tokens_max"] > metrics["context/tokens_mean"] > 0
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, **metrics}) + "\n")
    html = write_report(run).read_text()
    assert 'id="context"' in html and "Tokens per episode" in html and "truncation_rate" in html
