"""Arrow schemas of the staging tables the graph is bulk-loaded from (``kuzu_tables.prepare_tables`` reads them).

The graph owns these: they are what a loader needs, whoever produces them (the index job's ingest and merge
stages, the triple loader of :mod:`hxd2_ray.logic.metaqa`). The index job's other staging tables are in
:mod:`hxd2_ray.index_store.tables`.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["CHUNKS", "DOCUMENTS", "ENTITIES", "RELATIONS", "SYNONYMS", "TITLE_MENTIONS"]

DOCUMENTS = pa.schema(
    [
        ("id", pa.string()),  # sha256 of the text
        ("source_id", pa.string()),  # the source's own id, else the path (plus #n for records)
        ("source_path", pa.string()),
        ("title", pa.string()),
        ("n_chars", pa.int64()),
    ]
)

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

# SYNONYM edges between entities whose names embed alike (hxd2_ray.graph_assembly.synonyms): smaller key first.
SYNONYMS = pa.schema([("source_key", pa.string()), ("target_key", pa.string()), ("score", pa.float64())])

# A chunk whose text names another document's title (hxd2_ray.graph_assembly.title_mentions): NAMES_TITLE edges.
TITLE_MENTIONS = pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string())])
