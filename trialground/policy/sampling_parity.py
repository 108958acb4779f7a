"""The sampled distribution is the trained one: every request states it whole, and servers' defaults are
read at start.

A vLLM server fills every sampling field a request leaves out from the model's `generation_config.json`
(Qwen2.5-Instruct: top_k 20, repetition_penalty 1.05) unless it was started with `--generation-config
vllm`; the trainer scores the full softmax at temperature T. So:

- `wire_fields(params)` is what every generation request of the `remote` and `openai` backends carries:
  temperature, top_p, top_k (-1 when off: vLLM and SGLang both read -1 as "all tokens"), min_p and the
  repetition, presence and frequency penalties, at their neutral values unless configured.
- `server_defaults(client, server, model_dir)` reads what a server does with a field a request omits:
  `GET /trialground/info` (`trialground policy serve`: `sampling_defaults`), else vLLM's development route
  `GET /server_info?config_format=json` (`VLLM_SERVER_DEV_MODE=1`): `model_config.generation_config`
  "vllm" means neutral defaults, anything else the model's generation config (read here from the same
  model directory), then `override_generation_config` on top. None when the server says neither.
- `engine_dtype(client, server)` reads the server's weight dtype the same way (pushed weights are cast to
  it).
- `check_defaults(server, defaults, params)` raises `PolicyError` when a server default names a field the
  requests do not state (it would change the distribution), and otherwise returns the warnings to log: a
  default that differs from the run's value (the requests override it, but any program that calls the
  server without stating it samples another distribution).
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from trialground.errors import PolicyError
from trialground.policy.base import DISTRIBUTION_FIELDS, SamplingParams

log = logging.getLogger(__name__)

# The generation-config fields vLLM turns into sampling defaults (ModelConfig.get_diff_sampling_param);
# max_new_tokens is left out: every request states max_tokens.
_GENERATION_CONFIG_FIELDS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
TOP_K_OFF = -1


def wire_fields(params: SamplingParams, *, extras: bool = True) -> dict[str, Any]:
    """The sampling distribution as vLLM's OpenAI-compatible routes take it. `extras=False`: only the
    fields OpenAI's own API has (top_k, min_p and repetition_penalty must then be neutral)."""
    body: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
    }
    if extras:
        body |= {
            "top_k": params.top_k if params.top_k > 0 else TOP_K_OFF,
            "min_p": params.min_p,
            "repetition_penalty": params.repetition_penalty,
        }
    else:
        unsent = {k: v for k, v in params.changed().items() if k in ("top_k", "min_p", "repetition_penalty")}
        if unsent:
            raise PolicyError(
                f"sampling {unsent} cannot be sent to an endpoint limited to OpenAI's fields "
                "(policy.sampling_extras: false)",
                kind="config",
            )
    return body


def server_defaults(client: httpx.Client, server: str, model_dir: Any) -> tuple[str, dict[str, Any]] | None:
    """(where they were read, the server's non-neutral sampling defaults), or None when unknown."""
    try:
        resp = client.get(server + "/trialground/info")
        if resp.status_code == 200 and isinstance(resp.json().get("sampling_defaults"), dict):
            return "/trialground/info", dict(resp.json()["sampling_defaults"])
        resp = client.get(server + "/server_info", params={"config_format": "json"})
        if resp.status_code != 200:
            return None
        config = resp.json().get("vllm_config")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    model = config.get("model_config") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        return None
    mode = model.get("generation_config", "auto")
    found: dict[str, Any] = {} if mode == "vllm" else _generation_config(model_dir)
    override = model.get("override_generation_config") or {}
    if isinstance(override, dict):
        found |= {k: v for k, v in override.items() if k in _GENERATION_CONFIG_FIELDS}
    neutral = SamplingParams().model_dump()
    found = {k: v for k, v in found.items() if not (k in neutral and neutral[k] == v)}
    return f"/server_info (--generation-config {mode})", found


def _generation_config(model_dir: Any) -> dict[str, Any]:
    try:
        from transformers import GenerationConfig

        from trialground.policy.tiny import resolve_model_dir

        diff = GenerationConfig.from_pretrained(resolve_model_dir(model_dir)).to_diff_dict()
    except (OSError, ValueError, ImportError):
        return {}
    return {k: v for k, v in diff.items() if k in _GENERATION_CONFIG_FIELDS}


def check_defaults(server: str, source: str, defaults: dict[str, Any], params: SamplingParams) -> list[str]:
    """Refuse a default on a field requests do not state; return a warning per default that differs."""
    unstated = sorted(set(defaults) - set(DISTRIBUTION_FIELDS))
    if unstated:
        named = {k: defaults[k] for k in unstated}
        raise PolicyError(
            f"{server}: sampling defaults {named} (read from {source}) would "
            "change the sampled distribution and requests do not state them; start the server without them "
            "(vLLM: --generation-config vllm)",
            kind="config",
        )
    warnings = []
    for name, value in sorted(defaults.items()):
        ours = getattr(params, name)
        if name == "top_k" and value in (0, -1):
            continue
        if value != ours:
            warnings.append(
                f"{server}: server default {name}={value!r} (read from {source}) differs from this run's "
                f"{name}={ours!r}; every request states it, so this run samples its own, but programs that "
                "call the server without it sample another distribution (vLLM: --generation-config vllm)"
            )
    return warnings


def engine_dtype(client: httpx.Client, server: str) -> str | None:
    """The server's weight dtype ('bfloat16', ...) from `/trialground/info` or vLLM's `/server_info`; None
    when it says neither."""
    try:
        resp = client.get(server + "/trialground/info")
        if resp.status_code == 200 and isinstance(resp.json().get("dtype"), str):
            return str(resp.json()["dtype"])
        resp = client.get(server + "/server_info", params={"config_format": "json"})
        config = resp.json().get("vllm_config") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    model = config.get("model_config") if isinstance(config, dict) else None
    dtype = model.get("dtype") if isinstance(model, dict) else None
    return str(dtype).removeprefix("torch.") if isinstance(dtype, str) else None
