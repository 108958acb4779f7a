"""TRL: trialground tasks and grading as `GRPOTrainer` reward functions and tool environments.

    from trialground.integrations.trl import reward_function, environment_factory

    reward = reward_function("codegen", n=64)          # or a list of Task
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=reward.dataset(), ...)
    trainer.train(); reward.close()

    envs = environment_factory("agent", n=64)
    trainer = GRPOTrainer(model=..., environment_factory=envs, train_dataset=envs.dataset(), ...)
    trainer.train(); envs.close()

`reward_function` (TRL's custom reward contract): called with `prompts`, `completions` and the dataset's
other columns as lists; it reads the `task_id` column, grades every completion concurrently in sandboxes
(the project's `Grader`, as its own single-turn loop does) and returns one reward per completion — the
reward's `total`, or None when grading failed for an infrastructure reason (TRL then leaves the sample out
of that reward instead of learning from a made-up 0). With TRL's `log_metric`, it logs the batch's
`trialground/pass_rate`, `/dropped`, `/flagged` and every reward component's mean.

`environment_factory` (TRL's `environment_factory` contract, TRL 1.16): a zero-argument callable; each
instance is one `ToolEnv` episode. `reset(**row)` opens a fresh sandbox for the row's `task_id` and returns
the first observation (the task prompt and the tool list), which TRL appends to the row's (empty) user
message. Its public methods are the `ToolEnv` tools (the built-ins of `trialground.envs.tools`, plus any
plugin tool `env.tools` names), generated from the tool registry with the type hints and docstrings TRL
turns into tool schemas; each call is one `ToolEnv.step`, so the environment's turn limit, counters and
tamper checks apply. `get_reward()` grades the episode: the reward of `submit`, or, when the model stopped
without submitting, of the workspace as it is (`EnvConfig.grade_on_limit`); None after an infrastructure
failure. Instances are reused between batches (TRL's pool); `close()` on the factory closes
every sandbox they hold.

`bundled_tokenizer(name)` loads a bundled model's tokenizer with a tool-calling chat template (its own
role markers, tool calls as `<tool_call>{json}</tool_call>` in the assistant turn, tool results as user
turns, as the bundled agent was trained) and the matching response template TRL parses tool calls with.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trialground.envs.base import EpisodeEnd, Observation
from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import ToolFormat, format_tool_call
from trialground.envs.tools.base import Tool
from trialground.envs.tools.registry import BUILTIN, TOOLS, ToolSet
from trialground.errors import EnvError, ErrorInfo, TrialgroundError
from trialground.integrations.grading import (
    GradedCompletion,
    TaskGrading,
    TaskSet,
    completion_text,
    summarize,
)
from trialground.policy.tiny import TINY_NAME
from trialground.rollout.scoring import score_end
from trialground.rollout.trajectory import CONTEXT_BUDGET
from trialground.sandbox.base import SandboxConfig
from trialground.tasks.model import Split, Task
from trialground.verify.config import RewardConfig
from trialground.verify.judges.judge import Judge

TASK_COLUMN = "task_id"


def _rows(tasks: Mapping[str, Task], content: Callable[[Task], str]) -> list[dict[str, Any]]:
    return [{"prompt": [{"role": "user", "content": content(t)}], TASK_COLUMN: t.id} for t in tasks.values()]


def _dataset(rows: list[dict[str, Any]]) -> Any:
    try:
        from datasets import Dataset
    except ImportError as e:  # pragma: no cover - datasets comes with trl
        raise ImportError("dataset() needs the `datasets` package (it comes with trl)") from e
    return Dataset.from_list(rows)


class TaskReward:
    """A TRL reward function over a task set; see the module docstring. Callable; close it when done."""

    def __init__(
        self,
        tasks: TaskSet,
        *,
        sandbox: SandboxConfig | None = None,
        reward: RewardConfig | None = None,
        judge: Judge | None = None,
        name: str = "trialground",
    ) -> None:
        self.grading = TaskGrading(tasks, sandbox=sandbox, reward=reward, judge=judge)
        self.__name__ = name  # TRL names the reward (rewards/<name>/mean) after it
        self.last: tuple[GradedCompletion, ...] = ()  # the latest batch, for inspection

    @property
    def tasks(self) -> dict[str, Task]:
        return self.grading.tasks

    def rows(self) -> list[dict[str, Any]]:
        """One row per task: a conversational `prompt` (the task's prompt) and its `task_id`."""
        return _rows(self.tasks, lambda t: t.prompt)

    def dataset(self) -> Any:
        """`rows()` as a `datasets.Dataset` (TRL's `train_dataset`)."""
        return _dataset(self.rows())

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        task_id: Sequence[str] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        if task_id is None:
            raise ValueError(
                f"the trialground reward needs a {TASK_COLUMN!r} column in the training dataset "
                "(build it with reward.dataset() or give each row the id of its task)"
            )
        if len(task_id) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(task_id)} task ids")
        texts = [completion_text(c) for c in completions]
        results = self.grading.grade_many(list(zip(task_id, texts, strict=True)))
        self.last = tuple(results)
        if log_metric is not None:
            for key, value in summarize(results, self.__name__).items():
                log_metric(key, value)
        return [r.value for r in results]

    def close(self) -> None:
        self.grading.close()

    def __enter__(self) -> TaskReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reward_function(
    tasks: TaskSet,
    *,
    seed: int = 0,
    n: int | None = None,
    split: Split | None = None,
    sandbox: SandboxConfig | None = None,
    reward: RewardConfig | None = None,
    judge: Judge | None = None,
    name: str = "trialground",
) -> TaskReward:
    """A TRL reward function grading completions of `tasks` (Task objects, or a source spec loaded with
    `seed`, `n`, `split`). See the module docstring."""
    from trialground.integrations.grading import resolve_tasks

    chosen = resolve_tasks(tasks, seed=seed, n=n, split=split)
    return TaskReward(chosen, sandbox=sandbox, reward=reward, judge=judge, name=name)


class TrialgroundToolEnv:
    """One TRL environment instance: a `ToolEnv` episode per `reset`. Made by `ToolEnvFactory`."""

    def __init__(self, factory: ToolEnvFactory) -> None:
        self._factory = factory
        self._env: ToolEnv | None = None
        self._final: Observation | None = None
        self._error: ErrorInfo | None = None
        self._recorded = False

    # --- TRL's contract: reset and get_reward (not tools) ----------------------------------------------

    def reset(self, **row: Any) -> str:
        """Start an episode on the row's task in a fresh sandbox; returns the first observation."""
        task_id = row.get(TASK_COLUMN)
        if not isinstance(task_id, str):
            raise ValueError(f"each training row needs a {TASK_COLUMN!r} column (see ToolEnvFactory.dataset)")
        task = self._factory.grading.task(task_id)
        self._final, self._error, self._recorded = None, None, False
        try:
            first = self._factory.run(self._start(task))
        except TrialgroundError as e:  # no sandbox: the rollout still runs, and is left out of the reward
            self._error = e.info()
            return f"{task.prompt}\n\n(the environment could not start: {e}; tools are unavailable)"
        return first.text if self._factory.describe_tools else task.prompt

    def get_reward(self, *, truncated: bool = False) -> float | None:
        """The episode's reward (see the module docstring), from the one reward seam with the factory's
        rubric; None when it cannot be trusted. `truncated`: the trainer's context budget cut the episode
        before it ended: it is not graded, and earns what the native loop pays a context-budget end."""
        if self._error is not None or self._env is None:
            return None
        rubric = self._factory.grading.rubric
        if truncated and self._final is None:
            reward = score_end(rubric, EpisodeEnd(finish_reason=CONTEXT_BUDGET), cut_by_context=True)
            return None if reward is None or reward.dropped else reward.total
        final = self._final
        if final is None or not self._recorded:
            if final is None:
                final = self._factory.run(self._env.finish())
                self._final = final
            self._factory.record(final)  # once per episode, however often TRL asks
            self._recorded = True
        reward = score_end(rubric, final.end)
        return None if reward is None or reward.dropped else reward.total

    # --- the ToolEnv tools: one method each, generated from the registry (`tool_method`) -----------------

    # --- plumbing ----------------------------------------------------------------------------------------

    async def _start(self, task: Task) -> Observation:
        if self._env is not None:
            old, self._env = self._env, None
            await old.close()
        env = ToolEnv(self._factory.grading.grader, self._factory.env_config, self._factory.grading.sandbox)
        self._env = env
        return await env.reset(task)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._error is not None:
            return f"error: the environment is unavailable ({self._error.message})"
        if self._env is None:
            raise EnvError(f"{name}() before reset()", kind="not_reset")
        if self._final is not None:
            return "the episode is over"
        fmt: ToolFormat = "xml" if self._factory.env_config.tool_format == "xml" else "json_tags"
        obs: Observation = self._factory.run(self._env.step(format_tool_call(name, arguments, fmt)))
        if obs.done:
            self._final = obs
            graded = obs.end.graded if obs.end is not None else None
            if graded is not None:
                return f"{obs.text}\n[graded: {'passed' if graded.verdict.passed else 'failed'}]".strip()
        return obs.text

    async def _close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            await env.close()


class ToolEnvFactory:
    """TRL's `environment_factory`: `factory()` is a new `TrialgroundToolEnv`. See the module docstring."""

    def __init__(
        self,
        tasks: TaskSet,
        *,
        env: EnvConfig | None = None,
        sandbox: SandboxConfig | None = None,
        reward: RewardConfig | None = None,
        judge: Judge | None = None,
        describe_tools: bool = True,
    ) -> None:
        self.env_config = env or EnvConfig(kind="tool")
        self.describe_tools = describe_tools
        # a plugin tool the env config names is a method of a subclass of this factory's own
        extra = {
            n: tool_method(t) for n, t in ToolSet.of(self.env_config).callable.items() if n not in BUILTIN
        }
        self.env_class: type[TrialgroundToolEnv] = (
            type(TrialgroundToolEnv.__name__, (TrialgroundToolEnv,), extra) if extra else TrialgroundToolEnv
        )
        self.grading = TaskGrading(tasks, sandbox=sandbox, reward=reward, judge=judge)
        self.instances: list[TrialgroundToolEnv] = []
        self.finished: list[Observation] = []  # final observations graded by get_reward, in order
        self._lock = threading.Lock()

    @property
    def tasks(self) -> dict[str, Task]:
        return self.grading.tasks

    def __call__(self) -> TrialgroundToolEnv:
        instance = self.env_class(self)
        with self._lock:
            self.instances.append(instance)
        return instance

    def rows(self) -> list[dict[str, Any]]:
        """One row per task: an empty user message (reset() supplies the prompt) and its `task_id`."""
        return _rows(self.tasks, lambda t: "")

    def dataset(self) -> Any:
        return _dataset(self.rows())

    def run(self, coro: Any) -> Any:
        return self.grading.loop.run(coro)

    def record(self, final: Observation) -> None:
        with self._lock:
            self.finished.append(final)

    def close(self) -> None:
        """Close every instance's sandbox, the grader and the loop."""

        async def close_all() -> None:
            await asyncio.gather(*(i._close() for i in self.instances), return_exceptions=True)

        self.grading.loop.close(close_all, self.grading.grader.close)

    def __enter__(self) -> ToolEnvFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def environment_factory(
    tasks: TaskSet,
    *,
    seed: int = 0,
    n: int | None = None,
    split: Split | None = None,
    env: EnvConfig | None = None,
    sandbox: SandboxConfig | None = None,
    reward: RewardConfig | None = None,
    judge: Judge | None = None,
    describe_tools: bool = True,
) -> ToolEnvFactory:
    """A TRL `environment_factory` running `ToolEnv` episodes on `tasks` (Task objects, or a source spec
    loaded with `seed`, `n`, `split`). See the module docstring."""
    from trialground.integrations.grading import resolve_tasks

    chosen = resolve_tasks(tasks, seed=seed, n=n, split=split)
    return ToolEnvFactory(
        chosen, env=env, sandbox=sandbox, reward=reward, judge=judge, describe_tools=describe_tools
    )


def _sentence(text: str) -> str:
    return f"{text[:1].upper()}{text[1:]}."


def tool_method(tool: Tool) -> Callable[..., str]:
    """`tool` as a TRL environment method: its parameters typed (an optional one defaults to None) and a
    Google-style docstring, from which TRL (transformers' `get_json_schema`) builds its schema."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("self", kind)]
    annotations: dict[str, Any] = {}
    for p in tool.params:
        annotations[p.name] = p.type if p.required else p.type | None
        default = inspect.Parameter.empty if p.required else None
        params.append(inspect.Parameter(p.name, kind, default=default, annotation=annotations[p.name]))
    signature = inspect.Signature(params, return_annotation=str)

    def method(self: TrialgroundToolEnv, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        given = {k: v for k, v in bound.arguments.items() if k != "self" and v is not None}
        return self._call(tool.name, given)

    doc = [tool.description]
    if tool.params:
        doc += [
            "",
            "Args:",
            *(f"    {p.name}: {_sentence(p.description)}" for p in tool.params),
        ]
    doc += ["", "Returns:", f"    {tool.returns}"]
    method.__name__ = method.__qualname__ = tool.name
    method.__doc__ = "\n".join(doc)
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    return method


for _name in BUILTIN:
    setattr(TrialgroundToolEnv, _name, tool_method(TOOLS.lookup(_name)))

TOOL_NAMES = BUILTIN  # the methods TrialgroundToolEnv exposes


# --- the bundled models' tool-calling chat template ----------------------------------------------------

# The bundled template (trialground.policy.tiny.CHAT_TEMPLATE) plus tool calls: an assistant turn renders
# its calls after its text as `<tool_call>{"name", "arguments"}</tool_call>` (what the bundled agent emits),
# and a tool result is a user turn (how the agent saw observations in training). Without tool calls it
# renders exactly as the bundled template does; it is append-only, as TRL's multi-turn loop requires.
TOOL_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|assistant|>\\n' + (message['content'] or '') }}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{{ '<tool_call>' + ({'name': fn['name'], 'arguments': fn['arguments']} | tojson) + '</tool_call>' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|end|>\\n' }}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}"
)

# transformers' response template for that format: text, then any number of tool calls, then <|end|>.
TOOL_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|end\|>\s*", "content": "text"},
    },
}


def bundled_tokenizer(name: str = TINY_NAME) -> Any:
    """The tokenizer of a bundled model ('tiny', 'tiny-agent') ready for TRL's tool calling."""
    from transformers import AutoTokenizer

    from trialground.policy.tiny import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(name), trust_remote_code=False)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = TOOL_RESPONSE_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer
