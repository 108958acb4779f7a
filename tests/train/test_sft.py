"""`trialground sft`: demonstrations rendered as episodes are (the policy's turns trained, the prompt and
the environment's answers masked), from JSONL chats and from trajectory files; a real fine-tune of the
bundled tiny model learns a demonstration; the CLI writes a model directory `policy.model` loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from trialground.cli import app
from trialground.orchestrator.rundir import write_episodes
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.rollout.chat import ChatRenderer
from trialground.rollout.trajectory import Trajectory, Turn
from trialground.train.advantages import Scored
from trialground.train.sft import SFTConfig, from_jsonl, from_trajectories, train_sft
from trialground.verify.reward.model import Reward, RewardComponent

ROOT = Path(__file__).resolve().parents[2]
CHAT = {
    "messages": [
        {"role": "user", "content": "Write add(a, b)."},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
        {"role": "user", "content": "1 passed <|end|>"},
        {"role": "assistant", "content": "done"},
    ]
}


@pytest.fixture(autouse=True)
def _one_thread() -> object:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    return HFPolicy(PolicyConfig(model="tiny", cpu_threads=1))


def test_a_chat_is_rendered_as_the_agent_loop_renders_an_episode(tiny: HFPolicy, tmp_path: Path) -> None:
    tok = tiny.tokenizer
    (tmp_path / "d.jsonl").write_text(
        json.dumps(CHAT) + "\n\n" + json.dumps({"prompt": "p", "completion": "c"})
    )
    chat, pair = from_jsonl(tmp_path / "d.jsonl", tok)
    r = ChatRenderer(tok)
    prompt = r.prompt_ids([{"role": "user", "content": "Write add(a, b)."}])
    first = [*tok.encode("def add(a, b):\n    return a + b", add_special_tokens=False), tok.eos_token_id]
    obs = r.observation_ids("1 passed <|end|>", after=first)
    second = [*tok.encode("done", add_special_tokens=False), tok.eos_token_id]
    assert chat.ids == prompt + first + obs + second
    assert chat.mask == [0] * len(prompt) + [1] * len(first) + [0] * len(obs) + [1] * len(second)
    assert sum(pair.mask) == len(tok.encode("c", add_special_tokens=False)) + 1
    (tmp_path / "bad.jsonl").write_text('{"messages": [{"role": "assistant", "content": "x"}]}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        from_jsonl(tmp_path / "bad.jsonl", tok)


def test_trajectory_rows_give_their_turns_and_low_rewards_can_be_left_out(tmp_path: Path) -> None:
    def traj(i: int) -> Trajectory:
        turns = (
            Turn(role="prompt", token_ids=(5, 6)),
            Turn(role="policy", token_ids=(7, 8), logprobs=(0, 0)),
            Turn(role="env", token_ids=(9,)),
            Turn(role="policy", token_ids=(10,), logprobs=(0,)),
        )
        reward = Reward(
            outcome=1.0 - i, components=(RewardComponent(name="outcome", value=1.0 - i, weight=1.0),)
        )
        return Trajectory(
            task_id="t", group_id="g", sample_index=i, policy_version=0, turns=turns, reward=reward
        )

    path = write_episodes(tmp_path / "s.parquet", 1, [Scored(traj(0), 1.0, 0.5), Scored(traj(1), 0.0, -0.5)],
                          ["a", "b"], {})  # fmt: skip
    examples = from_trajectories([path])
    assert [e.ids for e in examples] == [[5, 6, 7, 8, 9, 10]] * 2
    assert examples[0].mask == [0, 0, 1, 1, 0, 1]
    assert len(from_trajectories([path], min_reward=1.0)) == 1


def test_sft_learns_a_demonstration(tiny: HFPolicy, tmp_path: Path) -> None:
    tok = tiny.tokenizer
    target = "def mul(a, b):\n    return a * b * 7"
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "zq", "completion": target}))
    examples = from_jsonl(tmp_path / "d.jsonl", tok)
    prompt = ChatRenderer(tok).prompt_ids([{"role": "user", "content": "zq"}])
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    assert tiny.generate_sync([prompt], greedy)[0].text != target
    torch.manual_seed(0)
    log = train_sft(tiny.model, examples * 4, SFTConfig(lr=3e-3, epochs=30, batch_size=4), tok.pad_token_id)
    assert log[-1]["loss"] < 0.02 * log[0]["loss"]
    tiny.load_weights({}, version=1)
    assert tiny.generate_sync([prompt], greedy)[0].text == target


def test_the_cli_writes_a_model_directory_the_policy_loads(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(json.dumps(CHAT) + "\n")
    out = tmp_path / "sft"
    result = CliRunner().invoke(
        app,
        ["sft", str(ROOT / "examples" / "quickstart.yaml"), "--data", str(tmp_path / "d.jsonl"),
         "--out", str(out), "--lr", "0.001", "--set", "policy.cpu_threads=1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "sft.json").read_text())
    assert summary["examples"] == 1 and len(summary["steps"]) == 1
    policy = HFPolicy(PolicyConfig(model=str(out), cpu_threads=1))
    assert policy.tokenizer.chat_template  # the tokenizer keeps the template it was tuned with
    refused = CliRunner().invoke(
        app,
        [
            "sft",
            str(ROOT / "examples" / "quickstart.yaml"),
            "--data",
            str(tmp_path / "d.jsonl"),
            "--out",
            str(out),
        ],
    )
    assert refused.exit_code == 2 and "not an empty directory" in refused.output
