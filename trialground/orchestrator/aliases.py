"""TRL's and verl's names for trialground's training knobs, accepted in a run config where they mean the same.

Where each is accepted, as its own trainer spells it:

- TRL's `GRPOConfig` is flat, so its names are top-level keys: `num_generations: 8`, `--set beta=0.04`;
- verl's config is nested, so its names are their full dotted paths: `actor_rollout_ref: {rollout: {n: 8}}`,
  `--set actor_rollout_ref.rollout.n=8`.

An alias is renamed to the trialground key before validation (a few also translate their values, e.g.
TRL's `loss_type: dapo` is `trainer.loss_agg: token`), so the resolved config, `config show` and the run
directory's `config.yaml` hold trialground's names. A name whose meaning differs (TRL's
`per_device_train_batch_size` counts completions, trialground's `loop.batch_tasks` counts tasks) is
refused with what to write instead. docs/glossary.md is the table of all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from trialground.errors import ConfigError

_MISSING = object()


@dataclass(frozen=True)
class Alias:
    """Another trainer's name: `target` is the trialground key it means, or None when none means the same
    (`note` then says what to write). `values` translates a value that is spelled differently; a value
    not in it is refused."""

    trainer: str
    target: str | None
    note: str = ""
    values: Mapping[Any, Any] | None = field(default=None)


def _trl(target: str | None, note: str = "", values: Mapping[Any, Any] | None = None) -> Alias:
    return Alias("TRL", target, note, values)


def _verl(target: str | None, note: str = "", values: Mapping[Any, Any] | None = None) -> Alias:
    return Alias("verl", target, note, values)


_ACTOR, _ROLLOUT, _MODEL = (
    "actor_rollout_ref.actor.",
    "actor_rollout_ref.rollout.",
    "actor_rollout_ref.model.",
)
ALIASES: dict[str, Alias] = {
    # TRL GRPOConfig / ModelConfig: the same meaning
    "num_generations": _trl("loop.samples_per_task"),
    "max_steps": _trl("loop.steps"),
    "beta": _trl("trainer.kl_coef"),
    "learning_rate": _trl("trainer.lr"),
    "epsilon": _trl("trainer.clip_low"),
    "epsilon_high": _trl("trainer.clip_high"),
    "num_iterations": _trl("trainer.epochs"),
    "max_grad_norm": _trl("trainer.max_grad_norm"),
    "weight_decay": _trl("trainer.weight_decay"),
    "gradient_checkpointing": _trl("trainer.gradient_checkpointing"),
    "loss_type": _trl(
        "trainer.loss_agg",
        "trainer.loss_agg is token (TRL dapo: the mean over every completion token of the batch) or "
        "sequence (TRL grpo: the mean of each completion's token mean)",
        {"dapo": "token", "grpo": "sequence"},
    ),
    "max_completion_length": _trl("policy.sampling.max_new_tokens"),
    "temperature": _trl("policy.sampling.temperature"),
    "top_p": _trl("policy.sampling.top_p"),
    "model_name_or_path": _trl("policy.model"),
    "save_steps": _trl("loop.checkpoint_interval"),
    "save_total_limit": _trl("loop.keep_checkpoints"),
    "eval_steps": _trl("loop.eval_interval"),
    # TRL names whose meaning differs
    "per_device_train_batch_size": _trl(
        None,
        "TRL counts completions per device; a trialground step takes loop.batch_tasks tasks with "
        "loop.samples_per_task completions each",
    ),
    "gradient_accumulation_steps": _trl(
        None,
        "trialground takes one optimiser step per batch and epoch and accumulates over micro-batches "
        "of trainer.micro_batch_size sequences",
    ),
    "steps_per_generation": _trl(None, "each step generates its own batch (loop.mode: async overlaps them)"),
    "scale_rewards": _trl(
        None, "trainer.algorithm: grpo divides by the group's std, dr_grpo does not, rloo is leave-one-out"
    ),
    "logging_steps": _trl(
        None,
        "every step's metrics go to every sink; monitor.log_interval sets how often the console "
        "prints a line without a terminal",
    ),
    "num_train_epochs": _trl(None, "a run is loop.steps steps, each on newly sampled tasks"),
    "lr_scheduler_type": _trl(None, "the learning rate is constant (trainer.lr)"),
    "warmup_ratio": _trl(None, "the learning rate is constant (trainer.lr)"),
    "warmup_steps": _trl(None, "the learning rate is constant (trainer.lr)"),
    "adam_beta1": _trl(None, "trainer.adam_betas is the pair, e.g. [0.9, 0.999]"),
    "adam_beta2": _trl(None, "trainer.adam_betas is the pair, e.g. [0.9, 0.999]"),
    "max_prompt_length": _trl(None, "policy.max_context_tokens bounds an episode's whole context"),
    "top_k": _trl(None, "sampling has no top-k (policy.sampling: temperature, top_p)"),
    "use_vllm": _trl(None, "policy.backend: vllm"),
    "bf16": _trl(None, "trainer.mixed_precision: bf16 (and policy.dtype for the sampler's weights)"),
    "report_to": _trl(None, "monitor.sinks: jsonl, tensorboard, wandb, mlflow"),
    # verl (ppo_trainer.yaml): the same meaning
    "data.train_batch_size": _verl("loop.batch_tasks"),
    "data.max_response_length": _verl("policy.sampling.max_new_tokens"),
    _ROLLOUT + "n": _verl("loop.samples_per_task"),
    _ROLLOUT + "temperature": _verl("policy.sampling.temperature"),
    _ROLLOUT + "top_p": _verl("policy.sampling.top_p"),
    _ACTOR + "optim.lr": _verl("trainer.lr"),
    _ACTOR + "optim.weight_decay": _verl("trainer.weight_decay"),
    _ACTOR + "clip_ratio_low": _verl("trainer.clip_low"),
    _ACTOR + "clip_ratio_high": _verl("trainer.clip_high"),
    _ACTOR + "kl_loss_coef": _verl("trainer.kl_coef"),
    _ACTOR + "ppo_epochs": _verl("trainer.epochs"),
    _ACTOR + "ppo_micro_batch_size_per_gpu": _verl("trainer.micro_batch_size"),
    _ACTOR + "grad_clip": _verl("trainer.max_grad_norm"),
    _ACTOR + "loss_agg_mode": _verl(
        "trainer.loss_agg",
        "trainer.loss_agg is token (verl token-mean) or sequence (verl seq-mean-token-mean)",
        {"token-mean": "token", "seq-mean-token-mean": "sequence"},
    ),
    _MODEL + "path": _verl("policy.model"),
    _MODEL + "enable_gradient_checkpointing": _verl("trainer.gradient_checkpointing"),
    _MODEL + "lora_rank": _verl("trainer.lora_rank"),
    _MODEL + "lora_alpha": _verl("trainer.lora_alpha"),
    "algorithm.adv_estimator": _verl("trainer.algorithm"),
    "trainer.total_training_steps": _verl("loop.steps"),
    "trainer.save_freq": _verl("loop.checkpoint_interval"),
    "trainer.test_freq": _verl("loop.eval_interval"),
    "trainer.experiment_name": _verl("name"),
    # verl names whose meaning differs
    "data.max_prompt_length": _verl(None, "policy.max_context_tokens bounds an episode's whole context"),
    _ACTOR + "clip_ratio": _verl(None, "set trainer.clip_low and trainer.clip_high"),
    _ACTOR + "use_kl_loss": _verl(None, "the KL term is on whenever trainer.kl_coef > 0"),
    _ACTOR + "ppo_mini_batch_size": _verl(
        None,
        "one optimiser step per batch and epoch (trainer.epochs); micro-batches: trainer.micro_batch_size",
    ),
    "algorithm.norm_adv_by_std_in_grpo": _verl(
        None, "trainer.algorithm: grpo divides by the group's std, dr_grpo does not"
    ),
    "trainer.total_epochs": _verl(None, "a run is loop.steps steps, each on newly sampled tasks"),
    "trainer.logger": _verl(None, "monitor.sinks: jsonl, tensorboard, wandb, mlflow"),
    "trainer.default_local_dir": _verl(None, "the run directory is output_dir/name"),
    "trainer.resume_mode": _verl(None, "trialground train --resume RUN_DIR"),
}


def _pop(data: dict[str, Any], dotted: str) -> Any:
    """Remove and return the value at `dotted` (`_MISSING` if absent); sections it empties go too."""
    *parents, leaf = dotted.split(".")
    chain = [data]
    for part in parents:
        node = chain[-1].get(part)
        if not isinstance(node, dict):
            return _MISSING
        chain.append(node)
    value = chain[-1].pop(leaf, _MISSING)
    if value is not _MISSING:
        for node, part in zip(reversed(chain[:-1]), reversed(parents), strict=True):
            if node[part]:
                break
            del node[part]
    return value


def _translate(name: str, value: Any, source: str) -> tuple[str, Any]:
    """(trialground key, value) for the alias `name` set to `value`, or `ConfigError`."""
    alias = ALIASES[name]
    if alias.target is None:
        raise ConfigError(
            f"{source}: {name} ({alias.trainer}) has no trialground key of the same meaning: {alias.note} "
            "(docs/glossary.md)"
        )
    if alias.values is not None:
        if not isinstance(value, str) or value not in alias.values:
            known = ", ".join(map(str, alias.values))
            raise ConfigError(f"{source}: {name}={value!r} ({alias.trainer}): only {known} carry over; "
                              f"{alias.note}")  # fmt: skip
        value = alias.values[value]
    return alias.target, value


def alias_override(item: str, source: str = "--set") -> str:
    """A `KEY=VALUE` override with an alias KEY written with trialground's key (and value); others as given.
    An override keeps its meaning: it replaces the file's value, whichever name the file used."""
    key, sep, raw = item.partition("=")
    if not sep or key.strip() not in ALIASES:
        return item
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    target, translated = _translate(key.strip(), value, source)
    return f"{target}={raw if translated is value else translated}"


def apply_aliases(data: dict[str, Any], source: str) -> None:
    """Rename every TRL or verl key in `data` (a config mapping, changed in place) to trialground's; raise
    `ConfigError` naming `source` for a name whose meaning differs, an untranslatable value, or an alias
    given beside its trialground key with another value."""
    for name in ALIASES:
        value = _pop(data, name)
        if value is _MISSING:
            continue
        target, value = _translate(name, value, source)
        *parents, leaf = target.split(".")
        node = data
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{source}: {part!r} is not a section (set through {name})")
            node = child
        if leaf in node and node[leaf] != value:
            raise ConfigError(
                f"{source}: {name} ({ALIASES[name].trainer}'s name for {target}) and {target} disagree "
                f"({value!r}, {node[leaf]!r}): give one"
            )
        node[leaf] = value
