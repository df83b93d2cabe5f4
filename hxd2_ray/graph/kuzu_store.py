"""Kùzu graph store: one bulk writer and a parameterised reader. The only module that imports kuzu.

Kùzu 0.11.3 is frozen (archived upstream), so everything engine-specific stays here: a later switch to
LadybugDB is this file plus a rebuild from the staging Parquet. Rules this module keeps:

* Data never enters query text. Writes are ``COPY <table> FROM $t`` with pyarrow Tables (pandas-3
  string columns crash 0.11.3's COPY); reads are fixed templates with every ``$param`` bound, because an
  unbound parameter on 0.11.3 silently matches as if unfiltered (see :func:`check_params`).
* COPY matches columns by position, so every table is rebuilt in DDL order before loading; rel tables
  take the FROM/TO primary keys as their first two columns.
* Reads are per key (the primary-key index; 0.11.3 plans every list-parameter form as a table scan), and
  reads that reach other nodes return them as ``offset(id(x))``, resolved against columns the read-only
  store loads once (:class:`_NodeColumns`): naming a far node's property costs a masked table scan.
* One read-write ``Database`` per file, or many read-only ones. The index job builds into a fresh path
  with :class:`KuzuGraphWriter`, closes it, and renames; readers open ``read_only=True``.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import kuzu
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.errors import IndexMismatchError, IndexNotFoundError
from hxd2_ray.graph import schema
from hxd2_ray.graph.base import (
    COUNT_NAMES,
    GRAPH_SCHEMA_VERSION,
    ChunkRow,
    EdgeRow,
    EntityRow,
    canonical_pair,
    edge_row,
    entity_row,
    rank_neighbors,
    unique_in_order,
)
from hxd2_ray.graph.templates import (
    LF_EDGES,
    LF_EDGES_BETWEEN,
    LF_ENTITY_NAMES,
    LF_NAMES_OF,
    LF_PATHS_2HOP,
    LF_PATHS_BETWEEN,
    LOGIC_TEMPLATES,
    check_template,
)

__all__ = [
    "GRAPH_SCHEMA_VERSION",
    "KuzuGraphStore",
    "KuzuGraphWriter",
    "check_params",
    "load_graph",
    "prepare_tables",
]

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

# ---------------------------------------------------------------------------------------------------
# Query templates: constants, so no data can ever be spliced into Cypher text.

Q_SHOW_TABLES = "CALL show_tables() RETURN name"
Q_COPY = {name: f"COPY {name} FROM $t" for name in LOAD_ORDER}
Q_CHECKPOINT = "CHECKPOINT"
Q_COUNTS = {
    "documents": "MATCH (d:Document) RETURN count(d) AS n",
    "chunks": "MATCH (c:Chunk) RETURN count(c) AS n",
    "entities": "MATCH (e:Entity) RETURN count(e) AS n",
    "relations": "MATCH ()-[r:RELATED]->() RETURN count(r) AS n",
    "mentions": "MATCH ()-[m:MENTIONS]->() RETURN count(m) AS n",
}
_ENTITY_RETURN = (
    "e.key AS key, e.name AS name, e.type AS type, e.description AS description,"
    " e.source_chunk_ids AS source_chunk_ids, e.mention_count AS mention_count,"
    " e.name_truncated AS name_truncated, e.degree AS degree"
)
_EDGE_RETURN = (
    "a.key AS a_key, b.key AS b_key, r.description AS description, r.keywords AS keywords, r.weight AS weight,"
    " r.source_chunk_ids AS source_chunk_ids, r.mention_count AS mention_count, a.degree + b.degree AS degree"
)
# Reads are per key: ``MATCH (e:Entity {key: $k})`` is a primary-key index lookup on 0.11.3, whereas
# ``UNWIND $keys AS k MATCH (e:Entity {key: k})`` scans the table (cost grows with the graph: 28 ms for 6
# entities at 100k vs 0.13 ms per key). The batch methods loop over keys with these fixed templates.
Q_ENTITY = f"MATCH (e:Entity {{key: $k}}) RETURN {_ENTITY_RETURN}"
# Kept for callers that still batch with UNWIND (slow: a table scan); the store itself no longer uses it.
Q_GET_ENTITIES = f"UNWIND $keys AS k MATCH (e:Entity {{key: k}}) RETURN {_ENTITY_RETURN}"
# Several entities can share a surface form only if the key function maps them apart; prefer the most
# mentioned so the lookup is deterministic.
Q_ENTITY_BY_NAME = (
    f"MATCH (e:Entity) WHERE e.name = $name RETURN {_ENTITY_RETURN} ORDER BY e.mention_count DESC, e.key LIMIT 1"
)
# Neighbours: one undirected per-key query returning only the other endpoint's key and the edge; the
# seed's ranking (sort_edges) and its per-entity limit are applied in Python. Measured at 100k entities
# (per 6 seeds, median): 7.6 ms this way, 9.7 ms as two directed queries, 12.3 ms as two directed queries
# with ORDER BY ... LIMIT in the query; all three give the same rows.
#
# Any property of the far node (``b.key``, ``c.id``) makes 0.11.3 plan PK scan -> rel scan -> semi-masked
# scan of the far node table -> hash join; the masked scan reads a 2048-row vector per far node, which is
# ~90% of the query (100k entities: 2.5-2.8 ms per seed with ``b.key``, 0.27 ms with only ``id(b)``).
# Batched forms do not help: ``UNWIND $keys ... {key: k}``, ``WHERE e.key IN $keys``, ``list_contains``
# and OR-chains all scan the whole table (30 keys at 100k: 13-17 ms vs 1.8 ms per key), and a UNION ALL of
# per-key lookups costs the same as separate executions (8 chunks: 0.44 vs 0.47 ms). So the hot reads
# return far nodes as ``offset(id(x))`` and resolve them against columns read once per store
# (:class:`_NodeColumns`); the per-key templates below remain the fallback and the reference in tests.
Q_NEIGHBORS_OF = (
    "MATCH (a:Entity {key: $k})-[r:RELATED]-(b:Entity) RETURN b.key AS other, r.description AS description,"
    " r.keywords AS keywords, r.weight AS weight, r.source_chunk_ids AS source_chunk_ids,"
    " r.mention_count AS mention_count, a.degree + b.degree AS degree"
)
Q_RELATION = f"MATCH (a:Entity {{key: $s}})-[r:RELATED]->(b:Entity {{key: $t}}) RETURN {_EDGE_RETURN}"
Q_CHUNKS_OF_ENTITY = (
    "MATCH (c:Chunk)-[:MENTIONS]->(e:Entity {key: $k}) RETURN c.id AS id, c.doc_id AS doc_id, c.ord AS ord"
)
# Chunk by primary key with a plain MATCH (OPTIONAL MATCH on PART_OF costs ~17x), then its document by
# primary key: PART_OF is loaded exactly when a Document with the chunk's doc_id exists.
Q_CHUNK = (
    "MATCH (c:Chunk {id: $i}) RETURN c.id AS id, c.doc_id AS doc_id, c.ord AS ord, c.start AS start,"
    " c.text AS text, c.header_path AS header_path, c.language AS language"
)
Q_DOCUMENT = (
    "MATCH (d:Document {id: $d}) RETURN d.title AS doc_title, d.source_id AS doc_source_id,"
    " d.source_path AS doc_source_path"
)
Q_DEGREE = "MATCH (e:Entity {key: $k}) RETURN e.key AS key, e.degree AS degree"

# Offset-returning forms of the hot reads (see above) and the column loads they resolve against. Node
# offsets of a bulk-loaded table are dense (0..n-1); the loader checks that and otherwise falls back.
Q_NEIGHBOR_OFFSETS_OF = (
    "MATCH (a:Entity {key: $k})-[r:RELATED]-(b:Entity) RETURN offset(id(b)) AS other,"
    " r.description AS description, r.keywords AS keywords, r.weight AS weight,"
    " r.source_chunk_ids AS source_chunk_ids, r.mention_count AS mention_count, a.degree AS seed_degree"
)
Q_CHUNK_OFFSETS_OF_ENTITY = "MATCH (c:Chunk)-[:MENTIONS]->(e:Entity {key: $k}) RETURN offset(id(c)) AS o"
Q_ENTITY_COLUMNS = "MATCH (e:Entity) RETURN offset(id(e)) AS o, e.key AS key, e.degree AS degree"
Q_CHUNK_COLUMNS = "MATCH (c:Chunk) RETURN offset(id(c)) AS o, c.id AS id, c.doc_id AS doc_id, c.ord AS ord"
# Documents are few next to chunks (one per source file), so their chunk-context fields are read once too.
Q_DOCUMENT_COLUMNS = (
    "MATCH (d:Document) RETURN offset(id(d)) AS o, d.id AS id, d.title AS doc_title,"
    " d.source_id AS doc_source_id, d.source_path AS doc_source_path"
)
Q_RELATION_KEYWORDS = (
    "MATCH ()-[r:RELATED]->() UNWIND r.keywords AS k"
    " RETURN k AS keyword, count(*) AS n ORDER BY n DESC, keyword LIMIT $limit"
)
# Whole-table scans for a resident copy of a read-only graph (hxd2_ray.graph.resident): nodes by offset,
# relationships as offset pairs. Read once when an index is opened, never per question.
Q_SCAN = {
    "Entity": f"MATCH (e:Entity) RETURN offset(id(e)) AS o, {_ENTITY_RETURN}",
    "Chunk": (
        "MATCH (c:Chunk) RETURN offset(id(c)) AS o, c.id AS id, c.doc_id AS doc_id, c.ord AS ord, c.start AS start,"
        " c.text AS text, c.header_path AS header_path, c.language AS language"
    ),
    "Document": Q_DOCUMENT_COLUMNS,
    "RELATED": (
        "MATCH (a:Entity)-[r:RELATED]->(b:Entity) RETURN offset(id(a)) AS a, offset(id(b)) AS b,"
        " r.description AS description, r.keywords AS keywords, r.weight AS weight,"
        " r.source_chunk_ids AS source_chunk_ids, r.mention_count AS mention_count"
    ),
    "MENTIONS": "MATCH (c:Chunk)-[:MENTIONS]->(e:Entity) RETURN offset(id(c)) AS c, offset(id(e)) AS e",
    "SYNONYM": (
        "MATCH (a:Entity)-[s:SYNONYM]->(b:Entity) RETURN offset(id(a)) AS a, offset(id(b)) AS b, s.score AS score"
    ),
    "NAMES_TITLE": "MATCH (c:Chunk)-[:NAMES_TITLE]->(d:Document) RETURN offset(id(c)) AS c, d.id AS doc_id",
}

# Pages of whole tables for exports and statistics (hxd2_ray.graph_export, hxd2_ray.graph_views): rows of the
# nodes whose offset is in [$lo, $hi); a relationship table pages by its FROM node's offset, so every
# relationship comes once and a page costs what it returns (~0.1 s per 10k entities at 100k).
_RANGE = "offset(id({v})) >= $lo AND offset(id({v})) < $hi"
Q_PAGE = {
    "Document": f"MATCH (d:Document) WHERE {_RANGE.format(v='d')} RETURN d.id AS id, d.source_id AS source_id,"
    " d.source_path AS source_path, d.title AS title, d.n_chars AS n_chars",
    "Chunk": f"MATCH (c:Chunk) WHERE {_RANGE.format(v='c')} RETURN c.id AS id, c.doc_id AS doc_id, c.ord AS ord,"
    " c.start AS start, c.text AS text, c.header_path AS header_path, c.language AS language",
    "Entity": f"MATCH (e:Entity) WHERE {_RANGE.format(v='e')} RETURN {_ENTITY_RETURN}",
    "RELATED": f"MATCH (a:Entity)-[r:RELATED]->(b:Entity) WHERE {_RANGE.format(v='a')} RETURN a.key AS source_key,"
    " b.key AS target_key, r.description AS description, r.keywords AS keywords, r.weight AS weight,"
    " r.source_chunk_ids AS source_chunk_ids, r.mention_count AS mention_count",
    # Endpoints only, as node offsets (connected components without the keys' strings).
    "RELATED_ENDS": f"MATCH (a:Entity)-[r:RELATED]->(b:Entity) WHERE {_RANGE.format(v='a')}"
    " RETURN offset(id(a)) AS a, offset(id(b)) AS b",
    "MENTIONS": f"MATCH (c:Chunk)-[:MENTIONS]->(e:Entity) WHERE {_RANGE.format(v='c')}"
    " RETURN c.id AS chunk_id, e.key AS entity_key",
    "PART_OF": f"MATCH (c:Chunk)-[:PART_OF]->(d:Document) WHERE {_RANGE.format(v='c')}"
    " RETURN c.id AS chunk_id, d.id AS doc_id",
}
# The node table a page's offsets count in, and the bound of those offsets.
PAGE_NODE_TABLE = {
    "Document": "Document",
    "Chunk": "Chunk",
    "Entity": "Entity",
    "RELATED": "Entity",
    "RELATED_ENDS": "Entity",
    "MENTIONS": "Chunk",
    "PART_OF": "Chunk",
}
Q_MAX_OFFSET = {
    "Document": "MATCH (n:Document) RETURN max(offset(id(n))) AS m",
    "Chunk": "MATCH (n:Chunk) RETURN max(offset(id(n))) AS m",
    "Entity": "MATCH (n:Entity) RETURN max(offset(id(n))) AS m",
}

# The named reads of :mod:`hxd2_ray.graph.templates`, per key / per pair (a batched ``UNWIND $keys`` form
# scans the table, see above). ``LIMIT $limit`` caps a named read's whole result, so each key's query is
# limited to what is left after the earlier keys.
_LF_EDGE = (
    "a.key AS a_key, a.name AS a_name, b.key AS b_key, b.name AS b_name,"
    " r.description AS description, r.keywords AS keywords"
)
_LF_PATH = (
    "a.key AS a_key, a.name AS a_name, m.key AS m_key, m.name AS m_name, b.key AS b_key, b.name AS b_name,"
    " r1.description AS d1, r1.keywords AS k1, r2.description AS d2, r2.keywords AS k2"
)
Q_LF_EDGES_OF = f"MATCH (a:Entity {{key: $k}})-[r:RELATED]-(b:Entity) RETURN {_LF_EDGE} LIMIT $limit"
Q_LF_PATHS_2HOP_OF = (
    "MATCH (a:Entity {key: $k})-[r1:RELATED]-(m:Entity)-[r2:RELATED]-(b:Entity) WHERE b.key <> $k"
    f" RETURN {_LF_PATH} LIMIT $limit"
)
Q_LF_EDGES_BETWEEN_PAIR = f"MATCH (a:Entity {{key: $s}})-[r:RELATED]-(b:Entity {{key: $t}}) RETURN {_LF_EDGE}"
Q_LF_PATHS_BETWEEN_PAIR = (
    "MATCH (a:Entity {key: $s})-[r1:RELATED]-(m:Entity)-[r2:RELATED]-(b:Entity {key: $t})"
    f" RETURN {_LF_PATH} LIMIT $limit"
)
Q_LF_ENTITY_NAMES = "MATCH (e:Entity) RETURN e.key AS key, e.name AS name ORDER BY e.key SKIP $skip LIMIT $limit"
Q_LF_NAME_OF = "MATCH (e:Entity {key: $k}) RETURN e.key AS key, e.name AS name"

_PARAM_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


@functools.lru_cache(maxsize=256)
def _template_params(query: str) -> frozenset[str]:
    return frozenset(_PARAM_RE.findall(query))


def check_params(query: str, params: Mapping[str, Any]) -> None:
    """Every ``$name`` in the template must be bound, and nothing else (Kùzu rejects extras anyway).

    Kùzu 0.11.3 runs a query with an unbound parameter as if the filter were absent, returning wrong
    rows instead of failing; this guard turns that into an error.
    """
    names = _template_params(query)
    missing = sorted(names - params.keys())
    extra = sorted(params.keys() - names)
    if missing or extra:
        raise ValueError(f"query parameters do not match the template: unbound {missing}, unused {extra}: {query!r}")


# ---------------------------------------------------------------------------------------------------
# Arrow preparation (pure: no Kùzu), exposed so tests and the job can inspect what would be loaded.


def _require_columns(table: pa.Table, schema: pa.Schema, what: str) -> None:
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise ValueError(f"{what} table lacks columns {missing}; expected {schema.names}")


def _fill_nulls(col: pa.ChunkedArray, typ: pa.DataType) -> pa.ChunkedArray:
    """Readers get "" / 0 / False / [] instead of None, so rows look the same however they were staged."""
    col = col.cast(typ)
    if col.null_count == 0:
        return col
    if pa.types.is_list(typ):
        empty = pa.scalar([], type=typ)
        return pc.if_else(pc.is_null(col), empty, col)
    default = {pa.string(): "", pa.int64(): 0, pa.bool_(): False, pa.float64(): 0.0}[typ]
    return pc.fill_null(col, pa.scalar(default, type=typ))


def _select(table: pa.Table, source_names: list[str], schema: pa.Schema, what: str) -> pa.Table:
    """Columns ``source_names`` renamed and cast to ``schema`` (the DDL order)."""
    cols = []
    for src, field in zip(source_names, schema):
        if src not in table.column_names:
            raise ValueError(f"{what} table lacks column {src!r}")
        cols.append(_fill_nulls(table[src], field.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _check_no_null(table: pa.Table, column: str, what: str) -> None:
    nulls = table[column].null_count
    if nulls:
        raise ValueError(f"{what}: {nulls} rows have a null {column!r} (a primary key)")


def _dedup(table: pa.Table, keys: list[str]) -> pa.Table:
    """First row per key (duplicate primary keys make COPY fail); input order is otherwise kept."""
    if table.num_rows == 0:
        return table
    if len(keys) == 1 and pc.count_distinct(table[keys[0]]).as_py() == table.num_rows:
        return table
    idx = pa.array(np.arange(table.num_rows, dtype=np.int64))
    firsts = (
        table.select(keys).append_column("__row", idx).group_by(keys, use_threads=False).aggregate([("__row", "min")])
    )
    return table.take(np.sort(firsts["__row_min"].to_numpy()))


def _positions(values: pa.ChunkedArray | pa.Array, universe: pa.Array) -> np.ndarray:
    """Row of each value in ``universe`` (unique strings), -1 where absent: joins as integer arrays."""
    return pc.fill_null(pc.index_in(values, value_set=universe), -1).to_numpy().astype(np.int64)


def _canonical_relations(rel: pa.Table) -> pa.Table:
    """Orient every relation smaller-key-first (Arrow compares UTF-8 bytes, the same order as Python str)."""
    src, tgt = rel["from"], rel["to"]
    swap = pc.greater(src, tgt)
    if pc.any(swap).as_py():
        rel = rel.set_column(0, "from", pc.if_else(swap, tgt, src))
        rel = rel.set_column(1, "to", pc.if_else(swap, src, tgt))
    return rel


def prepare_tables(
    documents: pa.Table,
    chunks: pa.Table,
    entities: pa.Table,
    relations: pa.Table,
    synonyms: pa.Table | None = None,
    title_mentions: pa.Table | None = None,
) -> dict[str, pa.Table]:
    """Turn the staging tables (graph.schema) into the COPY inputs, keyed by graph table.

    ``synonyms`` (``schema.SYNONYMS``): entity pairs oriented smaller key first, one row per pair (the first),
    self-pairs dropped; an endpoint that is not an entity is an error, as for relations.
    ``title_mentions`` (``schema.TITLE_MENTIONS``): (chunk, document) pairs, one row per pair; an end that is not a
    loaded chunk or document is an error."""
    _require_columns(documents, schema.DOCUMENTS, "documents")
    _require_columns(chunks, schema.CHUNKS.remove(schema.CHUNKS.get_field_index("shard")), "chunks")
    _require_columns(entities, schema.ENTITIES, "entities")
    _require_columns(relations, schema.RELATIONS, "relations")

    docs = _select(documents, DOCUMENT_COLUMNS.names, DOCUMENT_COLUMNS, "documents")
    _check_no_null(documents, "id", "documents")
    docs = _dedup(docs, ["id"])

    chunk_src = ["id", "doc_id", "order", "start", "text", "header_path", "language"]
    chk = _select(chunks, chunk_src, CHUNK_COLUMNS, "chunks")
    _check_no_null(chunks, "id", "chunks")
    chk = _dedup(chk, ["id"])

    ent_src = [n for n in ENTITY_COLUMNS.names if n != "degree"]
    ent = _select(entities, ent_src, ENTITY_COLUMNS.remove(ENTITY_COLUMNS.get_field_index("degree")), "entities")
    _check_no_null(entities, "key", "entities")
    ent = _dedup(ent, ["key"])

    rel_src = ["source_key", "target_key", "description", "keywords", "weight", "source_chunk_ids", "mention_count"]
    for col in ("source_key", "target_key"):
        _check_no_null(relations, col, "relations")
    rel = _canonical_relations(_select(relations, rel_src, RELATED_COLUMNS, "relations"))
    # Pairs, degrees and mentions are joined on integer row positions (not string group-bys): the
    # entity keys are hashed once per column and the rest is numpy.
    keys = ent["key"].combine_chunks()
    n_ent = max(len(keys), 1)  # the pair-code base; 1 keeps the arithmetic defined with no entities
    src, tgt = _positions(rel["from"], keys), _positions(rel["to"], keys)
    absent = (src < 0) | (tgt < 0)
    if absent.any():
        ends = pa.chunked_array(rel["from"].chunks + rel["to"].chunks, type=pa.string())
        missing = pc.unique(pc.filter(ends, pa.array(np.concatenate([src < 0, tgt < 0]))))
        shown = ", ".join(repr(k) for k in missing.slice(0, 5).to_pylist())
        raise ValueError(
            f"{len(missing)} relation endpoints are not entities (e.g. {shown}); "
            "the merge stage must create an entity for every relation endpoint"
        )
    _, first = np.unique(src * n_ent + tgt, return_index=True)
    if len(first) < rel.num_rows:  # duplicate pairs: keep the first, in input order
        keep = np.sort(first)
        rel, src, tgt = rel.take(keep), src[keep], tgt[keep]
    # LightRAG node degree: edges touching the entity, a self-loop counted once.
    degree = np.bincount(src, minlength=n_ent) + np.bincount(tgt[src != tgt], minlength=n_ent)
    ent = ent.append_column(ENTITY_COLUMNS.field("degree"), pa.array(degree[: len(keys)].astype(np.int64)))

    # MENTIONS: chunk -> entity for each distinct source chunk id that is a loaded chunk.
    chunk_ids = chk["id"].combine_chunks()
    id_lists = ent["source_chunk_ids"].combine_chunks()
    owner = pc.list_parent_indices(id_lists).to_numpy().astype(np.int64)
    chunk_pos = _positions(pc.list_flatten(id_lists), chunk_ids)
    found = chunk_pos >= 0
    pairs = np.unique(chunk_pos[found] * n_ent + owner[found])  # sorted by chunk: COPY-friendly
    men = pa.Table.from_arrays(
        [chunk_ids.take(pa.array(pairs // n_ent)), keys.take(pa.array(pairs % n_ent))], schema=MENTIONS_COLUMNS
    )

    # PART_OF: chunk -> its document, when the document was loaded.
    part = pa.Table.from_arrays([chk["id"], chk["doc_id"]], schema=PART_OF_COLUMNS)
    part = part.filter(pc.is_in(part["to"], value_set=docs["id"].combine_chunks()))

    syn = _prepare_synonyms(synonyms, keys, n_ent)
    titles = _prepare_title_mentions(title_mentions, chunk_ids, docs["id"].combine_chunks())
    return {
        "Document": docs,
        "Chunk": chk,
        "Entity": ent,
        "RELATED": rel,
        "MENTIONS": men,
        "PART_OF": part,
        "SYNONYM": syn,
        "NAMES_TITLE": titles,
    }


def _prepare_title_mentions(title_mentions: pa.Table | None, chunk_ids: pa.Array, doc_ids: pa.Array) -> pa.Table:
    if title_mentions is None or title_mentions.num_rows == 0:
        return NAMES_TITLE_COLUMNS.empty_table()
    _require_columns(title_mentions, schema.TITLE_MENTIONS, "title_mentions")
    for col in ("chunk_id", "doc_id"):
        _check_no_null(title_mentions, col, "title_mentions")
    rows = _dedup(
        _select(title_mentions, ["chunk_id", "doc_id"], NAMES_TITLE_COLUMNS, "title_mentions"), ["from", "to"]
    )
    absent = (_positions(rows["from"], chunk_ids) < 0) | (_positions(rows["to"], doc_ids) < 0)
    if absent.any():
        raise ValueError(f"{int(absent.sum())} title mentions name chunks or documents that are not loaded")
    return rows


def _prepare_synonyms(synonyms: pa.Table | None, keys: pa.Array, n_ent: int) -> pa.Table:
    if synonyms is None or synonyms.num_rows == 0:
        return SYNONYM_COLUMNS.empty_table()
    _require_columns(synonyms, schema.SYNONYMS, "synonyms")
    for col in ("source_key", "target_key"):
        _check_no_null(synonyms, col, "synonyms")
    syn = _canonical_relations(_select(synonyms, ["source_key", "target_key", "score"], SYNONYM_COLUMNS, "synonyms"))
    src, tgt = _positions(syn["from"], keys), _positions(syn["to"], keys)
    if ((src < 0) | (tgt < 0)).any():
        raise ValueError(f"{int(((src < 0) | (tgt < 0)).sum())} synonym pairs name entities that are not loaded")
    keep = src != tgt
    _, first = np.unique(src[keep] * n_ent + tgt[keep], return_index=True)
    return syn.take(np.flatnonzero(keep)[np.sort(first)])


# ---------------------------------------------------------------------------------------------------


def _one_result(result: kuzu.QueryResult | list[kuzu.QueryResult]) -> kuzu.QueryResult:
    """``Connection.execute`` gives a list only for text holding several statements; every template is one."""
    if isinstance(result, list):
        raise TypeError(f"expected one statement's result, got {len(result)}: the query text holds several")
    return result


def _open_database(path: Path, read_only: bool, max_threads: int, buffer_pool_bytes: int) -> kuzu.Database:
    return kuzu.Database(
        str(path), read_only=read_only, max_num_threads=max_threads, buffer_pool_size=buffer_pool_bytes
    )


class KuzuGraphWriter:
    """Single-use bulk loader: open read-write, :meth:`bulk_load` once (which closes the database).

    A failed load leaves a partial database behind; the job builds into a fresh temporary path and only
    renames it into place after ``close()``, so a half graph is never published.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_threads: int = 0, buffer_pool_bytes: int = 0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db: kuzu.Database | None = _open_database(self.path, False, max_threads, buffer_pool_bytes)
        self._conn: kuzu.Connection | None = kuzu.Connection(self._db)
        existing = _one_result(self._conn.execute(Q_SHOW_TABLES)).get_as_arrow()["name"].to_pylist()
        if existing:
            self.close()
            raise ValueError(
                f"graph database at {self.path} is not empty (tables {sorted(existing)}); "
                "bulk loads go into a fresh path"
            )

    def bulk_load(
        self,
        documents: pa.Table,
        chunks: pa.Table,
        entities: pa.Table,
        relations: pa.Table,
        synonyms: pa.Table | None = None,
        title_mentions: pa.Table | None = None,
    ) -> dict[str, int]:
        """Create the schema, COPY everything, checkpoint and close (also on failure).

        Returns rows loaded per :data:`COUNT_NAMES` entry. Closing here means the file is complete and
        unlocked as soon as this returns, even when the caller never calls :meth:`close`.
        """
        if self._conn is None:
            raise RuntimeError("KuzuGraphWriter is closed: a writer loads once (build into a fresh path)")
        try:
            prepared = prepare_tables(documents, chunks, entities, relations, synonyms, title_mentions)
            for stmt in DDL:
                self._conn.execute(stmt)
            for name in LOAD_ORDER:
                table = prepared[name]
                if table.num_rows:  # nothing to copy; skip the statement
                    params = {"t": table}
                    check_params(Q_COPY[name], params)
                    self._conn.execute(Q_COPY[name], params)
            # Fold the WAL into the single database file so it can be copied/uploaded as one file.
            self._conn.execute(Q_CHECKPOINT)
        finally:
            self.close()
        return {
            "documents": prepared["Document"].num_rows,
            "chunks": prepared["Chunk"].num_rows,
            "entities": prepared["Entity"].num_rows,
            "relations": prepared["RELATED"].num_rows,
            "mentions": prepared["MENTIONS"].num_rows,
        }

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "KuzuGraphWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_graph(
    path: str | os.PathLike[str],
    documents: pa.Table,
    chunks: pa.Table,
    entities: pa.Table,
    relations: pa.Table,
    *,
    max_threads: int = 0,
    synonyms: pa.Table | None = None,
    title_mentions: pa.Table | None = None,
) -> dict[str, int]:
    """Open a writer on a fresh ``path``, load, close. Returns the loaded counts."""
    with KuzuGraphWriter(path, max_threads=max_threads) as writer:
        return writer.bulk_load(documents, chunks, entities, relations, synonyms, title_mentions)


# ---------------------------------------------------------------------------------------------------


class _NodeColumns:
    """Columns of one node table indexed by node offset, read once (a full scan) and kept as Arrow arrays.

    ``take(offsets)`` gives each named column's values at those offsets as Python lists: one Arrow gather
    per column instead of a masked table scan per query. About 40 bytes per entity key at 1M entities.
    """

    __slots__ = ("columns", "size")

    def __init__(self, table: pa.Table, names: tuple[str, ...]):
        self.size = table.num_rows
        self.columns = {name: table[name].combine_chunks() for name in names}

    def take(self, offsets: list[int]) -> dict[str, list[Any]]:
        idx = pa.array(offsets, type=pa.int64())
        return {name: col.take(idx).to_pylist() for name, col in self.columns.items()}


class KuzuGraphStore:
    """Read side (:class:`hxd2_ray.graph.base.GraphStore`). Thread-safe: one Kùzu connection per thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        read_only: bool = True,
        *,
        max_threads: int = 0,
        buffer_pool_bytes: int = 0,
        node_columns: bool | None = None,
    ):
        """``node_columns``: resolve far nodes of neighbour and mention reads through offset-indexed columns
        (:class:`_NodeColumns`, loaded on first use or by :meth:`warm`). Default: on for a read-only store
        (the offsets cannot change under it), off otherwise; off reads everything per key (same rows)."""
        self.path = Path(path)
        if not self.path.exists():
            raise IndexNotFoundError(f"no graph database at {self.path}: the index is missing or was never completed")
        self._db: kuzu.Database | None = _open_database(self.path, read_only, max_threads, buffer_pool_bytes)
        self._open_args = (read_only, max_threads)
        self.buffer_pool_bytes = buffer_pool_bytes  # 0: Kùzu's default (a share of the machine's memory)
        self._local = threading.local()
        self._conns: list[kuzu.Connection] = []
        self._lock = threading.Lock()
        self._use_columns = read_only if node_columns is None else bool(node_columns)
        self._columns: dict[str, _NodeColumns | None] = {}  # None: not dense, use the per-key reads
        self._columns_lock = threading.Lock()
        self._docs: dict[str, dict[str, str]] | None = None
        tables_found = {row["name"] for row in self._rows(Q_SHOW_TABLES, {})}
        missing = [t for t in GRAPH_TABLES if t not in tables_found]
        if missing:
            self.close()
            raise IndexMismatchError(
                f"graph database at {self.path} lacks tables {missing}: it was not written by this "
                f"version (graph schema {GRAPH_SCHEMA_VERSION}); rebuild the index"
            )

    # -- plumbing --------------------------------------------------------------------------------

    def _conn(self) -> kuzu.Connection:
        if self._db is None:
            raise RuntimeError("KuzuGraphStore is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = kuzu.Connection(self._db)
            self._local.conn = conn
            self._local.prepared = {}
            with self._lock:
                self._conns.append(conn)
        return conn

    def _prepared(self, query: str) -> tuple[kuzu.Connection, Any]:
        """This thread's connection and its prepared statement for ``query`` (a template constant).

        Repeated per-key lookups are ~3-4x cheaper prepared once and executed with new bindings than
        re-planned on every ``execute(text, params)``. ``Connection.prepare`` is deprecated in 0.11.3
        (the engine is frozen, so it stays); the warning is silenced here, once per template and thread.
        """
        conn = self._conn()
        cache = self._local.prepared
        stmt = cache.get(query)
        if stmt is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                stmt = conn.prepare(query)
            if not stmt.is_success():
                raise RuntimeError(f"cannot prepare {query!r}: {stmt.get_error_message()}")
            cache[query] = stmt
        return conn, stmt

    def _rows(self, query: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        check_params(query, params)
        conn, stmt = self._prepared(query)
        res = _one_result(conn.execute(stmt, dict(params)))
        try:
            cols = res.get_column_names()
            return [dict(zip(cols, row)) for row in res.get_all()]
        finally:
            res.close()

    def _rows_each(self, query: str, name: str, values: Iterable[Any], **fixed: Any) -> list[list[dict[str, Any]]]:
        """``query`` once per value bound to ``$name`` (plus the ``fixed`` params): one row list per value.

        Per-value execution is what keeps primary-key lookups indexed (see the template comments). Every
        binding goes through :meth:`_rows` (the parameter guard and the prepared statement).
        """
        return [self._rows(query, {name: value, **fixed}) for value in values]

    def _node_columns(self, table: str) -> _NodeColumns | None:
        """Offset-indexed columns of ``table`` (a key of :data:`_COLUMN_LOADS`), loaded once; None when off or
        when the table's offsets are not dense (then callers use the per-key templates)."""
        if not self._use_columns:
            return None
        if table in self._columns:
            return self._columns[table]
        with self._columns_lock:
            if table not in self._columns:
                query, names = _COLUMN_LOADS[table]
                check_params(query, {})
                res = _one_result(self._conn().execute(query))
                try:
                    data = res.get_as_arrow(chunk_size=1_000_000)
                finally:
                    res.close()
                offsets = data["o"].to_numpy()
                if len(offsets) and not np.array_equal(offsets, np.arange(len(offsets))):
                    order = np.argsort(offsets, kind="stable")
                    data, offsets = data.take(pa.array(order)), offsets[order]
                dense = np.array_equal(offsets, np.arange(len(offsets)))
                self._columns[table] = _NodeColumns(data, names) if dense else None
            return self._columns[table]

    def _documents(self) -> dict[str, dict[str, str]] | None:
        """Document id -> its chunk-context fields (:data:`Q_DOCUMENT`'s columns), read once; None when
        node columns are off."""
        if not self._use_columns:
            return None
        docs = self._docs
        if docs is None:
            table = self._node_columns("Document")
            if table is None:
                return None
            cols = table.columns
            fields = ("doc_title", "doc_source_id", "doc_source_path")
            values = zip(*(cols[f].to_pylist() for f in fields))
            docs = {i: dict(zip(fields, v)) for i, v in zip(cols["id"].to_pylist(), values)}
            self._docs = docs
        return docs

    def warm(self) -> None:
        """Load the node columns now rather than on the first neighbour/mention/chunk read (a query
        pipeline calls this when it is built, so the first question does not pay for the scans)."""
        for table in _COLUMN_LOADS:
            self._node_columns(table)
        self._documents()

    # -- queries ---------------------------------------------------------------------------------
    def scan_tables(self) -> dict[str, pa.Table]:
        """Every table of the graph as Arrow (:data:`Q_SCAN`'s columns; nodes carry their offset ``o``,
        relationships their endpoints' offsets), for a resident copy of a read-only index."""
        out = {}
        present = {row["name"] for row in self._rows(Q_SHOW_TABLES, {})}
        for name, query in Q_SCAN.items():
            if name in OPTIONAL_TABLES and name not in present:
                continue
            check_params(query, {})
            res = _one_result(self._conn().execute(query))
            try:
                out[name] = res.get_as_arrow(chunk_size=1_000_000)
            finally:
                res.close()
        return out

    def iter_pages(self, table: str, page_nodes: int = 50_000) -> Iterator[pa.Table]:
        """Every row of ``table`` (a key of :data:`Q_PAGE`) as Arrow pages: the rows of ``page_nodes`` consecutive
        nodes at a time (for a relationship table, of its FROM nodes), so memory stays bounded by the page."""
        if table not in Q_PAGE:
            raise ValueError(f"unknown page table {table!r}; valid: {', '.join(Q_PAGE)}")
        node_table = PAGE_NODE_TABLE[table]
        top = self._rows(Q_MAX_OFFSET[node_table], {})[0]["m"]
        if top is None:  # an empty table
            return
        step = max(1, int(page_nodes))
        for lo in range(0, int(top) + 1, step):
            params = {"lo": lo, "hi": lo + step}
            check_params(Q_PAGE[table], params)
            conn, stmt = self._prepared(Q_PAGE[table])
            res = _one_result(conn.execute(stmt, params))
            try:
                page = res.get_as_arrow(chunk_size=max(step, 1024))
            finally:
                res.close()
            if page.num_rows:
                yield page

    def reopen(self, buffer_pool_bytes: int) -> None:
        """Close and reopen the database (a buffer pool of ``buffer_pool_bytes``, 0: the default), which drops
        the pages the pool holds, e.g. after a whole-graph scan. Call it before other threads use the store:
        their connections are closed with the old database."""
        read_only, max_threads = self._open_args
        self.close()
        self._local = threading.local()
        self._db = _open_database(self.path, read_only, max_threads, buffer_pool_bytes)
        self.buffer_pool_bytes = buffer_pool_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes of the database on disk (a file, or a folder on older layouts)."""
        if self.path.is_dir():
            return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
        return self.path.stat().st_size

    def counts(self) -> dict[str, int]:
        return {name: int(self._rows(Q_COUNTS[name], {})[0]["n"]) for name in COUNT_NAMES}

    def get_entities(self, keys: Iterable[str]) -> list[EntityRow]:
        wanted = unique_in_order(keys)
        return [entity_row(rows[0]) for rows in self._rows_each(Q_ENTITY, "k", wanted) if rows]

    def find_entity_by_name(self, name: str, key_fn: Callable[[str], str] | None = None) -> EntityRow | None:
        if key_fn is not None:
            hits = self.get_entities([key_fn(name)])
            return hits[0] if hits else None
        rows = self._rows(Q_ENTITY_BY_NAME, {"name": name})
        return entity_row(rows[0]) if rows else None

    def neighbors(self, keys: Iterable[str], limit_per_entity: int | None = None) -> list[EdgeRow]:
        seeds = unique_in_order(keys)
        if not seeds:
            return []
        ents = self._node_columns("Entity")
        if ents is not None:
            per_seed = self._rows_each(Q_NEIGHBOR_OFFSETS_OF, "k", seeds)
            flat = [r for rows in per_seed for r in rows]
            far = ents.take([r["other"] for r in flat])
            for r, key, degree in zip(flat, far["key"], far["degree"]):
                r["other"] = key
                r["degree"] = r.pop("seed_degree") + degree
            return rank_neighbors(seeds, per_seed, limit_per_entity)
        return rank_neighbors(seeds, self._rows_each(Q_NEIGHBORS_OF, "k", seeds), limit_per_entity)

    def get_relations(self, pairs: Iterable[tuple[str, str]]) -> list[EdgeRow]:
        wanted = unique_in_order(canonical_pair(a, b) for a, b in pairs)
        found: list[EdgeRow] = []
        for s, t in wanted:
            rows = self._rows(Q_RELATION, {"s": s, "t": t})
            if rows:
                found.append(edge_row(rows[0]["a_key"], rows[0]["b_key"], rows[0]))
        return found

    def chunks_for_entities(self, keys: Iterable[str]) -> dict[str, list[str]]:
        wanted = unique_in_order(keys)
        out: dict[str, list[str]] = {}
        chunks = self._node_columns("Chunk")
        if chunks is not None:
            per_key = self._rows_each(Q_CHUNK_OFFSETS_OF_ENTITY, "k", wanted)
            cols = chunks.take([r["o"] for rows in per_key for r in rows])
            found = iter(zip(cols["id"], cols["doc_id"], cols["ord"]))
            for key, rows in zip(wanted, per_key):
                mine = [next(found) for _ in rows]
                mine.sort(key=lambda t: (t[1], t[2], t[0]))
                out[key] = [t[0] for t in mine]
            return out
        for key, rows in zip(wanted, self._rows_each(Q_CHUNKS_OF_ENTITY, "k", wanted)):
            rows.sort(key=lambda r: (r["doc_id"], r["ord"], r["id"]))
            out[key] = [r["id"] for r in rows]
        return out

    def get_chunks(self, ids: Iterable[str]) -> list[ChunkRow]:
        wanted = unique_in_order(ids)
        chunks = [rows[0] for rows in self._rows_each(Q_CHUNK, "i", wanted) if rows]
        doc_ids = unique_in_order(r["doc_id"] for r in chunks)
        all_docs = self._documents()
        if all_docs is not None:
            docs = {d: all_docs[d] for d in doc_ids if d in all_docs}
        else:
            docs = {d: rows[0] for d, rows in zip(doc_ids, self._rows_each(Q_DOCUMENT, "d", doc_ids)) if rows}
        out: list[ChunkRow] = []
        for r in chunks:
            d = docs.get(r["doc_id"], {})
            out.append(
                ChunkRow(
                    id=r["id"],
                    doc_id=r["doc_id"],
                    order=int(r["ord"]),
                    start=int(r["start"]),
                    text=r["text"],
                    header_path=r["header_path"],
                    language=r["language"],
                    doc_title=d.get("doc_title") or "",
                    doc_source_id=d.get("doc_source_id") or "",
                    doc_source_path=d.get("doc_source_path") or "",
                )
            )
        return out

    def entity_degree(self, keys: Iterable[str]) -> dict[str, int]:
        wanted = unique_in_order(keys)
        return {rows[0]["key"]: int(rows[0]["degree"]) for rows in self._rows_each(Q_DEGREE, "k", wanted) if rows}

    def top_relation_keywords(self, limit: int) -> list[str]:
        """The ``limit`` most frequent relation keywords, most frequent first (ties by keyword)."""
        rows = self._rows(Q_RELATION_KEYWORDS, {"limit": max(0, int(limit))})
        return [str(r["keyword"]) for r in rows if r["keyword"]]

    # -- named reads (hxd2_ray.graph.templates) ----------------------------------------------------

    def run_template(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A named read of :data:`~hxd2_ray.graph.templates.LOGIC_TEMPLATES`, run per key/pair so every lookup
        uses the primary-key index: at most ``limit`` rows in all where the read has one (keys in the order
        given, each key's rows in engine order)."""
        check_template(name, params)
        if name == LF_EDGES:
            return self._lf_per_key(Q_LF_EDGES_OF, params["keys"], _limit(params))
        if name == LF_PATHS_2HOP:
            return self._lf_per_key(Q_LF_PATHS_2HOP_OF, params["keys"], _limit(params))
        if name == LF_EDGES_BETWEEN:
            return self._lf_per_pair(Q_LF_EDGES_BETWEEN_PAIR, params["pairs"], None)
        if name == LF_PATHS_BETWEEN:
            return self._lf_per_pair(Q_LF_PATHS_BETWEEN_PAIR, params["pairs"], _limit(params))
        if name == LF_ENTITY_NAMES:
            return self._rows(Q_LF_ENTITY_NAMES, {"skip": params["skip"], "limit": params["limit"]})
        if name == LF_NAMES_OF:
            return self._lf_per_key(Q_LF_NAME_OF, params["keys"], None)
        raise ValueError(f"unknown named read {name!r}; valid: {', '.join(sorted(LOGIC_TEMPLATES))}")

    def _lf_per_key(self, query: str, keys: Iterable[str], limit: int | None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for key in keys:  # not deduplicated: UNWIND would repeat a repeated key's rows too
            if limit is None:
                rows.extend(self._rows(query, {"k": key}))
                continue
            left = limit - len(rows)
            if left <= 0:
                break
            rows.extend(self._rows(query, {"k": key, "limit": left}))
        return rows

    def _lf_per_pair(self, query: str, pairs: Iterable[Mapping[str, str]], limit: int | None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for pair in pairs:
            params: dict[str, Any] = {"s": pair["s"], "t": pair["t"]}
            if limit is not None:
                left = limit - len(rows)
                if left <= 0:
                    break
                params["limit"] = left
            rows.extend(self._rows(query, params))
        return rows

    def close(self) -> None:
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self._local = threading.local()
        self._columns, self._docs = {}, None
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "KuzuGraphStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_COLUMN_LOADS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Entity": (Q_ENTITY_COLUMNS, ("key", "degree")),
    "Chunk": (Q_CHUNK_COLUMNS, ("id", "doc_id", "ord")),
    "Document": (Q_DOCUMENT_COLUMNS, ("id", "doc_title", "doc_source_id", "doc_source_path")),
}


def _limit(params: Mapping[str, Any]) -> int:
    return max(0, int(params["limit"]))
