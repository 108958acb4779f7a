"""Every open set takes a plugin from outside the package: a package written to a temporary directory adds a
sandbox backend, a policy backend, an environment kind, a tool, an advantage estimator, a loss and a task
family with its own verifier kind and that kind's own resource, each with its own settings, and a run config
that names them only as `package.module:NAME` (with `params`) runs real tool episodes through the environment
pool and the grader, gives the estimator's advantages, trains a step with the loss, and trains a real step on
the family, with no edit to `trialground/`."""

from __future__ import annotations

import asyncio
import json
import math
import textwrap
from pathlib import Path

import pytest

from trialground.errors import ConfigError
from trialground.orchestrator.run_config import RunConfig, load_config
from trialground.policy.backends.scripted.scripted import ScriptedPolicy
from trialground.rollout.trajectory import Trajectory
from trialground.tasks.io import write_jsonl
from trialground.tasks.model import Task, VerifierSpec

PLUGIN = '''
"""An out-of-tree plugin package: a sandbox backend, a policy backend, environment kinds, a tool, an
estimator, a loss and a task family with its own verifier kind (which owns its resource)."""

from pydantic import BaseModel, ConfigDict, Field

from trialground.envs.base import Observation
from trialground.envs.kinds import EnvCaps, EnvKind
from trialground.envs.single_turn import SingleTurnEnv
from trialground.envs.tool_env import ToolEnv
from trialground.envs.tools.base import Tool, ToolCaps, ToolOutcome, ToolParam
from trialground.policy.backends import PolicyBackend, PolicyCaps
from trialground.policy.backends.scripted.scripted import ScriptedPolicy, load_tokenizer
from trialground.sandbox.backends import SandboxBackend, SandboxCaps
from trialground.sandbox.backends.process import ProcessSandbox
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.sources import TaskSource
from trialground.tasks.verifiers import VerifierKind
from trialground.train.estimators import Estimator, EstimatorCaps
from trialground.train.losses import Loss, LossCaps, LossOutput
from trialground.verify.verdict import Verdict


class MarkerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    marker: str = Field(description="Written to .marker in every workspace this backend opens")


class MarkedSandbox(ProcessSandbox):
    """A process sandbox whose workspaces start with a marker file from the backend's settings."""

    @classmethod
    async def create(cls, config, files=None):
        settings = SANDBOX.settings_of(config.params)
        return await super().create(config, {**(files or {}), ".marker": settings.marker})


SANDBOX = SandboxBackend(
    "marked",
    MarkedSandbox,
    SandboxCaps(isolated=False, private_scratch=False, host_views=False, host_descriptors=True),
    settings=MarkerSettings,
)


class ShellSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    command: str = Field(description="The one bash command the policy runs before it submits")
    done: str = Field(description="Output of the command that means it ran: the policy then submits")


def make_shell_policy(config):
    settings = POLICY.settings_of(config.params)
    call = {"name": "bash", "arguments": {"command": settings.command}}
    bash = "<tool_call>" + json.dumps(call) + "</tool_call>"
    submit = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    return ScriptedPolicy(
        lambda prompt, i: submit if settings.done in prompt else bash,
        tokenizer=load_tokenizer(config.tokenizer),
    )


POLICY = PolicyBackend("shell", make_shell_policy, PolicyCaps(loads_model=False), settings=ShellSettings)


class BriefSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    brief: str = Field(description="Put before every task's prompt")


class BriefedToolEnv(ToolEnv):
    async def reset(self, task):
        obs = await super().reset(task)
        brief = ENV.settings_of(self.config.params).brief
        return obs.model_copy(update={"text": brief + "\\n" + obs.text})


ENV = EnvKind("briefed_tool", BriefedToolEnv, EnvCaps(needs_sandbox=True), settings=BriefSettings)


class ShoutEnv(SingleTurnEnv):
    """A single-turn kind of its own: the prompt in capitals."""

    async def reset(self, task):
        obs = await super().reset(task)
        return obs.model_copy(update={"text": obs.text.upper()})


def make_shout_env(grader, env_config, sandbox_config, **_):
    return ShoutEnv(grader)


SHOUT = EnvKind("shout", make_shout_env, EnvCaps(needs_sandbox=False))


def sign_advantages(rewards, eps):
    """+1 above the group mean, -1 below, 0 at it."""
    import numpy as np

    r = np.asarray(rewards, dtype=np.float64)
    return np.sign(r - r.mean())


class CallSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    call: str = Field(description="The tool call (JSON) the policy makes before it submits")
    done: str = Field(description="Output of the call that means it ran: the policy then submits")


def make_caller(config):
    settings = CALLER.settings_of(config.params)
    submit = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    call = "<tool_call>" + settings.call + "</tool_call>"
    tokenizer = load_tokenizer(config.tokenizer)
    return ScriptedPolicy(lambda prompt, i: submit if settings.done in prompt else call, tokenizer=tokenizer)


CALLER = PolicyBackend("caller", make_caller, PolicyCaps(loads_model=False), settings=CallSettings)


class StampSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    prefix: str = Field(description="Put before the value the tool writes")


async def stamp(call):
    value = call.settings.prefix + call.args["value"]
    await call.box.write("solution.py", f"X = {value!r}\\n")
    return ToolOutcome(f"stamped {value}", True, True, "solution.py")


STAMP = Tool(
    "stamp",
    stamp,
    ToolCaps(),
    settings=StampSettings,
    params=(ToolParam("value", "what to stamp"),),
    prompt="write X = prefix + value to solution.py",
    description="Write X = prefix + value to solution.py.",
    returns="What was stamped.",
)


class ReinforceSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    scale: float = Field(description="Multiplies the policy-gradient term")


def make_reinforce(config, settings):
    """REINFORCE: -scale * A * log pi per policy token (no ratio, no clip)."""

    def loss(x):
        adv = x.advantages.unsqueeze(1) if x.advantages.dim() == 1 else x.advantages
        per_token = -settings.scale * adv * x.logprobs * x.mask
        tokens = int(x.mask.sum().item())
        norm = x.normalizer if x.normalizer is not None else float(tokens)
        sums = {"pg_loss": float(per_token.sum().item()), "scale": settings.scale * tokens}
        return LossOutput(per_token.sum() / norm, sums, tokens)

    return loss


LOSS = Loss("reinforce", make_reinforce, LossCaps(zero_advantage_idle=True), settings=ReinforceSettings)


ESTIMATOR = Estimator("sign", sign_advantages, EstimatorCaps(std_normalised=False, leave_one_out=False))


class DigitParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    digit: str = Field(min_length=1, max_length=1, description="The digit a passing answer contains")


GRADED = []  # what each grader's counter had graded when the grader closed it


class DigitCounter:
    """The digit kind's own resource, made by the grader from its context and closed with it."""

    def __init__(self, context):
        self.backend = context.sandbox_config.backend
        self.graded = 0

    def close(self):
        GRADED.append((self.backend, self.graded))


async def verify_digit(counter, req):
    counter.graded += 1
    passed = req.params.digit in req.submission
    return Verdict(passed=passed, score=float(passed), detail=f"digit {req.params.digit}: {passed}")


DIGIT = VerifierKind("digit", DigitParams, verify_digit, "the answer holds the digit", resource=DigitCounter)


def make_digit_tasks(request):
    """A task family of its own: codegen-like prompts, each graded by the plugin's own verifier kind."""
    return [
        Task(
            domain="digits",
            prompt=f"Write f(x) for an integer x: add {c}, then multiply by {d}.",
            verifier=VerifierSpec(kind="tg_rooms_plugin:DIGIT", params={"digit": str(d)}),
            split=request.split,
        )
        for c, d in [(1 + (request.seed + i) % 9, 2 + i % 8) for i in range(request.n)]
    ]


FAMILY = TaskSource("digits", make_digit_tasks, "add, multiply; graded by DIGIT", generator=True, default_n=8)
'''.replace("from pydantic", "import json\n\nfrom pydantic", 1)

HIDDEN = "from solution import X\n\n\ndef test_marker():\n    assert X == 'room-42'\n"


def _task() -> Task:
    return Task(
        domain="code",
        prompt="Set X in solution.py to the text of the file .marker.",
        files={"solution.py": "X = None\n"},
        hidden_checks={"test_hidden.py": HIDDEN},
        verifier=VerifierSpec(kind="code_tests", params={"solution_path": "solution.py"}),
        split="train",
    )


def _config(tmp_path: Path, **changes: object) -> Path:
    write_jsonl([_task()], tmp_path / "tasks.jsonl")
    command = "echo \"X = '$(cat .marker)'\" > solution.py && echo written-$((40 + 2))"
    config: dict[str, object] = {
        "name": "plugins",
        "output_dir": str(tmp_path / "runs"),
        "tasks": {"sources": [{"source": str(tmp_path / "tasks.jsonl")}]},
        "sandbox": {"backend": "tg_rooms_plugin:SANDBOX", "params": {"marker": "room-42"}},
        "policy": {
            "backend": "tg_rooms_plugin:POLICY",
            "params": {"command": command, "done": "written-42"},
            "sampling": {"max_new_tokens": 256},
        },
        "env": {"kind": "tg_rooms_plugin:ENV", "params": {"brief": "BRIEFED BY THE PLUGIN"}, "max_turns": 4},
        "pool": {"max_active": 2},
        "loop": {"samples_per_task": 2, "batch_tasks": 1, "eval_interval": 0},
        "monitor": {"console": False},
        **changes,
    }
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(json.dumps(config)))  # JSON is YAML
    return path


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The plugin package, written outside the repository and put on the path."""
    package = tmp_path / "plugins" / "tg_rooms_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    return tmp_path


def test_plugins_named_only_by_the_run_config_run_real_episodes(plugin_path: Path) -> None:
    from trialground.orchestrator.wiring import build

    config = load_config(_config(plugin_path))
    wiring = build(config, None, train=False)

    async def episodes() -> list[list[Trajectory]]:
        try:
            return await wiring.collector.collect(wiring.tasks.tasks, 2, config.policy.sampling)
        finally:
            await wiring.close()

    (group,) = asyncio.run(episodes())
    assert [t.error for t in group] == [None, None]
    # the marker came from the sandbox plugin's params, through the policy plugin's command, into a
    # solution the grader's own (plugin) sandbox passed
    assert [t.reward.outcome for t in group if t.reward is not None] == [1.0, 1.0]
    policy = wiring.policy
    assert isinstance(policy, ScriptedPolicy)
    first_prompt = policy.tokenizer.decode(policy.calls[0])
    assert "BRIEFED BY THE PLUGIN" in first_prompt  # the env kind plugin's settings reached the episode


def test_an_env_kind_without_sandboxes_plays_its_own_episodes(plugin_path: Path) -> None:
    from trialground.orchestrator.wiring import build

    task = Task(
        domain="qa",
        prompt="Say ok.",
        verifier=VerifierSpec(kind="exact", params={"answer": "ok", "extract": "whole"}),
        split="train",
    )
    write_jsonl([task], plugin_path / "answers.jsonl")
    config = load_config(
        None,
        [
            f"tasks.sources=[{{source: {plugin_path / 'answers.jsonl'}}}]",
            "env.kind=tg_rooms_plugin:SHOUT",
            "policy.backend=scripted",
            "policy.responses=[ok]",
            "loop.eval_interval=0",
        ],
    )
    wiring = build(config, None, train=False)
    assert wiring.env_pool is None

    async def episodes() -> list[list[Trajectory]]:
        try:
            return await wiring.collector.collect(wiring.tasks.tasks, 2, config.policy.sampling)
        finally:
            await wiring.close()

    (group,) = asyncio.run(episodes())
    assert [t.reward.outcome for t in group if t.reward is not None] == [1.0, 1.0]
    policy = wiring.policy
    assert isinstance(policy, ScriptedPolicy)
    assert "SAY OK." in policy.tokenizer.decode(policy.calls[0])  # the kind's own reset ran


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"sandbox": {"backend": "tg_rooms_plugin:SANDBOX", "params": {"marker": 1, "colour": "red"}}},
         ["sandbox.params", "colour", "marker"]),
        ({"policy": {"backend": "tg_rooms_plugin:POLICY", "params": {"command": "true"}}},
         ["policy.params", "done: Field required"]),
        ({"env": {"kind": "tg_rooms_plugin:ENVS"}}, ["env.kind", "cannot import 'tg_rooms_plugin:ENVS'"]),
        ({"pool": {"backend": "k8s"}}, ["pool.backend", "known are local, ray", "package.module:NAME"]),
    ],
)  # fmt: skip
def test_a_bad_plugin_name_or_params_fails_when_the_config_loads(
    plugin_path: Path, section: dict[str, object], expected: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_config(plugin_path, **section))
    for text in expected:
        assert text in str(err.value)


def _stamp_config(plugin_path: Path, **env: object) -> Path:
    call = json.dumps({"name": "stamp", "arguments": {"value": "42"}})
    return _config(
        plugin_path,
        sandbox={"backend": "process"},
        policy={"backend": "tg_rooms_plugin:CALLER", "params": {"call": call, "done": "stamped room-42"}},
        env={"kind": "tool", "max_turns": 4, **env},
    )


def test_a_tool_named_by_the_run_config_runs_in_real_episodes(plugin_path: Path) -> None:
    from trialground.orchestrator.wiring import build

    tools = [{"name": "tg_rooms_plugin:STAMP", "params": {"prefix": "room-"}}]
    config = load_config(_stamp_config(plugin_path, tools=tools, tool_observation_chars={"stamp": 64}))
    wiring = build(config, None, train=False)

    async def episodes() -> list[list[Trajectory]]:
        try:
            return await wiring.collector.collect(wiring.tasks.tasks, 2, config.policy.sampling)
        finally:
            await wiring.close()

    (group,) = asyncio.run(episodes())
    assert [t.error for t in group] == [None, None]
    # the tool's settings (prefix) and the model's argument (42) made the solution the grader passed
    assert [t.reward.outcome for t in group if t.reward is not None] == [1.0, 1.0]
    policy = wiring.policy
    assert isinstance(policy, ScriptedPolicy)
    prompt = policy.tokenizer.decode(policy.calls[0])
    assert "- stamp(value): write X = prefix + value to solution.py\n- submit(answer?)" in prompt


def test_a_plugin_tool_is_callable_only_where_the_config_names_it(plugin_path: Path) -> None:
    from trialground.orchestrator.wiring import build

    config = load_config(_stamp_config(plugin_path))
    wiring = build(config, None, train=False)

    async def episodes() -> list[list[Trajectory]]:
        try:
            return await wiring.collector.collect(wiring.tasks.tasks, 1, config.policy.sampling)
        finally:
            await wiring.close()

    (group,) = asyncio.run(episodes())
    assert [t.reward.outcome for t in group if t.reward is not None] == [0.0]
    policy = wiring.policy
    assert isinstance(policy, ScriptedPolicy)
    assert "unknown tool 'stamp'" in policy.tokenizer.decode(policy.calls[1])
    with pytest.raises(ConfigError, match=r"env.tools.params: prefix: Input should be a valid string"):
        bad = [{"name": "tg_rooms_plugin:STAMP", "params": {"prefix": 1}}]
        load_config(_stamp_config(plugin_path, tools=bad))
    with pytest.raises(ConfigError, match=r"env.tool_observation_chars: unknown tool 'stamp'"):
        load_config(_stamp_config(plugin_path, tool_observation_chars={"stamp": 64}))


def test_a_plugin_tool_is_a_method_of_the_trl_environment(plugin_path: Path) -> None:
    from transformers.utils import get_json_schema

    from trialground.envs.config import EnvConfig
    from trialground.integrations.trl import environment_factory

    env = EnvConfig(kind="tool", tools=[{"name": "tg_rooms_plugin:STAMP", "params": {"prefix": "room-"}}])
    with environment_factory([_task()], env=env) as factory:
        instance = factory()
        schema = get_json_schema(instance.stamp)["function"]
        assert schema["parameters"]["required"] == ["value"]
        assert schema["description"] == "Write X = prefix + value to solution.py."
        instance.reset(task_id=_task().id)
        assert instance.stamp("42") == "stamped room-42"
        assert "graded: passed" in instance.submit()


def test_an_estimator_named_by_the_run_config_gives_the_advantages(plugin_path: Path) -> None:
    from trialground.train.advantages import group_advantages

    config = load_config(_config(plugin_path, trainer={"algorithm": "tg_rooms_plugin:ESTIMATOR"}))
    advantages = group_advantages([0.0, 0.5, 3.0, None], config.trainer.algorithm)
    assert advantages == [-1.0, -1.0, 1.0, None]  # grpo would give about -0.71, -0.43, 1.14
    assert group_advantages([0.0, 0.5, 3.0], "grpo")[2] != 1.0


def test_a_loss_named_by_the_run_config_trains_a_step(plugin_path: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trialground.rollout.trajectory import Turn
    from trialground.train.advantages import with_advantages
    from trialground.train.trainer import Trainer

    trainer = {"loss": "tg_rooms_plugin:LOSS", "loss_params": {"scale": 0.5}, "lr": 1e-2}
    config = load_config(_config(plugin_path, trainer=trainer))
    torch.manual_seed(0)
    shape = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(shape).eval()
    prompt, completions, advantages = [1, 2, 3], [[4, 5, 6], [7, 8]], [1.0, -1.0]
    runs, expected = [], 0.0
    for i, (completion, adv) in enumerate(zip(completions, advantages, strict=True)):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1).tolist()
        expected += -0.5 * adv * sum(lp)
        turns = (
            Turn(role="prompt", token_ids=tuple(prompt)),
            Turn(role="policy", token_ids=tuple(completion), logprobs=tuple(lp)),
        )
        runs.append(Trajectory(task_id="t", group_id="g", sample_index=i, policy_version=0, turns=turns))
    metrics = Trainer(model, config.trainer, 0).step(with_advantages(runs, advantages))
    assert metrics["train/loss"] == pytest.approx(expected / 5, abs=1e-5)  # the plugin's loss, its scale
    assert metrics["train/scale"] == pytest.approx(0.5)  # its own metric, averaged over policy tokens
    with pytest.raises(ConfigError, match=r"trainer.loss_params: scale: Input should be a valid number"):
        load_config(
            _config(plugin_path, trainer={"loss": "tg_rooms_plugin:LOSS", "loss_params": {"scale": "x"}})
        )


def test_built_in_backends_take_no_params_they_do_not_know() -> None:
    with pytest.raises(ConfigError, match=r"sandbox.params: memory_mb: Extra inputs are not permitted"):
        load_config(None, ["sandbox.params={memory_mb: 3}"])
    assert isinstance(load_config(None, ["sandbox.backend=process"]), RunConfig)


@pytest.mark.slow
def test_a_family_with_its_own_verifier_kind_trains_a_step_named_only_by_the_run_config(
    plugin_path: Path,
) -> None:
    """The family's source and kind, the sandbox backend and the estimator all come from the plugin; the
    tiny model trains one real step on the family's tasks, rewarded by the plugin kind."""
    import importlib

    import pyarrow.parquet as pq

    from trialground.orchestrator.loop import run

    quickstart = Path(__file__).parent.parent / "examples" / "quickstart.yaml"
    config = load_config(
        quickstart,
        [
            "tasks.sources=[{source: 'tg_rooms_plugin:FAMILY'}]", "tasks.num_train=8", "tasks.num_eval=2",
            "sandbox.backend=tg_rooms_plugin:SANDBOX", "sandbox.params={marker: unused}",
            "trainer.algorithm=tg_rooms_plugin:ESTIMATOR",
            "loop.steps=1", "loop.batch_tasks=2", "loop.samples_per_task=4", "loop.rollout_concurrency=8",
            "loop.eval_interval=0", "loop.probe_interval=0", "reward.canaries=0",
            f"output_dir={plugin_path}", "name=family", "monitor.console=false",
        ],
    )  # fmt: skip
    asyncio.run(run(config))
    plugin = importlib.import_module("tg_rooms_plugin")
    rows = pq.read_table(plugin_path / "family" / "trajectories" / "step_1.parquet").to_pylist()
    assert len(rows) == 8
    tasks = {t.id: t for t in plugin.make_digit_tasks(_Request(n=8))}
    for row in rows:  # every reward is the plugin kind's decision on the completion the step trained on
        digit = tasks[row["task_id"]].verifier.params["digit"]
        assert row["reward"] == float(digit in row["completion"]), row
    # one resource for the run's grader, made from its context (the plugin sandbox backend), closed at the end
    # after grading the step's 8 episodes and the final evaluation's
    ((backend, graded),) = plugin.GRADED
    assert backend == "tg_rooms_plugin:SANDBOX" and graded >= 8
    lines = (plugin_path / "family" / "metrics.jsonl").read_text().splitlines()
    (step,) = [m for m in map(json.loads, lines) if m.get("step") == 1 and "train/loss" in m]
    assert (
        step["verify/gradings"] == 8.0 and math.isfinite(step["train/loss"]) and step["train/grad_norm"] > 0
    )


class _Request:
    """The request the run's source got for its train split (seed 0)."""

    def __init__(self, n: int) -> None:
        self.n, self.seed, self.split, self.arg = n, 0, "train", ""
