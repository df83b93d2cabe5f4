"""What the offline engine (:mod:`hxd2_ray.llm.vllm_engine`) and the async engine (:mod:`hxd2_ray.llm.vllm_async`)
set up the same way: the process environment, the engine arguments and the sampling parameters.

vLLM is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from hxd2_ray.config import VllmLLMConfig
from hxd2_ray.llm.base import LLMRequest
from hxd2_ray.models import resolve_llm_path

_log = logging.getLogger(__name__)


def resolve_model_path(model: str) -> str:
    """``builtin:smollm2-135m-instruct`` → the converted local folder; anything else must be a local folder."""
    path = resolve_llm_path(model)
    if not Path(path).is_dir():
        # No hub downloads at run time: a model is a folder baked into the image or fetched beforehand.
        raise FileNotFoundError(f"LLM model folder not found: {model!r} (give a local folder or a builtin: name)")
    return path


def prepare_process(cfg: VllmLLMConfig) -> None:
    """Environment an engine needs before it starts in this process."""
    # Local folders only: never let transformers/vLLM wait on the hub from an offline cluster node.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    if not torch.cuda.is_available():
        # The CPU backend sizes its KV cache from this variable (GiB), not from gpu_memory_utilization.
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.cpu_kv_cache_gb)
        if cfg.dtype == "bfloat16" and not cpu_computes_bf16():
            _log.warning(
                "llm.dtype is bfloat16 but this CPU has no AVX-512 BF16 or AMX instructions: vLLM emulates bf16 "
                "and runs 3.5-5x slower than with llm.dtype: float32"
            )


def cpu_computes_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU has bf16 arithmetic (AVX-512 BF16 or AMX). Without it vLLM's CPU kernels convert every bf16
    operand: on a 2-core AVX2 EPYC, SmolLM2-135M prefilled 1,929 tokens in 24.5 s in bf16 against 5.1 s in fp32,
    and decoded 16 sequences at 52 against 182 tokens/s. A machine whose flags cannot be read counts as having it
    (no warning on a guess)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return True
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    return flags is None or bool({"avx512_bf16", "amx_bf16"} & set(flags))


@contextlib.contextmanager
def caller_ld_preload() -> Iterator[None]:
    """Put this process's ``LD_PRELOAD`` back after the block.

    vLLM's CPU platform appends tcmalloc / torch's libgomp to ``LD_PRELOAD`` of *this* process so the workers
    it spawns get them; every later subprocess (Ray workers, test subprocesses, tools) would inherit that too.
    """
    ld_preload = os.environ.get("LD_PRELOAD")
    try:
        yield
    finally:
        if ld_preload is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = ld_preload


@contextlib.contextmanager
def engine_start_scan_safe() -> Iterator[None]:
    """While an engine starts in this process, vLLM's start-up kernel scan skips module attributes it cannot read.

    When its CPU worker starts, vLLM (0.32, ``vllm/triton_utils/dispatcher.py::_rebind_kernels``) walks every
    attribute of every loaded module, rebinding its Triton kernels to their CPU overrides: an attribute that *is*
    a kernel is replaced, and an object holding one in ``vars(value)["kernel"]`` gets the override. An attribute
    whose ``__dict__`` is not a mapping, or whose lookup raises, stops that walk and the engine never starts:
    llvmlite's ``ffi.lib`` (loaded by numba, which ``bm25s``, the lexical channel, imports) answers ``__dict__``
    with a C-function wrapper; a werkzeug proxy such as flask's ``request`` raises outside a request. Hiding such
    attributes from their modules during the start broke code that reads them meanwhile (vLLM's logging set-up
    flushes every handler, and flask's reads its ``request``). So the scan itself is replaced, for the start only,
    by :func:`_rebind_kernels_past_unreadable`: the same rebinding, past what it cannot read.
    """
    try:
        from vllm.triton_utils import dispatcher
    except ImportError:  # a vLLM without the scan
        yield
        return
    scan = getattr(dispatcher, "_rebind_kernels", None)
    if scan is None:
        yield
        return
    setattr(dispatcher, "_rebind_kernels", _rebind_kernels_past_unreadable)  # vLLM has no hook for it
    try:
        yield
    finally:
        setattr(dispatcher, "_rebind_kernels", scan)


# What reading an attribute's instance dict may raise: llvmlite's ffi.lib (AttributeError on .get), a werkzeug
# proxy outside its context (RuntimeError), a lazy module's placeholder (ImportError, a LookupError), vars() on an
# object with a non-dict __dict__ (TypeError).
_UNREADABLE = (AttributeError, RuntimeError, TypeError, LookupError, ImportError, NameError)


def _rebind_kernels_past_unreadable(overrides: list[tuple[Any, Any]]) -> None:
    """vLLM's kernel rebinding: every module attribute that is an original kernel becomes its override, and every
    object holding an original kernel as its instance attribute ``kernel`` holds the override (its cached
    ``_kernel_arg_names`` dropped); attributes that cannot be read are not kernels' holders and are passed over."""
    by_identity = {id(original): override for original, override in overrides}  # identity only: no __eq__ runs
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            override = by_identity.get(id(value))
            if override is not None:
                setattr(module, attr, override)
                continue
            try:
                held = vars(value).get("kernel") if hasattr(value, "__dict__") else None
            except _UNREADABLE:
                continue
            override = by_identity.get(id(held)) if held is not None else None
            if override is None:
                continue
            value.kernel = override
            if not isinstance(value, type):
                value.__dict__.pop("_kernel_arg_names", None)


def engine_kwargs(cfg: VllmLLMConfig, model_path: str, served_name: str) -> dict[str, Any]:
    """Arguments shared by ``vllm.LLM(...)`` and ``AsyncEngineArgs(...)``."""
    return {
        "model": model_path,
        "tokenizer": model_path,
        "max_model_len": cfg.max_model_len,
        "dtype": cfg.dtype,
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "enforce_eager": cfg.enforce_eager,
        "max_num_seqs": cfg.max_num_seqs,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        # "vllm" ignores the model's generation_config.json (which may carry sampling defaults and a
        # max_new_tokens cap), so results depend only on our SamplingParams.
        "generation_config": "vllm",
        "served_model_name": served_name,
    }


def structured_outputs_kwargs(compact_json: bool) -> dict[str, Any]:
    """Engine-wide structured-output settings ({} = vLLM's "auto" backend, whitespace allowed in JSON).

    Compact JSON: without it the grammar lets the model emit newlines/indentation between every token, which
    costs generation tokens and lets small models loop on whitespace until max_tokens. The switch is
    engine-wide (the per-request ``StructuredOutputsParams.disable_any_whitespace`` is ignored by vLLM 0.32) and
    only exists for the xgrammar/guidance backends, so xgrammar is pinned; our schemas are plain enough for it.
    """
    return {"backend": "xgrammar", "disable_any_whitespace": True} if compact_json else {}


def sampling_params(req: LLMRequest, max_tokens: int, **extra: Any) -> Any:
    """``SamplingParams`` for one request: greedy at temperature 0, JSON schema or choice constraints, stop strings.

    No per-request seed: it crashed the CPU engine (env-probe); temperature 0 is greedy anyway.
    """
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    structured = None
    if req.json_schema is not None:
        structured = StructuredOutputsParams(json=dict(req.json_schema))
    elif req.choices:
        structured = StructuredOutputsParams(choice=list(req.choices))
    if req.stop:
        extra.setdefault("stop", list(req.stop))
    return SamplingParams(temperature=req.temperature, max_tokens=max_tokens, structured_outputs=structured, **extra)


def api_server_command(
    python: str, model_folder: str, served_name: str, port: int, max_num_seqs: int = 64, dtype: str = "float32"
) -> list[str]:
    """vLLM's OpenAI API server on 127.0.0.1 with the in-process engine's settings (context, dtype, eager mode,
    the compact-JSON grammar), so the two backends are compared on one engine configuration (the OpenAI-backend
    tests, bench/openai_vs_inprocess.py). The module, not the ``vllm`` console script: the vllm-cpu
    distribution's script fails on its own version lookup."""
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_folder,
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "4096",
        "--dtype",
        dtype,  # the shipped CPU config's (hxd2_ray/config/local.yaml)
        "--enforce-eager",
        "--max-num-seqs",
        str(max_num_seqs),
        "--generation-config",
        "vllm",
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
        "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens: the prefix-cache hits
    ]
