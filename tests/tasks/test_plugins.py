"""A user adds a task source and a verifier kind from their own module, by dotted path, and a real
Grader grades the plugin's tasks; bad plugins and bad params fail with a message naming what is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from reward_helpers import grade_and_score

from trialground.errors import TaskError
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.sources import load_source
from trialground.verify.grader import make_grader

sys.path.insert(0, str(Path(__file__).parent / "plugin_fixture"))


def test_plugin_source_by_dotted_path_with_its_own_verifier() -> None:
    tasks = load_source("tg_user_plugin:WORDS:French", n=3, seed=1)
    assert len(tasks) == 3 and all("in French" in t.prompt for t in tasks)
    assert [t.verifier.params["length"] for t in tasks] == [4, 5, 6]
    assert load_source("words", n=2) == load_source("tg_user_plugin:WORDS", n=2)  # registered by name now
    assert len(load_source("words")) == 4  # its default_n


async def test_the_grader_dispatches_to_the_plugin_kind() -> None:
    task = load_source("tg_user_plugin:WORDS", n=1, seed=0)[0]  # length 3
    grader = make_grader(SandboxConfig())
    try:
        good, reward = await grade_and_score(grader, task, "cat")
        bad, _ = await grade_and_score(grader, task, "horse")
    finally:
        await grader.close()
    assert good.passed and reward.total == 1.0 and good.detail == "3 chars"
    assert not bad.passed


def test_bad_plugins_and_params_are_clear_errors() -> None:
    with pytest.raises(TaskError, match="is a function, not a TaskSource"):
        load_source("tg_user_plugin:_words")
    with pytest.raises(TaskError, match="cannot import task source plugin tg_user_plugin:NOPE"):
        load_source("tg_user_plugin:NOPE")
    with pytest.raises(ValidationError, match="length: Input should be greater than or equal to 0"):
        VerifierSpec(kind="tg_user_plugin:LENGTH", params={"length": -1})
    with pytest.raises(ValidationError, match="unknown verifier kind 'telepathy'"):
        VerifierSpec(kind="telepathy")
    with pytest.raises(
        ValidationError,
        match="verifier 'exact' params: answer: Field required; anwser: Extra inputs are not permitted",
    ):
        Task(domain="qa", prompt="q", verifier=VerifierSpec(kind="exact", params={"anwser": "4"}))
