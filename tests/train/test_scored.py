"""The one reward seam end to end: rubric -> scored records -> trainer. `hack_action: drop` takes a
hacked trajectory out of its group's baseline and out of the loss; `zero` keeps it as a 0 in both."""

from __future__ import annotations

import pytest
import torch
from train_helpers import PAD, sequence_logprobs, tiny_llama

from trialground.envs.base import EpisodeEnd
from trialground.rollout.scoring import score
from trialground.rollout.trajectory import CONTEXT_BUDGET, Trajectory, Turn
from trialground.train.advantages import score_groups
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer
from trialground.verify.config import RewardConfig
from trialground.verify.reward.rubric import Facts, Rubric
from trialground.verify.verdict import Flag, Graded, Verdict

PASS = Verdict(passed=True, score=1.0)
FAIL = Verdict(passed=False, score=0.0)
HACK = Verdict(passed=True, score=1.0, flags=(Flag(name="early_exit", evidence="sys.exit(0) in f"),))


def _episode(
    model: torch.nn.Module, rubric: Rubric, verdict: Verdict, completion: list[int], i: int
) -> Trajectory:
    prompt = [1, 2, 3]
    lp = sequence_logprobs(model, prompt + completion, len(prompt))  # type: ignore[arg-type]
    return Trajectory(
        task_id="t",
        group_id="g",
        sample_index=i,
        policy_version=0,
        turns=(
            Turn(role="prompt", token_ids=tuple(prompt)),
            Turn(role="policy", token_ids=tuple(completion), logprobs=tuple(lp)),
        ),
        reward=rubric.score(Facts(graded=Graded(verdict=verdict))),
    )


def _group(model: torch.nn.Module, action: str) -> list[Trajectory]:
    rubric = Rubric.from_config(RewardConfig(hack_action=action))  # type: ignore[arg-type]
    specs = [(PASS, [4, 5, 6]), (FAIL, [7, 8]), (HACK, [9, 10, 11, 12]), (FAIL, [13])]
    return [_episode(model, rubric, v, c, i) for i, (v, c) in enumerate(specs)]


def _step(records: list, seed: int = 0) -> torch.Tensor:  # type: ignore[type-arg]
    model = tiny_llama(seed)
    Trainer(model, TrainerConfig(lr=1e-2, loss_agg="sequence"), PAD).step(records)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_drop_removes_the_hacked_trajectory_from_baseline_and_loss() -> None:
    model = tiny_llama(0)
    cfg = TrainerConfig(algorithm="dr_grpo")
    dropped = score_groups([_group(model, "drop")], cfg)
    zeroed = score_groups([_group(model, "zero")], cfg)
    # drop: baseline over the three others (1, 0, 0): mean 1/3; the hacked one has no advantage
    assert [r.excluded for r in dropped] == [None, None, "dropped", None]
    assert [r.advantage for r in dropped][:2] == pytest.approx([2 / 3, -1 / 3]) and dropped[
        2
    ].advantage is None
    # zero: the hacked one is a 0 in the baseline (mean 1/4) and is trained towards lower probability
    assert [r.advantage for r in zeroed] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert all(r.trainable for r in zeroed)
    # the loss: training on the drop batch equals training on the three others alone, and differs from zero
    others = [r for r in dropped if r.trainable]
    assert torch.equal(_step(dropped), _step(others))
    assert not torch.allclose(_step(dropped), _step(zeroed))


def test_finish_pays_truncation_and_overlong_through_the_seam() -> None:
    rubric = Rubric.from_config(RewardConfig(overlong_penalty=0.5, truncation_penalty=0.25))
    prompt = Turn(role="prompt", token_ids=(1, 2))

    def t(i: int, n: int, verdict: Verdict | None) -> Trajectory:
        return Trajectory(
            task_id="t",
            group_id="g",
            sample_index=i,
            policy_version=0,
            turns=(prompt, Turn(role="policy", token_ids=tuple(range(3, 3 + n)), logprobs=(0.0,) * n)),
            end=None if verdict is None else EpisodeEnd(finish_reason="eos", graded=Graded(verdict=verdict)),
            finish_reason="eos" if verdict is not None else CONTEXT_BUDGET,
            truncated=verdict is None,
        )

    long_pass, short_pass, cut = (
        score(rubric, x, budget=4) for x in (t(0, 4, PASS), t(1, 1, PASS), t(2, 4, None))
    )
    assert long_pass.reward is not None and long_pass.reward.total == 0.5  # 1 - 0.5 overlong
    assert short_pass.reward is not None and short_pass.reward.total == 1.0
    assert cut.reward is not None and cut.reward.outcome == 0.0
    assert cut.reward.component("context_truncated") is not None
    assert cut.reward.total == -0.25 - 0.5  # the truncation penalty and the (ungated) overlong penalty
    # without a budget (evaluation) only the truncation part applies
    assert score(rubric, t(0, 4, PASS)).reward == rubric.score(
        Facts(graded=Graded(verdict=PASS), policy_tokens=4)
    )
    scored = score_groups([[long_pass, short_pass, cut]], TrainerConfig(algorithm="dr_grpo"))
    assert [r.reward for r in scored] == [0.5, 1.0, -0.75]
    assert all(r.trainable for r in scored)


def test_rubric_names_every_part_once() -> None:
    names = Rubric.from_config(RewardConfig()).names
    assert names == (
        "outcome",
        "process",
        "efficiency",
        "judge",
        "hack_action",
        "infra",
        "truncation",
        "overlong",
    )
