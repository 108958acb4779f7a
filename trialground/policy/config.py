"""Configuration of the policy."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trialground.plugin import FrozenParams, Params, section_validators
from trialground.policy.base import SamplingParams
from trialground.retry import Backoff


class PolicyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: str = Field(
        "hf",
        description="Generation backend (trialground.policy.backends): hf (in process), vllm (in-process "
        "engine), remote (running vLLM-compatible servers, trainable), openai (any OpenAI-compatible "
        "endpoint, evaluation only), scripted (tests), or a plugin's 'package.module:NAME'",
    )
    params: Params = Field(
        default_factory=FrozenParams,
        description="The backend's own settings, validated against its settings model (a plugin's; the "
        "built-in backends take theirs from the fields below)",
    )
    model: str = Field("tiny", description="'tiny' (bundled), a local HF model directory, or a model name")
    device: str = Field("cpu", description="torch device for the hf backend")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype")
    cpu_threads: int | None = Field(
        1,
        ge=1,
        le=1024,
        description="hf backend on CPU: torch intra-op threads, set process-wide (None: torch's default). "
        "1 is fastest for the tiny model when other work shares the cores (2 threads measured 24x slower "
        "while OpenMP's threads spun; the trialground command lets them sleep: OMP_WAIT_POLICY=PASSIVE)",
    )
    decode: Literal["auto", "transformers"] = Field(
        "auto",
        description="hf backend: 'auto' samples Llama, Mistral, Qwen2, Qwen3 and Gemma 3 models through "
        "trialground's lean decoder (same tokens; 2.4x faster than 'transformers' for 4 prompts x 8 "
        "samples on the tiny model, benchmarks/generation.py), other architectures through "
        "transformers; 'transformers' always uses the model's own forward",
    )
    stream: bool = Field(
        False,
        description="hf backend (in process): an episode gets its generation as soon as its own row "
        "finishes (eos or stop) and runs its environment step while the batch's longer rows still "
        "decode; the same tokens either way. Pays when environment steps wait (0.21 s latency per step: "
        "sync steps 0.88-0.97 s instead of 1.07-1.13 s); with fast local single-turn grading it does not "
        "(early gradings lose their batching)",
    )
    separate_process: bool = Field(
        False,
        description="hf backend: generate in a child process that receives the trainer's weights after "
        "every step, as an inference server would; generation no longer shares the trainer's GIL and "
        "core (async mode on CPU gains most, benchmarks/async_vs_sync.py)",
    )
    observation_role: str = Field(
        "user",
        pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,31}$",
        description="Chat role of the environment's answers in multi-turn episodes: 'user', or the role "
        "the model's chat template gives tool results ('tool' for Qwen, 'ipython' for Llama 3)",
    )
    chat_template: str = Field(
        "auto",
        min_length=1,
        description="How prompts and episodes are rendered: 'auto' (the tokenizer's chat template, else "
        "'plain'), 'own' (the tokenizer's, refused when it has none), 'plain' (base models: the prompt "
        "as text, documented in trialground/policy/templates.py), or the path of a Jinja chat template",
    )
    sampling: SamplingParams = Field(default_factory=SamplingParams, description="Training-time sampling")
    eval_sampling: SamplingParams = Field(
        default_factory=lambda: SamplingParams(temperature=0.0), description="Evaluation sampling"
    )
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (openai backend)")
    max_context_tokens: int = Field(2048, ge=16, description="Context budget of one episode")
    api: Literal["completions", "chat"] = Field(
        "completions",
        description="openai backend: POST /v1/completions (the prompt as text) or /v1/chat/completions",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="openai and remote backends: environment variable with the key"
    )
    tokenizer: str = Field(
        "tiny",
        description="openai/scripted backends: local tokenizer ('tiny' or an HF directory) for token ids",
    )
    request_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="openai and remote backends: seconds per request"
    )
    max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="openai and remote backends: retries of a request after a connection error, a 429 or "
        "a 5xx (exponential backoff with jitter; Retry-After honoured)",
    )
    retry_base_s: float = Field(
        0.5, ge=0, le=60, description="openai and remote backends: the first retry's wait (doubling after)"
    )
    retry_total_s: float = Field(
        120.0,
        ge=0,
        le=3600,
        description="openai and remote backends: no retry wait of a request ends later than this after "
        "its first try",
    )
    sampling_extras: bool = Field(
        True,
        description="openai backend: state top_k, min_p and repetition_penalty in every request (vLLM, "
        "SGLang, policy serve); false for endpoints that refuse fields outside OpenAI's API, which then "
        "need those at their neutral values",
    )
    max_concurrency: int = Field(16, ge=1, le=1024, description="openai backend: requests in flight at once")
    responses: tuple[str, ...] = Field(
        (), description="scripted backend: responses, used in order and cycled"
    )
    gpu_memory_utilization: float = Field(
        0.5, gt=0.0, le=1.0, description="vllm backend: fraction of GPU memory the engine may take"
    )
    servers: tuple[str, ...] = Field(
        (),
        description="remote backend: base URLs of the running inference servers (vLLM's OpenAI-compatible "
        "server or `trialground policy serve`), e.g. http://10.0.0.5:8000; requests go to the least loaded",
    )
    vllm_sleep: bool = Field(
        False,
        description="vllm backend, sync loop: the engine sleeps during each update (weights offloaded to "
        "host memory, KV cache freed) and wakes for the weight push, so a colocated trainer gets the GPU",
    )
    weight_transport: str = Field(
        "collective_rpc",
        description="remote backend: how servers take new weights (policy/backends/remote/weight_push.py): "
        "collective_rpc (vLLM with trialground's worker extension, policy serve: bucket files, drained "
        "around the load), sglang (update_weights_from_disk), vllm_nccl (vLLM's native NCCL transfer)",
    )
    weight_bucket_mb: int = Field(
        512,
        ge=1,
        le=65536,
        description="remote and vllm backends: pushed weights move in buckets of at most this many MiB in "
        "the engine's dtype (a larger tensor is a bucket of its own), each written, sent and loaded on its "
        "own: never a whole extra copy of the model",
    )
    served_model: str | None = Field(
        None, description="remote backend: the servers' model name (None: the first one /v1/models lists)"
    )
    vllm_max_lora_rank: int = Field(
        0,
        ge=0,
        le=1024,
        description="vllm backend: serve LoRA adapters up to this rank (vLLM's enable_lora, max_lora_rank), "
        "so a LoRA run (trainer.lora_rank at most this) pushes only its adapter; 0: merged full weights",
    )
    push_lora_adapter: bool = Field(
        True,
        description="remote backend, LoRA runs (trainer.lora_rank > 0): push only the adapter, loaded by the "
        "servers' runtime LoRA route (vLLM: --enable-lora, VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; SGLang: "
        "--enable-lora; policy serve), and sample with it by name; false: merged full weights every step",
    )
    weight_dir: str | None = Field(
        None,
        description="remote backend: directory, visible to the trainer and every server at this same path, "
        "where each step's weights are written for the servers to load (None: a private temporary "
        "directory, which only works when the servers run on this machine)",
    )

    @field_validator("weight_transport")
    @classmethod
    def _known_transport(cls, name: str) -> str:
        from trialground.policy.backends.remote import TRANSPORTS

        if name not in TRANSPORTS:
            raise ValueError(f"unknown weight transport {name!r}: expected one of {sorted(TRANSPORTS)}")
        return name

    _known_backend, _params_of_backend = section_validators(
        "backend", "trialground.policy.backends:BACKENDS", "policy."
    )

    def backoff(self) -> Backoff:
        """The retry bounds of the openai and remote backends' requests (`trialground.retry`)."""
        return Backoff(attempts=self.max_retries + 1, base_s=self.retry_base_s, total_s=self.retry_total_s)
