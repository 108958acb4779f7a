"""The memory model (train.memory_model) against what the trainer holds, and the check before a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import PAD, tiny_llama, traj
from transformers import Qwen2Config, Qwen2ForCausalLM
from typer.testing import CliRunner

from trialground.cli import app
from trialground.orchestrator import memory_check
from trialground.train.advantages import with_advantages
from trialground.train.config import TrainerConfig
from trialground.train.memory_model import GIB, ModelShape, TrainSetup, estimate
from trialground.train.precision import trainer_dtype

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
# The trainer's state (weights + gradients + optimiser) is counted exactly: the model predicts it to the
# byte for a model whose every parameter is an evenly split tensor; the test allows 1 %.
STATE_TOLERANCE = 0.01


def _qwen2() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg).eval()


@pytest.mark.parametrize("make", [tiny_llama, _qwen2], ids=["llama_tied", "qwen2_bias_untied"])
def test_the_shape_counts_parameters_as_the_model_has_them(make: object, tmp_path: Path) -> None:
    model = make()  # type: ignore[operator]
    numel = sum(p.numel() for p in model.parameters())
    assert ModelShape.from_hf_config(model.config.to_dict()).params == numel  # from config.json alone
    model.save_pretrained(tmp_path)
    assert ModelShape.from_model_dir(tmp_path).params == numel  # from the safetensors headers


def test_the_doc_table_models_have_their_published_sizes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("memory_bench", ROOT / "benchmarks" / "memory_model.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # the shapes docs/memory.md's table is computed for
    QWEN25 = bench.QWEN25
    published = {"0.5B": 0.494e9, "1.5B": 1.54e9, "7B": 7.62e9, "14B": 14.77e9}
    for name, cfg in QWEN25.items():
        assert ModelShape.from_hf_config(cfg).params == pytest.approx(published[name], rel=0.005), name


def _batch() -> list:
    trajs = [
        traj([1, 2, 3], [("policy", [4, 5, 6], [-1.0, -1.0, -1.0])], group="g", index=i) for i in range(2)
    ]
    return with_advantages(trajs, [1.0, -1.0])


@pytest.mark.parametrize(
    ("dtype", "lora"), [("float32", 0), ("bfloat16", 0), ("float32", 4), ("bfloat16", 4)]
)
def test_one_process_holds_the_predicted_state(dtype: str, lora: int) -> None:
    from trialground.train.trainer import Trainer

    model = tiny_llama()
    for p in model.parameters():
        p.data = p.data.to(trainer_dtype(dtype))
    trainer = Trainer(model, TrainerConfig(lora_rank=lora, micro_batch_size=2), PAD)
    trainer.step(_batch())
    measured = sum(trainer.state_bytes.values())
    shape = ModelShape.from_hf_config(tiny_llama().config.to_dict())
    predicted = estimate(shape, TrainSetup(dtype=dtype, lora_rank=lora))
    assert predicted.state == pytest.approx(measured, rel=STATE_TOLERANCE), (trainer.state_bytes, predicted)


def test_fsdp_state_is_the_shards_and_ddp_adds_its_buckets() -> None:
    shape = ModelShape.from_hf_config(_qwen2().config.to_dict())
    one = estimate(shape, TrainSetup())
    fsdp = estimate(shape, TrainSetup(parallel="fsdp", world=8, dtype="bfloat16"))
    ddp = estimate(shape, TrainSetup(parallel="ddp", world=8))
    assert fsdp.state == pytest.approx(one.state / 8, rel=0.01)
    assert ddp.state == one.state and ddp.comm == 4 * shape.params
    offload = estimate(shape, TrainSetup(parallel="fsdp", world=8, cpu_offload=True))
    assert offload.state == 0 and offload.host == pytest.approx(one.state / 8, rel=0.01)
    accumulating = estimate(shape, TrainSetup(parallel="fsdp", world=8, micro_batches=4))
    assert accumulating.comm - fsdp.comm >= 4 * shape.params and accumulating.notes


def test_checkpointing_and_logit_chunks_bound_the_sequence_terms() -> None:
    shape = ModelShape.from_hf_config(_qwen2().config.to_dict())
    base = TrainSetup(seq_tokens=16384, dtype="bfloat16")
    full = estimate(shape, base)
    ckpt = estimate(shape, TrainSetup(**{**base.__dict__, "checkpointing": True, "logit_chunk": 512}))
    assert ckpt.activations < full.activations / 1.5
    assert ckpt.logits == 512 * shape.vocab * 16 and full.logits == 16384 * shape.vocab * 16


def test_the_check_uses_the_trainers_dtype_rule() -> None:
    for name in ("float32", "bfloat16", "float16"):
        assert str(trainer_dtype(name)) == f"torch.{memory_check._TRAINED[name]}"


def test_a_run_that_cannot_fit_is_refused_before_it_starts(tmp_path: Path) -> None:
    from trialground.orchestrator.run_config import load_config

    runner = CliRunner()
    small = ["--set", "trainer.device_memory_gib=1"]
    out = runner.invoke(app, ["config", "validate", str(QUICKSTART), *small])
    assert out.exit_code == 2, out.output
    assert "trainer memory: memory estimate per rank" in out.output and "does not fit" in out.output
    assert "trainer.device_memory_gib" in out.output
    run_dir = tmp_path / "runs"
    refused = runner.invoke(app, ["train", str(QUICKSTART), *small, "--set", f"output_dir={run_dir}"])
    assert refused.exit_code == 2 and "does not fit" in refused.output
    assert not run_dir.exists()  # refused before anything was created
    roomy = load_config(QUICKSTART, ["trainer.device_memory_gib=64"])
    assert memory_check.memory_problems(roomy) == []
    assert memory_check.memory_problems(load_config(QUICKSTART, [])) == []  # on a CPU: no device to check


def test_a_run_prints_its_estimate_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trialground.cli.run_cmd import _config

    _config(QUICKSTART, [f"output_dir={tmp_path}"], None)  # what `train` does before the run starts
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("memory estimate per rank:")]
    assert line.endswith("one process, 16 x 2048 tokens a micro-batch"), line


def test_a_run_within_the_measured_margin_is_cautioned_not_refused() -> None:
    from trialground.orchestrator.run_config import load_config

    est = memory_check.run_estimate(load_config(QUICKSTART, []))
    assert est is not None
    reserve = memory_check.RESERVE_BYTES
    tight = (est.device * (1 + memory_check.MEASURED_OVER) / 2 + reserve) / GIB  # between the two bounds
    config = load_config(QUICKSTART, [f"trainer.device_memory_gib={tight}"])
    assert memory_check.memory_problems(config) == []
    (caution,) = memory_check.memory_cautions(config)
    assert "may still run out of memory" in caution
    roomy = load_config(QUICKSTART, [f"trainer.device_memory_gib={2 * est.device / GIB + 4}"])
    assert memory_check.memory_cautions(roomy) == []
