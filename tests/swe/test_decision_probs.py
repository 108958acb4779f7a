"""`scripts/decision_probs.py`: the probability a policy gives each repair call, turn by turn, equals the
model's own likelihood of that exact call (batched rows padded after the call change nothing)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from script_helpers import load_script  # noqa: E402

from trialground.policy.tiny import FIX_NAME, resolve_model_dir  # noqa: E402
from trialground.rollout.chat import ChatRenderer  # noqa: E402


@pytest.mark.slow
def test_each_call_gets_the_models_own_likelihood_of_it() -> None:
    script = load_script("scripts/decision_probs.py")
    where = resolve_model_dir(FIX_NAME)
    tok = transformers.AutoTokenizer.from_pretrained(where)
    model = transformers.LlamaForCausalLM.from_pretrained(where).eval()
    calls = script.repair_calls()
    listing = "2 fixes in inflection/__init__.py for 1 failing tests (454 passing):\n1. line 3: a -> b"
    trace = {
        "prompt": "The `inflection` library in /workspace has a bug: 1 of its tests fail. Fix the library.",
        "turns": [[calls[0], listing], [calls[3], "applied fix 1 at inflection/__init__.py:3"]],
    }
    turns = script.decision_probs(model, tok, trace, calls)
    assert len(turns) == 2 and all(set(calls) <= set(t) for t in turns)
    for t in turns:  # distinct complete calls are disjoint events
        assert all(0.0 <= p <= 1.0 for p in t.values()) and sum(t.values()) <= 1.0 + 1e-6
    # turn 1 recomputed alone, unpadded, from the model's loss over the call's tokens
    renderer = ChatRenderer(tok)
    context = renderer.prompt_ids([{"role": "user", "content": trace["prompt"]}])
    first = [*tok.encode(calls[0], add_special_tokens=False), tok.eos_token_id]
    context += first + renderer.observation_ids(listing, role="user", after=first)
    for call in (calls[1], calls[3]):
        own = [*tok.encode(call, add_special_tokens=False), tok.eos_token_id]
        ids = torch.tensor([context + own])
        labels = torch.tensor([[-100] * len(context) + own])
        with torch.no_grad():
            loss = model(ids, labels=labels).loss.item()
        assert turns[1][call] == pytest.approx(math.exp(-loss * len(own)), rel=1e-3)
