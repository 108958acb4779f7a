"""A LoRA run pushes its adapter alone to the servers: written in PEFT's format, loaded by `policy serve`
through vLLM's runtime LoRA route (`/v1/load_lora_adapter`), sampled by name; the served weights equal
the trainer's merged weights after every push (adapters never accumulate), and the bytes pushed are the
adapter's, not the model's (real tiny model, real server over HTTP on a kernel-picked port)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from trialground.gateway.reference import ReferenceServer
from trialground.orchestrator.wiring import push_start, sync_weights
from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.backends.remote.remote import RemotePolicy
from trialground.policy.base import SamplingParams
from trialground.policy.config import PolicyConfig
from trialground.policy.factory import make_policy
from trialground.train.config import TrainerConfig
from trialground.train.trainer import Trainer

torch = pytest.importorskip("torch")

KEY = "test-key"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReferenceServer]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    started = ReferenceServer(HFPolicy(PolicyConfig(model="tiny")), served_name="tiny", api_key=KEY)
    threading.Thread(target=started.serve_forever, daemon=True).start()
    yield started
    started.shutdown()


def _train_a_little(trainer: Trainer, seed: int) -> None:
    """Move the adapter as a step would (peft starts B at zero, so the first adapter changes nothing)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in trainer.model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    trainer.version += 1


def _served_equals_trained(server: ReferenceServer, trainer: Trainer) -> None:
    served = server.policy.model.state_dict()
    for name, want in trainer.state_dict().items():
        assert torch.allclose(served[name].float(), want.float(), atol=1e-6), name


async def test_only_the_adapter_moves_and_the_server_samples_with_it(
    server: ReferenceServer, tmp_path: Path
) -> None:
    remote = make_policy(PolicyConfig(backend="remote", servers=(server.url,), weight_dir=str(tmp_path)))
    assert isinstance(remote, RemotePolicy) and remote.takes_adapters
    trainer = Trainer(HFPolicy(PolicyConfig(model="tiny")).model, TrainerConfig(lora_rank=4, lora_alpha=8), 0)
    _train_a_little(trainer, 0)  # a resumed run: its adapter is not zero at the start
    push_start(trainer, remote)  # the base weights whole, then the adapter on top
    _served_equals_trained(server, trainer)
    adapter_bytes = []
    for seed in (1, 2, 3):
        _train_a_little(trainer, seed)
        sync_weights(trainer, remote)  # the run's own path: adapter alone for a policy that takes them
        adapter_bytes.append(remote.pushed_bytes)
        _served_equals_trained(server, trainer)
        (gen,) = await remote.generate([[1, 2, 3]], SamplingParams(max_new_tokens=4, temperature=0.0))
        assert gen.version == trainer.version
    names = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert [m["id"] for m in names["data"]] == ["tiny", "tiny-lora-v4"]  # requests name the adapter
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lora-v00000003", "lora-v00000004", "v00000001"]
    # the same weights merged and pushed whole: what a LoRA run sent before
    remote.load_weights(trainer.state_dict(), trainer.version + 1)
    full = remote.pushed_bytes
    _served_equals_trained(server, trainer)
    assert max(adapter_bytes) * 10 < full, (adapter_bytes, full)
    print(f"pushed bytes: adapter {adapter_bytes[-1]}, merged full {full}")


def test_a_bad_adapter_is_refused_by_name(server: ReferenceServer, tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    (tmp_path / "adapter_config.json").write_text('{"r": 4, "lora_alpha": 8, "use_dora": true}')
    r = httpx.post(
        server.url + "/v1/load_lora_adapter",
        json={"lora_name": "x", "lora_path": str(tmp_path)},
        headers=auth,
    )
    assert r.status_code == 400 and "lora_path" in r.text
    r = httpx.post(server.url + "/v1/unload_lora_adapter", json={"lora_name": "x"}, headers=auth)
    assert r.status_code == 404
    r = httpx.post(server.url + "/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "/x"})
    assert r.status_code == 401


def test_the_adapter_files_are_what_peft_itself_loads(tmp_path: Path) -> None:
    """The files vLLM and SGLang read are PEFT's format: PEFT's own loader, merged, gives the trainer's
    weights."""
    from peft import PeftModel

    from trialground.policy.adapters import write_adapter

    trainer = Trainer(HFPolicy(PolicyConfig(model="tiny")).model, TrainerConfig(lora_rank=4, lora_alpha=8), 0)
    _train_a_little(trainer, 7)
    adapter = trainer.adapter()
    assert adapter is not None
    write_adapter(adapter, tmp_path / "adapter")
    merged = PeftModel.from_pretrained(HFPolicy(PolicyConfig(model="tiny")).model, tmp_path / "adapter")
    got = merged.merge_and_unload().state_dict()
    for name, want in trainer.state_dict().items():
        assert torch.allclose(got[name], want, atol=1e-6), name
