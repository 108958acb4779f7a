"""TRL's and verl's names in a run config: renamed where they mean the same, refused with a pointer where not,
and a config written with them trains exactly as one written with trialground's names."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import yaml

from trialground.errors import ConfigError
from trialground.orchestrator.aliases import ALIASES
from trialground.orchestrator.run_config import load_config

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
TINY = [
    "loop.steps=2", "loop.eval_interval=0", "loop.probe_interval=0", "loop.batch_tasks=2",
    "tasks.num_train=20", "tasks.num_eval=2", "policy.eval_sampling.max_new_tokens=16",
]  # fmt: skip
OURS = {"loop": {"samples_per_task": 3}, "trainer": {"kl_coef": 0.05, "loss_agg": "sequence"},
        "policy": {"sampling": {"max_new_tokens": 20}}}  # fmt: skip
TRL = {"num_generations": 3, "beta": 0.05, "loss_type": "grpo", "max_completion_length": 20}


def _merged(base: dict[str, object], extra: dict[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in extra.items():
        below = out.get(key)
        out[key] = _merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return out


def _config(tmp_path: Path, name: str, data: dict[str, object], *extra: str):  # type: ignore[no-untyped-def]
    base = yaml.safe_load(QUICKSTART.read_text())  # without the knobs the tests set
    del base["loop"]["samples_per_task"], base["policy"]["sampling"]["max_new_tokens"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(_merged(base, data)))
    return load_config(path, [*TINY, f"output_dir={tmp_path}", f"name={name}", *extra])


def test_trl_and_verl_names_resolve_to_the_same_config(tmp_path: Path) -> None:
    ours = _config(tmp_path, "x", OURS)
    assert _config(tmp_path, "x", TRL) == ours
    verl = {"actor_rollout_ref": {"rollout": {"n": 3}, "actor": {"kl_loss_coef": 0.05,
            "loss_agg_mode": "seq-mean-token-mean"}}, "data": {"max_response_length": 20}}  # fmt: skip
    assert _config(tmp_path, "x", verl) == ours
    sets = ["num_generations=3", "beta=0.05", "loss_type=grpo"]
    assert _config(tmp_path, "x", {"max_completion_length": 20}, *sets) == ours
    # an override replaces the file's value whichever name either used
    assert _config(tmp_path, "x", {**TRL, "beta": 0.5}, "trainer.kl_coef=0.05") == ours
    assert _config(tmp_path, "x", _merged(OURS, {"trainer": {"kl_coef": 0.5}}), "beta=0.05") == ours


def test_a_name_of_another_meaning_is_refused_with_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"per_device_train_batch_size \(TRL\).*loop\.batch_tasks"):
        _config(tmp_path, "x", {"per_device_train_batch_size": 8})
    with pytest.raises(ConfigError, match=r"loss_type='dr_grpo' \(TRL\): only dapo, grpo carry over"):
        _config(tmp_path, "x", {"loss_type": "dr_grpo"})
    with pytest.raises(ConfigError, match=r"beta \(TRL's name for trainer.kl_coef\) and trainer.kl_coef"):
        _config(tmp_path, "x", {"beta": 0.1, "trainer": {"kl_coef": 0.2}})
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.use_kl_loss \(verl\)"):
        _config(tmp_path, "x", {}, "actor_rollout_ref.actor.use_kl_loss=true")


def test_the_glossary_lists_every_alias_and_every_target_exists() -> None:
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    named = set(re.findall(r"`([a-z0-9_.]+)`", glossary))
    missing = [name for name in ALIASES if name not in named]
    assert not missing, missing
    defaults = json.loads(load_config(None).model_dump_json())
    for alias in ALIASES.values():
        if alias.target is not None:
            node = defaults
            for part in alias.target.split("."):
                node = node[part]  # KeyError: an alias to a key that does not exist


@pytest.mark.slow
def test_a_config_in_trls_names_trains_exactly_as_ours(tmp_path: Path) -> None:
    from trialground.orchestrator.loop import run

    def metrics(name: str, data: dict[str, object]) -> list[dict[str, float]]:
        asyncio.run(run(_config(tmp_path, name, data)))
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [
            {k: v for k, v in r.items() if k in ("step", "reward/mean", "train/loss", "train/kl")}
            for r in rows
        ]

    ours, trl = metrics("ours", OURS), metrics("trl", TRL)
    assert [m["step"] for m in ours] == [0, 1, 2] and ours == trl
