"""The rubric's grade parts (outcome gate, process, efficiency, hack action) against hand-computed values."""

from __future__ import annotations

import pytest

from trialground.verify.config import RewardConfig
from trialground.verify.reward.model import Reward
from trialground.verify.reward.rubric import Facts, Rubric
from trialground.verify.reward.shaping import count_redundant, process_stats
from trialground.verify.verdict import Action, Flag, Graded, Verdict


def compute_reward(verdict: Verdict, actions: list[Action] | tuple[()], config: RewardConfig) -> Reward:
    return Rubric.from_config(config).score(Facts(graded=Graded(verdict=verdict), actions=tuple(actions)))


def act(
    tool: str, arg: str = "x", ok: bool = True, changed: bool | None = None, target: str | None = None
) -> Action:
    return Action(tool=tool, argument_digest=arg, ok=ok, changed_workspace=changed, target=target)


PASSED = Verdict(passed=True, score=1.0)
FAILED = Verdict(passed=False, score=0.5)


def test_single_turn_correct_answer_earns_exactly_one() -> None:
    r = compute_reward(PASSED, (), RewardConfig())
    assert r.outcome == 1.0
    assert r.total == 1.0


def test_failed_outcome_earns_zero_whatever_the_process() -> None:
    actions = [act("edit_file", "a", changed=True, target="s.py"), act("run_tests", "t")]
    r = compute_reward(FAILED, actions, RewardConfig())
    assert r.total == 0.0
    assert r.component("process") is not None  # still logged


def test_hand_computed_episode() -> None:
    actions = [
        act("read_file", "r1", target="s.py"),  # first read
        act("read_file", "r1", target="s.py"),  # re-read, unchanged: redundant (1)
        act("bash", "ls"),
        act("bash", "ls"),  # identical, nothing changed: redundant (2)
        act("edit_file", "e1", changed=True, target="s.py"),
        act("edit_file", "e2", changed=False, target="s.py"),  # no-op edit: redundant (3)
        act("bash", "bad", ok=False),  # tool error
        act("run_tests", "t"),  # after the last change: tests part = 1
        act("submit", "s"),
    ]
    cfg = RewardConfig()
    stats = process_stats(actions, cfg)
    assert stats.redundant == 3
    assert stats.tool_errors == 1
    assert stats.tests_score == 1.0
    # process = 0.5*1 + 0.25/(1 + 1 failed call) + 0.25/(1 + 3 redundant) = 0.5 + 0.125 + 0.0625
    assert stats.process_score == pytest.approx(0.5 + 0.25 / 2 + 0.25 / 4)
    r = compute_reward(PASSED, actions, cfg)
    assert r.total == pytest.approx(1.0 + 0.2 * (0.5 + 0.25 / 2 + 0.25 / 4) - 0.01 * 3)


def test_padding_with_harmless_distinct_calls_never_raises_the_reward() -> None:
    """Twenty distinct calls that change nothing must not dilute a failed call or a redundant one."""
    solved = [
        act("edit_file", "e1", changed=True, target="s.py"),
        act("bash", "bad", ok=False),
        act("read_file", "r1", target="s.py"),
        act("read_file", "r1", target="s.py"),  # redundant
        act("run_tests", "t"),
        act("submit", "s"),
    ]
    padding = [act("bash", f"echo {i}") for i in range(20)]
    cfg = RewardConfig()
    plain = compute_reward(PASSED, solved, cfg).total
    padded = compute_reward(PASSED, solved[:-1] + padding + solved[-1:], cfg).total
    assert padded <= plain


def test_tests_before_later_edit_earn_half() -> None:
    actions = [act("run_tests", "t"), act("edit_file", "e", changed=True), act("submit", "s")]
    assert process_stats(actions, RewardConfig()).tests_score == 0.5
    assert process_stats([act("edit_file", "e", changed=True)], RewardConfig()).tests_score == 0.0


def test_repeat_after_a_change_is_not_redundant() -> None:
    actions = [act("bash", "pytest"), act("edit_file", "e", changed=True), act("bash", "pytest")]
    assert count_redundant(actions, RewardConfig()) == 0
    reads = [act("read_file", "r", target="a"), act("write_file", "w", changed=True, target="a"),
             act("read_file", "r", target="a")]  # fmt: skip
    assert count_redundant(reads, RewardConfig()) == 0


def test_coefficients_are_configurable_and_weight_zero_is_logged_only() -> None:
    actions = [act("bash", "ls"), act("bash", "ls")]
    cfg = RewardConfig(process_weight=0.0, redundancy_weight=0.5)
    r = compute_reward(PASSED, actions, cfg)
    assert r.total == pytest.approx(1.0 - 0.5)
    assert r.component("process").weight == 0.0
    assert r.component("tool_errors").weight == 0.0


@pytest.mark.parametrize(
    ("action", "total", "dropped"), [("zero", 0.0, False), ("penalty", -0.7, False), ("drop", 0.0, True)]
)
def test_hack_actions(action: str, total: float, dropped: bool) -> None:
    verdict = Verdict(passed=True, score=1.0, flags=(Flag(name="early_exit", evidence="sys.exit"),))
    r = compute_reward(verdict, (), RewardConfig(hack_action=action, hack_penalty=0.7))
    assert r.outcome == 0.0
    assert r.total == pytest.approx(total)
    assert r.dropped is dropped
    assert r.flags[0].name == "early_exit"


def test_warn_flags_do_not_gate() -> None:
    verdict = Verdict(
        passed=True, score=1.0, flags=(Flag(name="always_equal", evidence="x", severity="warn"),)
    )
    assert compute_reward(verdict, (), RewardConfig()).total == 1.0


def test_total_is_a_pure_function_of_the_fields() -> None:
    r = compute_reward(PASSED, [act("run_tests", "t"), act("submit", "s")], RewardConfig())
    again = Reward.model_validate(r.model_dump(exclude={"total"}))
    assert again.total == r.total
    assert r.total == pytest.approx(r.outcome + sum(c.weight * c.value for c in r.components))
