"""trialground.integrations.trl against the installed TRL: real sandboxes, real GRPOTrainer steps."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import pytest
from reward_helpers import error_of, finish_reason_of

pytest.importorskip("trl")


from trialground.integrations.trl import (
    TOOL_NAMES,
    TrialgroundToolEnv,
    bundled_tokenizer,
    environment_factory,
    reward_function,
)
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source


def _fenced(code: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"Here it is:\n```python\n{code}```"}]


def test_reward_grades_each_completion_in_a_sandbox_and_logs_components() -> None:
    tasks = load_source("codegen", n=2)
    logged: dict[str, float] = {}
    with reward_function(tasks) as reward:
        values = reward(
            prompts=[None] * 4,
            completions=[
                _fenced(tasks[0].reference or ""),
                _fenced("def f(xs):\n    return []\n"),
                _fenced(tasks[1].reference or ""),
                # a hack: exit before the checks can fail
                _fenced("import os\ndef f(*a):\n    os._exit(0)\n"),
            ],
            task_id=[tasks[0].id, tasks[0].id, tasks[1].id, tasks[1].id],
            log_metric=logged.__setitem__,
        )
        last = reward.last
    assert values[0] is not None and values[0] >= 1.0
    assert values[1] == 0.0
    assert values[2] is not None and values[2] >= 1.0
    assert values[3] == 0.0
    assert last[3].verdict is not None and not last[3].verdict.passed
    assert logged["trialground/graded"] == 4.0
    assert logged["trialground/dropped"] == 0.0
    assert logged["trialground/pass_rate"] == 0.5
    assert "trialground/component/test_pass_fraction" in logged


def test_reward_is_none_when_the_sandbox_cannot_run() -> None:
    tasks = load_source("codegen", n=1)
    with reward_function(tasks, sandbox=SandboxConfig(rootfs="/nonexistent-trialground-root")) as reward:
        values = reward(prompts=[None], completions=[tasks[0].reference], task_id=[tasks[0].id])
        assert values == [None]
        error = reward.last[0].error
        assert error is not None and error.boundary == "sandbox"


def test_reward_rejects_rows_without_a_known_task_id() -> None:
    tasks = load_source("codegen", n=1)
    with reward_function(tasks) as reward:
        with pytest.raises(ValueError, match="task_id"):
            reward(prompts=[None], completions=["x"])
        with pytest.raises(KeyError, match="not-a-task"):
            reward(prompts=[None], completions=["x"], task_id=["not-a-task"])


def test_environment_exposes_exactly_the_tool_env_tools() -> None:
    # the same member walk TRL 1.16 does to find tool methods
    members = {n for n, _ in inspect.getmembers(TrialgroundToolEnv, predicate=inspect.isfunction)}
    tools = {n for n in members if not n.startswith("_")} - {"reset", "get_reward"}
    assert tools == set(TOOL_NAMES)
    assert {"reset", "get_reward"} <= members


def test_environment_episode_graded_by_get_reward() -> None:
    task = load_source("agent:repair", n=1)[0]
    with environment_factory([task]) as factory:
        solver, idle = factory(), factory()
        first = solver.reset(prompt=[{"role": "user", "content": ""}], task_id=task.id)
        assert task.prompt in first and "run_tests()" in first
        assert "FAILED" in solver.run_tests()
        assert "wrote" in solver.write_file("solution.py", task.reference or "")
        assert "1 passed" in solver.run_tests()
        assert "graded: passed" in solver.submit()
        assert solver.bash("ls") == "the episode is over"
        reward = solver.get_reward()
        assert reward is not None and reward > 1.0  # 1 + process shaping (tests run before submit)
        assert solver.get_reward() == reward  # asking again neither regrades nor records twice
        idle.reset(task_id=task.id)
        assert idle.get_reward() == 0.0  # stopped without submitting: the broken workspace is graded
        assert finish_reason_of(factory.finished[-1]) == "ended"
        assert len(factory.finished) == 2
        solver.reset(task_id=task.id)  # a reused instance starts over in a fresh sandbox
        assert "FAILED" in solver.run_tests()


def _grpo_args(out: Path, **kw: Any) -> Any:
    from trl import GRPOConfig

    base: dict[str, Any] = dict(
        output_dir=str(out),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        gradient_accumulation_steps=1,
        learning_rate=1e-4,
        beta=0.0,
        temperature=1.0,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    base.update(kw)
    return GRPOConfig(**base)


@pytest.mark.slow
def test_grpo_trains_two_steps_with_the_reward_function(tmp_path: Path, one_thread: None) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM
    from trl import GRPOTrainer

    from trialground.policy.tiny import tiny_model_dir

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    model = LlamaForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    with reward_function("codegen", n=4) as reward:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=_grpo_args(tmp_path, max_completion_length=32),
            train_dataset=reward.dataset(),
            processing_class=tokenizer,
        )
        trainer.train()
        graded = reward.last
    logs = [entry for entry in trainer.state.log_history if "rewards/trialground/mean" in entry]
    assert len(logs) == 2, trainer.state.log_history
    assert all("trialground/pass_rate" in entry for entry in logs)  # logged through log_metric
    assert trainer.state.global_step == 2
    # TRL trained on the values the sandboxes produced: its logged mean is the mean of our last batch
    assert len(graded) == 4 and all(g.verdict is not None and g.value is not None for g in graded)
    mean = sum(g.value or 0.0 for g in graded) / len(graded)
    assert logs[-1]["rewards/trialground/mean"] == pytest.approx(mean)


@pytest.mark.slow
def test_grpo_trains_two_steps_with_the_environment_factory(tmp_path: Path, one_thread: None) -> None:
    import torch
    from transformers import LlamaForCausalLM
    from trl import GRPOTrainer

    from trialground.policy.tiny import AGENT_NAME, tiny_model_dir

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = bundled_tokenizer(AGENT_NAME)
    model = LlamaForCausalLM.from_pretrained(tiny_model_dir(AGENT_NAME), dtype=torch.float32)
    with environment_factory("agent:repair", n=2) as envs:
        trainer = GRPOTrainer(
            model=model,
            args=_grpo_args(tmp_path, max_completion_length=160, max_tool_calling_iterations=2),
            train_dataset=envs.dataset(),
            processing_class=tokenizer,
            environment_factory=envs,
        )
        trainer.train()
        finished = list(envs.finished)
    logs = [e for e in trainer.state.log_history if "rewards/TrialgroundToolEnv/mean" in e]
    assert len(logs) == 2, trainer.state.log_history
    assert len(finished) == 8  # get_reward graded every rollout of both steps
    assert all(error_of(obs) is None for obs in finished)
    # the bundled agent calls tools: TRL parsed its calls and ran them in the sandboxes
    assert any(a.ok for obs in finished if obs.end for a in obs.end.actions), [o.end for o in finished]
    assert trainer.state.global_step == 2
    assert logs[-1]["tools/call_frequency"] > 0
