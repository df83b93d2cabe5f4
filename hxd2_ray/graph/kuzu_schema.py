"""The Kùzu graph's tables: their DDL and the Arrow schemas a COPY loads, in DDL column order (COPY is positional)."""

from __future__ import annotations

import pyarrow as pa

# ---------------------------------------------------------------------------------------------------
# Schema. ``ord`` not ``order``: ORDER is a Cypher keyword. The Arrow schemas below mirror the DDL column
# order exactly, since COPY is positional.

DDL = (
    "CREATE NODE TABLE Document(id STRING, source_id STRING, source_path STRING, title STRING, n_chars INT64,"
    " PRIMARY KEY(id))",
    "CREATE NODE TABLE Chunk(id STRING, doc_id STRING, ord INT64, start INT64, text STRING, header_path STRING,"
    " language STRING, PRIMARY KEY(id))",
    "CREATE NODE TABLE Entity(key STRING, name STRING, type STRING, description STRING,"
    " source_chunk_ids STRING[], mention_count INT64, name_truncated BOOL, degree INT64, PRIMARY KEY(key))",
    "CREATE REL TABLE RELATED(FROM Entity TO Entity, description STRING, keywords STRING[], weight DOUBLE,"
    " source_chunk_ids STRING[], mention_count INT64)",
    "CREATE REL TABLE MENTIONS(FROM Chunk TO Entity)",
    "CREATE REL TABLE PART_OF(FROM Chunk TO Document)",
    # Near entity names (index-time kNN over the entity_name vectors); the ranking walk reads them, nothing else.
    "CREATE REL TABLE SYNONYM(FROM Entity TO Entity, score DOUBLE)",
    # A chunk whose text names another document's title (index-time text scan); the ranking walk reads them.
    "CREATE REL TABLE NAMES_TITLE(FROM Chunk TO Document)",
)
GRAPH_TABLES = ("Document", "Chunk", "Entity", "RELATED", "MENTIONS", "PART_OF")
# Written by every build since they exist; a graph built before has none (read as no synonyms, no title names).
OPTIONAL_TABLES = ("SYNONYM", "NAMES_TITLE")
# Node tables before rel tables: a rel COPY looks its endpoints up by primary key.
LOAD_ORDER = (*GRAPH_TABLES, *OPTIONAL_TABLES)

_STR_LIST = pa.list_(pa.string())
DOCUMENT_COLUMNS = pa.schema(
    [
        ("id", pa.string()),
        ("source_id", pa.string()),
        ("source_path", pa.string()),
        ("title", pa.string()),
        ("n_chars", pa.int64()),
    ]
)
CHUNK_COLUMNS = pa.schema(
    [
        ("id", pa.string()),
        ("doc_id", pa.string()),
        ("ord", pa.int64()),
        ("start", pa.int64()),
        ("text", pa.string()),
        ("header_path", pa.string()),
        ("language", pa.string()),
    ]
)
ENTITY_COLUMNS = pa.schema(
    [
        ("key", pa.string()),
        ("name", pa.string()),
        ("type", pa.string()),
        ("description", pa.string()),
        ("source_chunk_ids", _STR_LIST),
        ("mention_count", pa.int64()),
        ("name_truncated", pa.bool_()),
        ("degree", pa.int64()),
    ]
)
RELATED_COLUMNS = pa.schema(
    [
        ("from", pa.string()),
        ("to", pa.string()),
        ("description", pa.string()),
        ("keywords", _STR_LIST),
        ("weight", pa.float64()),
        ("source_chunk_ids", _STR_LIST),
        ("mention_count", pa.int64()),
    ]
)
MENTIONS_COLUMNS = pa.schema([("from", pa.string()), ("to", pa.string())])
SYNONYM_COLUMNS = pa.schema([("from", pa.string()), ("to", pa.string()), ("score", pa.float64())])
PART_OF_COLUMNS = pa.schema([("from", pa.string()), ("to", pa.string())])
NAMES_TITLE_COLUMNS = pa.schema([("from", pa.string()), ("to", pa.string())])
