"""The index job's staging tables: the graph's inputs and the job's own intermediate tables.

The four tables the graph is loaded from (documents, chunks, entities, relations) are defined by the graph,
in :mod:`hxd2_ray.graph.schema`, and named here too so the job's stages find every staging schema in one
place; quarantine, extractions and embeddings never reach the graph and are defined here.
"""

from __future__ import annotations

import pyarrow as pa

from hxd2_ray.graph.schema import CHUNKS, DOCUMENTS, ENTITIES, RELATIONS, SYNONYMS

__all__ = [
    "CHUNKS",
    "DOCUMENTS",
    "EMBEDDINGS",
    "ENTITIES",
    "EXTRACTIONS",
    "QUARANTINE",
    "RELATIONS",
    "SYNONYMS",
    "VECTOR_FAMILIES",
]

QUARANTINE = pa.schema([("source_path", pa.string()), ("reason", pa.string()), ("detail", pa.string())])

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
