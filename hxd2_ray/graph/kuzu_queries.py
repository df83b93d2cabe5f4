"""The Cypher the Kùzu store runs, as constants (no data is ever spliced into query text), and the check that every
``$param`` of a template is bound (an unbound one matches as if unfiltered on 0.11.3)."""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping

from hxd2_ray.graph.kuzu_schema import (
    LOAD_ORDER,
)

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

# Q_SCAN a page at a time (the rows of the nodes whose offset is in [$lo, $hi); a relationship table by its FROM
# node), so a scan of a large graph holds one page's result in the engine's buffer pool, not the whole table's.
_SCAN_PAGE_VAR = {"Entity": "e", "Chunk": "c", "Document": "d", "RELATED": "a", "MENTIONS": "c", "SYNONYM": "a"}
_SCAN_PAGE_VAR["NAMES_TITLE"] = "c"
Q_SCAN_PAGE = {
    name: query.replace(" RETURN ", f" WHERE offset(id({var})) >= $lo AND offset(id({var})) < $hi RETURN ", 1)
    for name, query in Q_SCAN.items()
    if (var := _SCAN_PAGE_VAR[name])
}
SCAN_PAGE_NODE_TABLE = {
    "Entity": "Entity",
    "Chunk": "Chunk",
    "Document": "Document",
    "RELATED": "Entity",
    "MENTIONS": "Chunk",
    "SYNONYM": "Entity",
    "NAMES_TITLE": "Chunk",
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
