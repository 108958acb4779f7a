"""Shared fixtures: the bundled tiny model loaded once per module."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="policy tests need the [train] extra (torch, transformers)")

from trialground.policy.backends.hf.hf import HFPolicy
from trialground.policy.config import PolicyConfig


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    return HFPolicy(PolicyConfig(model="tiny"))
