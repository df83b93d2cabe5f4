"""The whole configuration, :class:`HxdConfig`, and the fingerprints of the staged rows and of an index."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from hxd2_ray.config.base import GRAPH_ONLY, NOT_IN_INDEX, FrozenSection, fingerprint_factors
from hxd2_ray.config.embedding import EmbeddingConfig, HashingEmbeddingConfig, embedding_model_id
from hxd2_ray.config.extraction import ChunkingConfig, ExtractionConfig
from hxd2_ray.config.graphflow import GraphFlowConfig
from hxd2_ray.config.index import (
    TITLE_SCAN_RULES,
    GenerationsConfig,
    GraphConfig,
    SynonymConfig,
    TitleMentionConfig,
    VectorsConfig,
)
from hxd2_ray.config.llm import LLMConfig, ScriptedLLMConfig, llm_model_id
from hxd2_ray.config.multistage import MultiStageConfig
from hxd2_ray.config.rerank import NoRerankerConfig, RerankConfig
from hxd2_ray.config.retrieval import RetrievalConfig
from hxd2_ray.config.runtime import CostConfig, LLMCacheConfig, RayConfig
from hxd2_ray.config.sources import IngestConfig, S3Config, converter_versions


class HxdConfig(FrozenSection):
    """Every section of the configuration; each YAML top-level key is one of these fields."""

    ingest: IngestConfig = Field(IngestConfig(), description="Which input files are read and which record fields.")
    s3: S3Config = Field(S3Config(), description="Access to s3:// inputs and outputs.", json_schema_extra=NOT_IN_INDEX)
    chunking: ChunkingConfig = Field(ChunkingConfig(), description="How documents are cut into chunks.")
    extraction: ExtractionConfig = Field(
        ExtractionConfig(), description="How entities and relations are extracted from the chunks."
    )
    llm: LLMConfig = Field(ScriptedLLMConfig(), description="The LLM of extraction and of the query pipeline.")
    embedding: EmbeddingConfig = Field(
        HashingEmbeddingConfig(), description="The embedding model of the index's vectors and of queries."
    )
    vectors: VectorsConfig = Field(VectorsConfig(), description="Layout and Faiss index types of the vector families.")
    graph: GraphConfig = Field(
        GraphConfig(), description="The graph engine of the index (Kùzu or LadybugDB).", json_schema_extra=GRAPH_ONLY
    )
    ray: RayConfig = Field(
        RayConfig(),
        description="The Ray cluster and the resources of the indexing job.",
        json_schema_extra=NOT_IN_INDEX,
    )
    retrieval: RetrievalConfig = Field(
        RetrievalConfig(), description="Dual-level retrieval and answer generation.", json_schema_extra=NOT_IN_INDEX
    )
    rerank: RerankConfig = Field(
        NoRerankerConfig(), description="The reranker of retrieved chunks.", json_schema_extra=NOT_IN_INDEX
    )
    synonyms: SynonymConfig = Field(
        SynonymConfig(), description="SYNONYM edges between near entity names.", json_schema_extra=GRAPH_ONLY
    )
    title_mentions: TitleMentionConfig = Field(
        TitleMentionConfig(),
        description="NAMES_TITLE edges from chunks to the documents whose titles they name.",
        json_schema_extra=GRAPH_ONLY,
    )
    multistage: MultiStageConfig = Field(
        MultiStageConfig(),
        description="The multi-stage query pipeline (intent, refusal, logic form, verifier).",
        json_schema_extra=NOT_IN_INDEX,
    )
    llm_cache: LLMCacheConfig = Field(
        LLMCacheConfig(), description="The indexing job's cache of LLM responses.", json_schema_extra=NOT_IN_INDEX
    )
    cost: CostConfig = Field(
        CostConfig(), description="Prices for the token and cost accounting.", json_schema_extra=NOT_IN_INDEX
    )
    generations: GenerationsConfig = Field(
        GenerationsConfig(), description="How many index generations are kept.", json_schema_extra=NOT_IN_INDEX
    )
    graphflow: GraphFlowConfig = Field(
        GraphFlowConfig(),
        description="The GraphFlow retrieval policy (it has a fingerprint of its own).",
        json_schema_extra=NOT_IN_INDEX,
    )

    def index_fingerprint(self, prompt_version: str) -> str:
        """Hash of everything that shapes the index: what the staged rows depend on (:meth:`staging_fingerprint`)
        plus every field marked ``GRAPH_ONLY`` (synonym and title edges, the Faiss index parameters). Every field
        not marked ``NOT_IN_INDEX`` is part of it (``hxd2_ray.config.base``)."""
        graph = fingerprint_factors(self, "graph")
        if graph.get("graph") == {"backend": "kuzu"}:
            del graph["graph"]  # the default engine: indexes written before the option keep their fingerprint
        factors: dict[str, Any] = {"staging": self.staging_fingerprint(prompt_version), "graph": graph}
        if self.title_mentions.enabled:
            factors["title_scan_rules"] = TITLE_SCAN_RULES
        return _digest(factors)

    def staging_fingerprint(self, prompt_version: str) -> str:
        """Hash of what the staged chunks, extractions, merged rows and vectors depend on: every field without a
        marker (chunking, extraction, models and their decoding, vector layout, record fields, OCR), the model ids,
        the prompts and the document converters' versions. A rerun reuses a staging folder with the same value;
        settings of the final graph only are not part of it, so changing them rebuilds only the write stage."""
        factors = {
            "config": fingerprint_factors(self, "staging"),
            "prompt_version": prompt_version,
            "llm_model_id": llm_model_id(self.llm),
            "embedding_model_id": embedding_model_id(self.embedding),
            "converters": converter_versions(self.ingest),
        }
        return _digest(factors)


def stand_ins(cfg: HxdConfig) -> list[str]:
    """The test stand-ins ``cfg`` names in place of models, as a user should read them (empty for real models):
    the commands say so in their summaries, since answers and vectors from them are not a model's."""
    names = []
    if cfg.llm.backend == "scripted":
        names.append("the scripted LLM (a rule-based test stand-in, llm.backend: scripted)")
    if cfg.embedding.backend == "hashing":
        names.append("the hashing embedder (a test stand-in, embedding.backend: hashing)")
    return names


def _digest(factors: dict[str, Any]) -> str:
    blob = json.dumps(factors, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
