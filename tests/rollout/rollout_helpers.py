"""Helpers for agent-loop tests: a tiny HF policy, a recording proxy, an environment over a real sandbox."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from trialground.envs.base import Environment, EpisodeEnd, Observation
from trialground.errors import PolicyError, SandboxError
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.base import Generation, SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.tiny import build_tokenizer, tiny_llama_config, tiny_model_dir
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task
from trialground.verify.verdict import Graded, Verdict

_TEXTS = [
    f"def f{i}(x):\n    return x * {i} + {i % 7}\n\nprint(f{i}({i}))\nran: {i} bytes ok" for i in range(200)
]


def tiny_policy(tmp: Path) -> HFPolicy:
    """The bundled tiny model when it exists, else a random tiny Llama with the project's tokenizer recipe."""
    if (tiny_model_dir() / "config.json").is_file():
        return HFPolicy(PolicyConfig(model="tiny"))
    tok = build_tokenizer(_TEXTS, vocab_size=320)
    cfg = tiny_llama_config(len(tok), hidden=32, layers=2, heads=2)
    cfg.eos_token_id = tok.eos_token_id
    cfg.pad_token_id = tok.pad_token_id
    torch.manual_seed(0)
    from transformers import LlamaForCausalLM

    LlamaForCausalLM(cfg).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return HFPolicy(PolicyConfig(model=str(tmp)))


class Recorder:
    """A policy proxy that records every call and can fail chosen calls."""

    def __init__(self, inner: Any, fail_calls: Sequence[int] = ()) -> None:
        self.inner = inner
        self.calls: list[tuple[list[list[int]], SamplingParams, list[Generation]]] = []
        self.fail_calls = set(fail_calls)
        self._taken: set[tuple[int, int]] = set()

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    @property
    def version(self) -> int:
        return int(self.inner.version)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        index = len(self.calls)
        gens = [] if index in self.fail_calls else await self.inner.generate(prompts, params)
        self.calls.append(([list(p) for p in prompts], params, gens))
        if index in self.fail_calls:
            raise PolicyError("injected failure", kind="injected")
        return gens

    def take(self, context: Sequence[int], token_ids: Sequence[int]) -> Generation:
        """The generation the policy returned for exactly this prompt with exactly these ids; each
        returned generation can be taken once (k identical prompts get k different samples)."""
        for call, (prompts, _, gens) in enumerate(self.calls):
            for row, (p, g) in enumerate(zip(prompts, gens, strict=False)):
                key = (call, row)
                if p == list(context) and g.token_ids == tuple(token_ids) and key not in self._taken:
                    self._taken.add(key)
                    return g
        raise AssertionError("the policy never returned these tokens for this context")


class ShellEnv(Environment):
    """A multi-turn environment over a real sandbox: each action is written to a file and measured by
    `wc -c` inside the sandbox; after `turns` actions the episode ends with reward 1 if the total size
    is even. `fail_step` makes that step raise a SandboxError (infrastructure failure)."""

    def __init__(
        self, turns: int = 3, fail_step: int | None = None, config: SandboxConfig | None = None
    ) -> None:
        self.turns = turns
        self.fail_step = fail_step
        self.config = config or SandboxConfig()
        self.sandbox: Sandbox | None = None
        self.step_count = 0
        self.total = 0
        self.closed = False

    async def reset(self, task: Task) -> Observation:
        self.sandbox = await open_sandbox(self.config, {"README": task.prompt})
        return Observation(text=task.prompt)

    async def step(self, action: str) -> Observation:
        assert self.sandbox is not None
        self.step_count += 1
        if self.step_count == self.fail_step:
            raise SandboxError("injected sandbox failure", kind="injected")
        await self.sandbox.write("action.txt", action)
        res = await self.sandbox.exec(["wc", "-c", "action.txt"])
        size = int(res.stdout.split()[0])
        self.total += size
        if self.step_count >= self.turns:
            verdict = Verdict(passed=self.total % 2 == 0, score=float(self.total % 2 == 0))
            end = EpisodeEnd(finish_reason="submitted", graded=Graded(verdict=verdict))
            return Observation(text="done", done=True, end=end)
        return Observation(text=f"ran: {size} bytes ok")

    async def close(self) -> None:
        self.closed = True
        if self.sandbox is not None:
            await self.sandbox.close()
