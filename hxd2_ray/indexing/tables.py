"""Arrow schemas of the staging tables an index is built from (and the graph store bulk-loads)."""

from __future__ import annotations

import pyarrow as pa

DOCUMENTS = pa.schema(
    [
        ("id", pa.string()),  # sha256 of the text
        ("source_id", pa.string()),  # the source's own id, else the path (plus #n for records)
        ("source_path", pa.string()),
        ("title", pa.string()),
        ("n_chars", pa.int64()),
    ]
)

QUARANTINE = pa.schema([("source_path", pa.string()), ("reason", pa.string()), ("detail", pa.string())])

CHUNKS = pa.schema(
    [
        ("id", pa.string()),
        ("doc_id", pa.string()),
        ("order", pa.int64()),
        ("start", pa.int64()),
        ("text", pa.string()),
        ("header_path", pa.string()),
        ("language", pa.string()),
        ("shard", pa.int64()),  # extraction shard: the unit a rerun skips when finished
    ]
)

_ENTITY_MENTION = pa.struct([("name", pa.string()), ("type", pa.string()), ("description", pa.string())])
_RELATION_MENTION = pa.struct(
    [
        ("source", pa.string()),
        ("target", pa.string()),
        ("description", pa.string()),
        ("keywords", pa.list_(pa.string())),
        ("strength", pa.float64()),
    ]
)

EXTRACTIONS = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("entities", pa.list_(_ENTITY_MENTION)),
        ("relations", pa.list_(_RELATION_MENTION)),
        ("content_keywords", pa.list_(pa.string())),
        ("malformed_records", pa.int64()),
        ("llm_calls", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("error", pa.string()),
    ]
)

ENTITIES = pa.schema(
    [
        ("key", pa.string()),  # normalized name, the graph primary key
        ("name", pa.string()),
        ("type", pa.string()),
        ("description", pa.string()),
        ("source_chunk_ids", pa.list_(pa.string())),
        ("mention_count", pa.int64()),
        ("name_truncated", pa.bool_()),
    ]
)

RELATIONS = pa.schema(
    [
        ("source_key", pa.string()),
        ("target_key", pa.string()),
        ("description", pa.string()),
        ("keywords", pa.list_(pa.string())),
        ("weight", pa.float64()),
        ("source_chunk_ids", pa.list_(pa.string())),
        ("mention_count", pa.int64()),
    ]
)

# One row per vector: which family, the string key it stands for, its int63 id and the vector.
EMBEDDINGS = pa.schema(
    [
        ("family", pa.string()),
        ("key", pa.string()),
        ("vector_id", pa.int64()),
        ("vector", pa.list_(pa.float32())),
    ]
)

VECTOR_FAMILIES = ("entity_name", "entity_mix", "relation_keywords", "relation_mix", "chunk")

# Entity pairs whose name vectors are near (hxd2_ray.indexing.synonyms); loaded as SYNONYM edges of the graph.
SYNONYMS = pa.schema([("source_key", pa.string()), ("target_key", pa.string()), ("score", pa.float64())])
