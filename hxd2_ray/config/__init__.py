"""Typed, frozen configuration loaded from YAML, with dotted overrides and a fingerprint for indexes.

Every section is a pydantic model with ``extra="forbid"``; unknown keys and bad values raise
:class:`~hxd2_ray.errors.ConfigError` with the valid keys or values listed. One module per section (``retrieval``
is a package of one module per concern, under the same flat keys); :mod:`hxd2_ray.config.base` holds the markers
that keep a field out of an index's fingerprint, :mod:`hxd2_ray.config.loading` the YAML loading.
"""

from __future__ import annotations

from hxd2_ray.config.base import (
    GRAPH_ONLY,
    MODEL_ID,
    NOT_IN_INDEX,
    FingerprintScope,
    FrozenSection,
    fingerprint_factors,
    fingerprint_scope,
)
from hxd2_ray.config.embedding import (
    EmbeddingConfig,
    FlagEmbeddingConfig,
    HashingEmbeddingConfig,
    embedding_model_id,
)
from hxd2_ray.config.extraction import DEFAULT_ENTITY_TYPES, ChunkingConfig, ExtractionConfig
from hxd2_ray.config.graphflow import GraphFlowConfig
from hxd2_ray.config.index import (
    TITLE_SCAN_RULES,
    GenerationsConfig,
    GraphConfig,
    SynonymConfig,
    TitleMentionConfig,
    VectorsConfig,
    synonym_factors,
    title_mention_factors,
    vector_factors,
)
from hxd2_ray.config.llm import LLMConfig, OpenAILLMConfig, ScriptedLLMConfig, VllmLLMConfig, llm_model_id
from hxd2_ray.config.loading import SHIPPED_CONFIG, config_from_data, load_config, load_shipped_config, validate_config
from hxd2_ray.config.multistage import MultiStageConfig
from hxd2_ray.config.refusal import RefusalGate
from hxd2_ray.config.rerank import FlagRerankerConfig, NoRerankerConfig, OverlapRerankerConfig, RerankConfig
from hxd2_ray.config.retrieval import RetrievalConfig
from hxd2_ray.config.root import HxdConfig, stand_ins
from hxd2_ray.config.runtime import CostConfig, LLMCacheConfig, ModelPrice, RayConfig
from hxd2_ray.config.sources import IngestConfig, S3Config
from hxd2_ray.errors import ConfigError  # raised by the loaders; importable from here as before

__all__ = [
    "DEFAULT_ENTITY_TYPES",
    "GRAPH_ONLY",
    "MODEL_ID",
    "NOT_IN_INDEX",
    "TITLE_SCAN_RULES",
    "ChunkingConfig",
    "ConfigError",
    "CostConfig",
    "EmbeddingConfig",
    "ExtractionConfig",
    "FingerprintScope",
    "FlagEmbeddingConfig",
    "FlagRerankerConfig",
    "FrozenSection",
    "GenerationsConfig",
    "GraphConfig",
    "GraphFlowConfig",
    "HashingEmbeddingConfig",
    "HxdConfig",
    "IngestConfig",
    "LLMCacheConfig",
    "LLMConfig",
    "ModelPrice",
    "MultiStageConfig",
    "NoRerankerConfig",
    "OpenAILLMConfig",
    "OverlapRerankerConfig",
    "RayConfig",
    "RefusalGate",
    "RerankConfig",
    "RetrievalConfig",
    "S3Config",
    "ScriptedLLMConfig",
    "SynonymConfig",
    "TitleMentionConfig",
    "VectorsConfig",
    "VllmLLMConfig",
    "config_from_data",
    "embedding_model_id",
    "fingerprint_factors",
    "fingerprint_scope",
    "llm_model_id",
    "load_config",
    "load_shipped_config",
    "SHIPPED_CONFIG",
    "stand_ins",
    "synonym_factors",
    "title_mention_factors",
    "validate_config",
    "vector_factors",
]
