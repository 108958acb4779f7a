"""The typed run configuration: YAML, dotted overrides, and errors that say file, path and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from trialground.errors import ConfigError
from trialground.orchestrator.run_config import RunConfig, dump_config, load_config

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"


def test_quickstart_config_loads() -> None:
    cfg = load_config(QUICKSTART)
    assert cfg.name == "quickstart"
    assert cfg.sandbox.backend == "bwrap"
    assert cfg.loop.samples_per_task >= 2


def test_overrides_are_typed_and_nested() -> None:
    cfg = load_config(QUICKSTART, ["trainer.lr=1e-5", "loop.steps=3", "sandbox.limits.memory_mb=128"])
    assert cfg.trainer.lr == pytest.approx(1e-5)
    assert cfg.loop.steps == 3
    assert cfg.sandbox.limits.memory_mb == 128


def test_dump_round_trips(tmp_path: Path) -> None:
    cfg = load_config(QUICKSTART, ["loop.steps=2"])
    out = tmp_path / "resolved.yaml"
    out.write_text(dump_config(cfg))
    assert load_config(out) == cfg


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        ("trainer:\n  lrr: 0.1\n", "trainer.lrr", "Extra inputs are not permitted"),
        ("loop:\n  steps: many\n", "loop.steps", "valid integer"),
        ("trainer:\n  lr: -1\n", "trainer.lr", "greater than 0"),
        ("sandbox:\n  backend: docker\n", "sandbox.backend", "backend 'docker': known are bwrap"),
        ("loop:\n  samples_per_task: 0\n", "loop.samples_per_task", "greater than or equal to 1"),
    ],
)
def test_bad_values_name_file_path_and_expectation(
    tmp_path: Path, text: str, path: str, expected: str
) -> None:
    bad = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    message = str(err.value)
    assert str(bad) in message
    assert path in message
    assert expected in message


def test_bad_override_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"loop\.steps"):
        load_config(None, ["loop.steps=-4"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(None, ["loop.steps"])
    with pytest.raises(ConfigError, match="is not a section"):
        load_config(QUICKSTART, ["name.sub=1"])


def test_not_a_mapping_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "a: [1\n"))
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.yaml")


def test_every_field_is_described() -> None:
    def walk(model: type, prefix: str) -> None:
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            assert field.description, f"{prefix}{name} has no description"
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann, f"{prefix}{name}.")

    walk(RunConfig, "")
