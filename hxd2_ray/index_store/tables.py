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
    "MERGED_CHUNKS",
    "RELATIONS",
    "SOURCES",
    "SYNONYMS",
    "TEXT_VECTORS",
    "VECTOR_FAMILIES",
]

# Every document read from the input, duplicates included (the documents table keeps one per text): what an
# incremental change updates by ``source_id`` and deletes by ``source_id`` or ``source_path``.
SOURCES = pa.schema(
    [
        ("source_id", pa.string()),
        ("source_path", pa.string()),
        ("position", pa.int64()),  # the record's place in its file: documents keep the first of equal texts
        ("doc_id", pa.string()),  # sha256 of the text
        ("title", pa.string()),
        ("n_chars", pa.int64()),
    ]
)

# The chunks whose successful extraction the entities and relations of a generation were merged from.
MERGED_CHUNKS = pa.schema([("chunk_id", pa.string())])

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
        ("ungrounded_entities", pa.int64()),
        ("ungrounded_relations", pa.int64()),
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

# Staged vectors keyed by the text they embed (sha256): a changed description is a new text, so it is embedded
# again, and a text shared by two keys or families is embedded once.
TEXT_VECTORS = pa.schema([("text_key", pa.string()), ("vector", pa.list_(pa.float32()))])

VECTOR_FAMILIES = ("entity_name", "entity_mix", "relation_keywords", "relation_mix", "chunk")

# Entity pairs whose name vectors are near (hxd2_ray.graph_assembly.synonyms); loaded as SYNONYM edges of the graph.


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types (an empty table: ``schema``'s empty table)."""
    if table.num_rows == 0:
        return schema.empty_table()
    return table.select(schema.names).cast(schema)
