"""What the write stage builds from the staged rows: Faiss families, SYNONYM and NAMES_TITLE edges, generations."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from hxd2_ray.config.base import ADDED_AT_DEFAULT, GRAPH_ONLY, NOT_IN_INDEX, FrozenSection, fingerprint_factors


class VectorsConfig(FrozenSection):
    """The vector families' layout (in the staged rows) and the Faiss index each shard is written as (graph only)."""

    num_shards: int = Field(2, ge=1, description="Shards per vector family.")
    index_type: Literal["auto", "flat", "hnsw", "ivf", "ivfpq"] = Field(
        "auto",
        description="auto: flat up to flat_max_vectors per shard, IVF up to ivf_max_vectors, then IVF-PQ. ivfpq: "
        "IVF over product-quantized codes (ivfpq_m bytes a vector at 8 bits: 1/8 of flat's floats by default), the "
        "best candidates re-scored exactly (ivfpq_refine), for tens of millions of vectors; a family too small to "
        "train its codebooks is written flat.",
    )
    flat_max_vectors: int = Field(
        200_000,
        gt=0,
        description="index_type=auto: a family whose largest shard holds more vectors than this is written as IVF, "
        "else as an exact flat index.",
        json_schema_extra=GRAPH_ONLY,
    )
    ivf_max_vectors: int = Field(
        1_000_000,
        gt=0,
        description="index_type=auto: a family whose largest shard holds more vectors than this is written as "
        "IVF-PQ, else (past flat_max_vectors) as IVF-Flat. An IVF-Flat probe scans 4*dim bytes a vector; past a "
        "million a shard, that scan and its page-cache working set dominate a query.",
        json_schema_extra=GRAPH_ONLY | ADDED_AT_DEFAULT,
    )
    hnsw_m: int = Field(
        32,
        gt=0,
        description="index_type=hnsw: neighbours per node of the HNSW graph (Faiss M).",
        json_schema_extra=GRAPH_ONLY,
    )
    hnsw_ef_construction: int = Field(
        64,
        gt=0,
        description="index_type=hnsw: candidates searched while inserting a vector (Faiss efConstruction).",
        json_schema_extra=GRAPH_ONLY,
    )
    hnsw_ef_search: int = Field(
        128,
        gt=0,
        description="index_type=hnsw: candidates searched per query (Faiss efSearch), stored with the shard.",
        json_schema_extra=GRAPH_ONLY,
    )
    ivf_nlist: int | None = Field(
        None,
        description="IVF and IVF-PQ: inverted lists (k-means centroids) per shard; None: about 4*sqrt(n), capped so "
        "each list trains on 39+ points.",
        json_schema_extra=GRAPH_ONLY,
    )
    ivf_nprobe: int = Field(
        16,
        gt=0,
        description="IVF and IVF-PQ: lists searched per query, stored with the shard (more: better recall, slower).",
        json_schema_extra=GRAPH_ONLY,
    )
    train_sample_size: int = Field(
        100_000,
        gt=0,
        description="Vectors sampled (evenly, seeded) to train IVF and IVF-PQ (centroids and codebooks).",
        json_schema_extra=GRAPH_ONLY,
    )
    ivfpq_m: int | None = Field(
        None,
        ge=1,
        description="index_type=ivfpq: sub-quantizers per vector (bytes a vector at 8 bits); must divide the "
        "dimension. None: dim/2 rounded down to a divisor of dim (192 at dim 384, 32 at dim 64), chosen by the "
        "recall table of docs/benchmarks/vector-scale.md.",
        json_schema_extra=GRAPH_ONLY,
    )
    ivfpq_refine: int = Field(
        4,
        ge=0,
        le=64,
        description="index_type=ivfpq: the best k * ivfpq_refine candidates of the codes are re-scored exactly "
        "against the shard's full vectors (stored beside the codes, memory-mapped: only the candidates' rows are "
        "read), so scores are exact and recall is the lists' rather than the codes'. 0: no full vectors (a quarter "
        "of the disk at the defaults), approximate scores.",
        json_schema_extra=GRAPH_ONLY | ADDED_AT_DEFAULT,
    )
    ivfpq_nbits: int = Field(
        8,
        ge=4,
        le=12,
        description="index_type=ivfpq: bits per sub-quantizer code (2**nbits centroids each; a family needs "
        "39 * 2**nbits vectors to train them, else it is written flat).",
        json_schema_extra=GRAPH_ONLY,
    )


# graph.build_buffer_pool_mb: the least a Kùzu database opens with, and a sanity bound (1 TiB) above any machine here.
BUILD_BUFFER_POOL_MB_RANGE = (64, 1 << 20)


class GraphConfig(FrozenSection):
    """The embedded graph engine the index's graph is written with and read by (the engine is part of the index
    fingerprint), and the memory its bulk load may take (not part of it)."""

    backend: Literal["kuzu", "ladybug"] = Field(
        "kuzu",
        description="kuzu: Kùzu 0.11.3 (archived upstream; vector/fts/algo extensions built in, none used here). "
        "ladybug: LadybugDB, Kùzu's maintained fork (same Cypher; extensions not built in, none needed). The files "
        "are not interchangeable: an index is queried with the engine that wrote it (switching is a rebuild).",
    )
    build_buffer_pool_mb: int | None = Field(
        None,
        description="The graph engine's buffer pool (its page cache), in MB, for the bulk load of each new "
        "generation's graph (`hxd2 index` builds and updates, `hxd2 index-kb`). None: twice the Arrow size of the "
        "tables loaded, at least 1024 MB and at most half the machine's memory (Kùzu's own default is 80% of it, "
        "whatever the graph). A load whose pages do not fit stops with 'the buffer pool is full' (staged work is "
        "kept: raise this and rerun). Valid: 64 to 1048576. The scan that writes the read structures afterwards "
        "has its own 2048 MB. Not part of the index fingerprint.",
        json_schema_extra=NOT_IN_INDEX,
    )

    @field_validator("build_buffer_pool_mb")
    @classmethod
    def _pool_in_range(cls, value: int | None) -> int | None:
        low, high = BUILD_BUFFER_POOL_MB_RANGE
        if value is not None and not low <= value <= high:
            raise ValueError(f"the graph's build buffer pool must be {low} to {high} MB, or null (sized to the graph)")
        return value


class GenerationsConfig(FrozenSection):
    """Index generations on disk: each build or update publishes a new one."""

    keep: int = Field(
        2,
        ge=1,
        description="Index generations kept on disk (the current one and the ones before it), so readers "
        "of an older generation keep working until they reopen.",
    )


class SynonymConfig(FrozenSection):
    """Index-time SYNONYM edges between entities whose name vectors are near (part of the index fingerprint)."""

    enabled: bool = Field(True, description="Compute SYNONYM edges when an index is built.")
    k: int = Field(10, ge=1, le=1024, description="Nearest entity names searched per entity.")
    threshold: float = Field(
        0.85,
        ge=-1,
        le=1,
        description="Least cosine of two entity-name vectors for an edge (depends on the embedding model).",
    )
    require_shared_text: bool = Field(
        True,
        description="Both keys must share a character trigram: an English embedder maps unrelated Chinese names "
        "to near-identical vectors.",
    )
    batch_size: int = Field(
        4096,
        gt=0,
        description="Entity names searched per Faiss call (not part of the fingerprint).",
        json_schema_extra=NOT_IN_INDEX,
    )


class TitleMentionConfig(FrozenSection):
    """Index-time NAMES_TITLE edges: chunks whose text names another document's title (in the index fingerprint)."""

    enabled: bool = Field(
        True,
        description="Read every chunk for the titles of the other documents when an index is "
        "built (a corpus without titles gets none).",
    )
    max_words: int = Field(6, ge=1, le=16, description="Longest title looked for, in words.")
    max_naming_chunks: int = Field(
        200,
        ge=1,
        description="A title named by more chunks than this gets no edges: too common to say which passage comes next.",
    )


def vector_factors(cfg: VectorsConfig) -> dict[str, Any]:
    """The vector settings that shape an index's families: the layout of the staged rows and the Faiss parameters
    of the written shards (every field not marked ``NOT_IN_INDEX``)."""
    return {**fingerprint_factors(cfg, "staging"), **fingerprint_factors(cfg, "graph")}


def synonym_factors(cfg: SynonymConfig) -> dict[str, Any]:
    """The synonym settings that shape an index (those not marked ``NOT_IN_INDEX``: the batch size does not); a
    disabled section is only ``{"enabled": False}``."""
    return fingerprint_factors(cfg, "graph", "graph")


# The rules of the title scan (hxd2_ray.graph_assembly.title_mentions): a change of them makes existing indexes stale.
TITLE_SCAN_RULES = "names-as-written-1"


def title_mention_factors(cfg: TitleMentionConfig) -> dict[str, Any]:
    """The title-mention settings (and scan rules) that shape an index."""
    factors = fingerprint_factors(cfg, "graph", "graph")
    return {**factors, "rules": TITLE_SCAN_RULES} if cfg.enabled else factors
