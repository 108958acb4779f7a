"""Multi-turn token-exactness with a Qwen-style chat template: tools given to the template, tool calls in
the policy's turns, tool results as `tool` turns. A real tool episode in a real sandbox ends with exactly
the ids the template renders for the whole conversation at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from reward_helpers import scored

pytest.importorskip("transformers", reason="needs the [train] extra")
sys.path.insert(0, str(Path(__file__).parents[1] / "envs"))

from envkit import code_task
from qwen_style import qwen_style_tokenizer

from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.tools.registry import tool_schemas
from trialground.policy.backends.scripted.scripted import ScriptedPolicy
from trialground.policy.base import SamplingParams
from trialground.rollout.agent import rollout
from trialground.rollout.chat import ChatRenderer
from trialground.sandbox.base import SandboxConfig
from trialground.verify.config import RewardConfig
from trialground.verify.grader import make_grader

CALLS = [
    ("bash", {"command": "cat solution.py"}),
    ("edit_file", {"path": "solution.py", "old": "a - b", "new": "a + b"}),
    ("run_tests", {}),
    ("submit", {}),
]


def as_template_renders(name: str, arguments: dict) -> str:
    """The assistant text of one call exactly as the template writes a structured tool call."""
    return '<tool_call>\n{"name": "' + name + '", "arguments": ' + json.dumps(arguments) + "}\n</tool_call>"


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    texts = [json.dumps(t) for t in tool_schemas()] + [
        code_task().prompt,
        "def add(a, b):\n    return a + b\n",
    ]
    texts += [as_template_renders(n, a) for n, a in CALLS] * 3
    return qwen_style_tokenizer(texts * 4)


def test_the_template_takes_tools_and_renders_them(tokenizer) -> None:  # type: ignore[no-untyped-def]
    renderer = ChatRenderer(tokenizer)
    assert renderer.takes_tools
    ids = renderer.prompt_ids([{"role": "user", "content": "hi"}], tools=tool_schemas())
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools")
    assert '"name": "edit_file"' in text and text.endswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


async def test_tool_episode_is_token_exact_with_tool_calls_and_tool_turns(tokenizer) -> None:  # type: ignore[no-untyped-def]
    grader = make_grader(SandboxConfig(), RewardConfig())
    env = ToolEnv(grader, EnvConfig(kind="tool", max_turns=6), SandboxConfig())
    policy = ScriptedPolicy([as_template_renders(n, a) for n, a in CALLS], tokenizer=tokenizer)
    try:
        traj = scored(
            await rollout(
                policy,
                env,
                code_task(),
                params=SamplingParams(max_new_tokens=200),
                group_id="g",
                sample_index=0,
                max_context_tokens=8192,
                observation_role="tool",
            )
        )
    finally:
        await env.close()
        await grader.close()
    assert traj.error is None and traj.reward is not None and traj.reward.outcome == 1.0
    policy_turns = [t for t in traj.turns if t.role == "policy"]
    env_turns = [t for t in traj.turns if t.role == "env"]
    assert len(policy_turns) == len(CALLS) and len(env_turns) == len(CALLS) - 1  # submit ends it
    messages: list[dict] = [{"role": "user", "content": traj.turns[0].text}]
    for (name, arguments), env_turn in zip(CALLS, [*env_turns, None], strict=True):
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        if env_turn is not None:
            messages.append({"role": "tool", "content": env_turn.text})
    expected = tokenizer.apply_chat_template(
        messages, tools=tool_schemas(), tokenize=False, add_generation_prompt=False
    )
    context = [i for t in traj.turns for i in t.token_ids]
    # the episode's ids are exactly the template's rendering of the whole conversation, tokenised at once
    assert tokenizer.decode(context) == expected.removesuffix("\n")  # the last eos closes the episode
    assert context == tokenizer.encode(expected.removesuffix("\n"), add_special_tokens=False)
    assert "<tool_response>" in tokenizer.decode(env_turns[0].token_ids)
