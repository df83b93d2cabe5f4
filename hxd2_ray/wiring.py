"""The one place where configuration becomes concrete classes.

Everything heavy (vLLM, torch, FlagEmbedding) is imported inside the branch that needs it, so importing this
module, or building the scripted LLM and the hashing embedder, loads none of them. Ray actors call these
builders in ``__init__``, so each actor pays only for the backend it actually runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hxd2_ray.config import (
    EmbeddingConfig,
    FlagEmbeddingConfig,
    FlagRerankerConfig,
    HashingEmbeddingConfig,
    LLMConfig,
    NoRerankerConfig,
    OverlapRerankerConfig,
    RerankConfig,
    ScriptedLLMConfig,
    VllmLLMConfig,
)

if TYPE_CHECKING:
    from hxd2_ray.embedding.base import Embedder
    from hxd2_ray.llm.base import LLMClient
    from hxd2_ray.rerank.base import Reranker


def build_llm(cfg: LLMConfig, *, concurrent: bool = False) -> "LLMClient":
    """``concurrent``: the caller will call from many threads at once and wants the calls batched together
    (vLLM: the async engine behind a thread-safe facade; the scripted LLM is used as it is)."""
    match cfg:
        case ScriptedLLMConfig():
            from hxd2_ray.llm.scripted import ScriptedLLM

            # from_config builds the built-in deterministic extraction mode (no script given).
            return ScriptedLLM.from_config(cfg)
        case VllmLLMConfig() if concurrent:
            from hxd2_ray.llm.threaded import ThreadedVllmLLM

            return ThreadedVllmLLM(cfg)
        case VllmLLMConfig():
            from hxd2_ray.llm.vllm_engine import VllmEngineLLM

            return VllmEngineLLM(cfg)
    raise TypeError(f"no LLM backend for {type(cfg).__name__}")


def build_embedder(cfg: EmbeddingConfig) -> "Embedder":
    match cfg:
        case HashingEmbeddingConfig():
            from hxd2_ray.embedding.hashing import HashingEmbedder

            return HashingEmbedder(dim=cfg.dim, model_id=cfg.model_id)
        case FlagEmbeddingConfig():
            from hxd2_ray.embedding.flag_model import FlagModelEmbedder

            return FlagModelEmbedder(cfg)
    raise TypeError(f"no embedding backend for {type(cfg).__name__}")


def build_reranker(cfg: RerankConfig) -> "Reranker | None":
    """The configured reranker; None when reranking is off (``rerank.backend: none``)."""
    match cfg:
        case NoRerankerConfig():
            return None
        case OverlapRerankerConfig():
            from hxd2_ray.rerank.overlap import OverlapReranker

            return OverlapReranker(cfg.model_id)
        case FlagRerankerConfig():
            from hxd2_ray.rerank.flag_reranker import FlagRerankerBackend

            return FlagRerankerBackend(cfg)
    raise TypeError(f"no reranker backend for {type(cfg).__name__}")
