"""`reward.judge` in the run config: a local Hugging Face classifier or an OpenAI-compatible endpoint, built
into the run's grader; bad judge configs are clear errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from reward_helpers import grade_scored, step_metrics

from trialground.errors import ConfigError
from trialground.orchestrator.run_config import load_config
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader
from trialground.verify.judges.config import JudgeConfig, make_judge

ROOT = Path(__file__).resolve().parents[2]
TASK = Task(domain="qa", prompt="Say yes.", verifier=VerifierSpec(kind="exact", params={"answer": "yes"}))


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny, randomly initialised) sequence-classification model saved as a local directory."""
    pytest.importorskip("torch")
    from transformers import BertConfig, BertForSequenceClassification

    from trialground.policy.backends.scripted.scripted import load_tokenizer

    tokenizer = load_tokenizer()
    path = tmp_path_factory.mktemp("judge")
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=256, num_labels=2,
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


async def test_hf_classifier_judge_from_a_local_path_cross_checks(classifier_dir: Path) -> None:
    reward = RewardConfig(
        judge_sample_rate=1.0,
        judge=JudgeConfig(kind="hf_classifier", path=str(classifier_dir), threshold=0.0),
    )
    grader = make_grader(SandboxConfig(), reward)
    try:
        graded, _ = await grade_scored(grader, TASK, "no")  # the rule says fail; a threshold of 0 says pass
        assert not graded.verdict.passed
        m = step_metrics([graded], reward)
        assert m["verify/judge_calls"] == 1.0 and m["verify/judge_samples"] == 1.0
        assert m["verify/judge_disagreement"] == 1.0
        assert grader.judge is not None and 0.0 <= await grader.judge.score(TASK, "yes") <= 1.0
    finally:
        await grader.close()


def test_bad_judge_configs_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"reward\.judge\.path"):
        make_judge(JudgeConfig(kind="hf_classifier", path=str(tmp_path)))  # no model there
    with pytest.raises(ConfigError, match=r"reward\.judge"):
        load_config(
            ROOT / "examples" / "quickstart.yaml", ["reward.judge={kind: openai, base_url: http://x}"]
        )
    with pytest.raises(ConfigError, match="JUDGE_KEY_UNSET"):
        make_judge(JudgeConfig(kind="openai", base_url="http://x", model="m", api_key_env="JUDGE_KEY_UNSET"))
