"""Typed, frozen configuration loaded from YAML, with dotted overrides and a fingerprint for indexes.

Where things are: :mod:`root` is the whole configuration (:class:`HxdConfig`) and the fingerprints of the staged
rows and of an index; :mod:`base` the base of every section and the markers that keep a field out of an index's
fingerprint; :mod:`loading` loads YAML or a mapping with ``section.key=value`` overrides (``local.yaml`` beside it is
the shipped default config). One module per section: :mod:`sources` (where a corpus is read from: S3, the input files
and record fields, document conversion), :mod:`extraction` (chunking, entity and relation extraction),
:mod:`embedding` and :mod:`llm` (the backends and the model id an index records), :mod:`index` (what the write stage
builds: Faiss families, SYNONYM and NAMES_TITLE edges, generations), :mod:`retrieval` (a package of one module per
concern, under the same flat keys), :mod:`rerank` (the reranker, query time only), :mod:`multistage` and
:mod:`refusal` (the multi-stage pipeline and its refusal gate), :mod:`graphflow` (the graph-walk policy, with its own
fingerprint), :mod:`runtime` (Ray resources, the LLM response cache, prices and budgets: none of it part of an index).
Nothing here imports the library beyond :mod:`hxd2_ray.errors`.

Every section is a pydantic model with ``extra="forbid"``; unknown keys and bad values raise
:class:`~hxd2_ray.errors.ConfigError` with the valid keys or values listed.
"""

from __future__ import annotations

from hxd2_ray.config.base import (
    ADDED_AT_DEFAULT,
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
    "ADDED_AT_DEFAULT",
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
