"""How a job runs: Ray resources, the LLM response cache, prices (none of it is part of an index)."""

from __future__ import annotations

from pydantic import Field

from hxd2_ray.config.base import FrozenSection


class RayConfig(FrozenSection):
    """The Ray cluster the indexing job runs on, and the actors, resources and batches of its stages."""

    address: str | None = Field(None, description="None: start a local Ray; 'auto' or ray://… joins a cluster.")
    num_cpus: int | None = Field(None, description="CPUs for a local Ray (None: all).")
    object_store_mb: int | None = Field(None, description="Object store size for a local Ray.")
    ner_actors: int = Field(1, ge=1, description="vLLM engine actors for extraction.")
    gpus_per_ner_actor: float = Field(0, ge=0, description="0 on CPU; tensor_parallel_size on GPUs.")
    cpus_per_ner_actor: float = Field(1, ge=0, description="CPUs each extraction (LLM) actor reserves.")
    ner_batch_size: int = Field(64, gt=0, description="Chunks per NER batch (vLLM batches a whole round).")
    embed_actors: int = Field(1, ge=1, description="Embedding-model actors of the embedding stage.")
    gpus_per_embed_actor: float = Field(
        0, ge=0, description="GPUs each embedding actor reserves (fractions share a GPU); 0 on CPU."
    )
    cpus_per_embed_actor: float = Field(1, ge=0, description="CPUs each embedding actor reserves.")
    embed_batch_size: int = Field(512, gt=0, description="Texts per batch handed to an embedding actor.")
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
    resource_wait_s: float = Field(
        600,
        ge=0,
        description="Fail an LLM or embedding stage when no alive node can host its actors (the node offering "
        "ray.stage_resources or the GPUs was lost, or never joined) for this long, naming what is missing; a rerun "
        "resumes. Ray would wait for such a node for ever. 0: wait for ever (an autoscaler that may take longer to "
        "add one).",
    )
    check_nodes: bool = Field(
        True,
        description="On a cluster of several nodes, check before the first stage that every node reaches the "
        "output and the inputs (one task per node); refuse early when one does not.",
    )


class LLMCacheConfig(FrozenSection):
    """The indexing job's cache of LLM responses (``hxd2_ray.llm.cache``); never part of the index fingerprint."""

    enabled: bool = Field(True, description="Reuse stored responses; False (--no-llm-cache) calls the LLM for all.")
    location: str | None = Field(
        None, description="Folder or s3:// URI of the cache; None: <output>/_llm_cache (kept by --overwrite)."
    )


class ModelPrice(FrozenSection):
    """The price of one model (``cost.prices.<model id>``)."""

    input_usd_per_million: float = Field(0.0, ge=0, description="USD per million prompt (input) tokens.")
    output_usd_per_million: float = Field(0.0, ge=0, description="USD per million completion (output) tokens.")
    gpu_hour_usd: float = Field(
        0.0, ge=0, description="Self-hosted: USD per GPU-hour, charged for the GPU-seconds the model's actors work."
    )


class CostConfig(FrozenSection):
    """Prices for the token and cost accounting of the indexing job (``hxd2_ray.stages.cost``)."""

    prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Model id (the manifest's llm_model_id / embedding_model_id) -> price; unpriced models cost 0.",
    )
    dry_run_sample_chunks: int = Field(32, gt=0, description="Chunks extracted by `hxd2 index --dry-run`.")
