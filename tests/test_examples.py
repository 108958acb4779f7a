"""Every file in examples/ validates as shipped: `config validate`'s checks (all but loading the task sets,
which the swe examples build for minutes) pass, or fail only on an extra that installs only on a GPU
machine, in one line; a model directory is bundled, packaged, or made by an `hf download` line the file
itself gives; the file's install line names every extra the run needs beyond trialground[train]."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from trialground.orchestrator.extras import GPU_EXTRAS, needed_extras
from trialground.orchestrator.preflight import cautions, problems
from trialground.orchestrator.run_config import load_config
from trialground.policy.packaged import is_packaged
from trialground.policy.tiny import BUNDLED, tiny_model_dir

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
BASE = {"train", "run"}  # docs/install.md's install: every example may assume it
_INSTALL = re.compile(r"pip install (?:-e )?'(?:\.|trialground)\[([\w,-]+)\]'")
_DOWNLOAD = re.compile(r"hf download (\S+) --local-dir (\S+)")


def _header(path: Path) -> str:
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines[: next(i for i, x in enumerate(lines) if not x.startswith("#"))])


def _expand(extras: set[str]) -> set[str]:
    """Extras with the ones they include (`gemma = ["trialground[gguf]", ...]`), from pyproject.toml."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out, todo = set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra not in out:
            out.add(extra)
            for dep in declared.get(extra, []):
                todo += [x for m in re.findall(r"^trialground\[([\w,-]+)\]$", dep) for x in m.split(",")]
    return out


def test_there_are_gpu_examples() -> None:
    gpu = [p.name for p in EXAMPLES if "vllm" in needed_extras(load_config(p, []))]
    assert {"gpu_humaneval.yaml", "swe_gpu.yaml"} <= set(gpu)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_validates_as_shipped(path: Path, tmp_path: Path) -> None:
    config = load_config(path, [f"output_dir={tmp_path}"])
    header = _header(path)
    named = _expand({x for m in _INSTALL.findall(header) for x in m.split(",")})
    missing = set(needed_extras(config)) - BASE - named
    assert not missing, f"{path.name}: its install line does not name {sorted(missing)}"
    model = config.policy.model
    if model not in BUNDLED and not is_packaged(model):
        downloads = dict((d, hub) for hub, d in _DOWNLOAD.findall(header))
        assert model in downloads, f"{path.name}: policy.model={model!r} is made by no `hf download` line"
        # the documented step done (a model directory there): what is left to fail
        policy = config.policy.model_copy(update={"model": str(tiny_model_dir())})
        config = config.model_copy(update={"policy": policy})
    found = problems(config, "train")
    gpu_lines = [p for p in found if any(f"pip install 'trialground[{e}]'" in p for e in GPU_EXTRAS)]
    assert found == gpu_lines, f"{path.name}: {found}"
    assert len(gpu_lines) <= len(GPU_EXTRAS)  # one line an extra
    assert all("\n" not in line for line in [*found, *cautions(config)])


def _qwen25() -> dict[str, dict[str, object]]:
    """The Qwen2.5 shapes of docs/memory.md's table (benchmarks/memory_model.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("memory_bench", ROOT / "benchmarks" / "memory_model.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return dict(bench.QWEN25)


# The GPU examples' models (instruct and coder variants share their base model's shape)
GPU_MODELS = {"gpu_humaneval.yaml": "0.5B", "swe_gpu.yaml": "7B"}


@pytest.mark.parametrize("name", sorted(GPU_MODELS))
def test_gpu_example_fits_one_80gb_gpu_by_the_estimate(name: str, tmp_path: Path) -> None:
    import json

    from trialground.orchestrator.memory_check import memory_problems

    model = tmp_path / "model"  # the downloaded directory's config.json is all the estimate reads
    model.mkdir()
    (model / "config.json").write_text(json.dumps(_qwen25()[GPU_MODELS[name]]))
    on = [f"policy.model={model}", f"output_dir={tmp_path}"]
    h100 = load_config(ROOT / "examples" / name, [*on, "trainer.device_memory_gib=79.6"])  # 81,559 MiB
    assert memory_problems(h100) == []
    smaller = load_config(ROOT / "examples" / name, [*on, "trainer.device_memory_gib=20"])
    assert memory_problems(smaller)  # the estimate is not vacuous: a quarter of the memory is refused
