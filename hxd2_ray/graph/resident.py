"""A read-only graph held in memory: the query pipeline's reads as array lookups instead of Kùzu statements.

A question touches 40-100 keys (matched entities, their neighbours' endpoints, the chunks that mention them),
and Kùzu 0.11.3 answers a key at a time: every list-parameter form scans the table, so each key costs a
prepared statement of ~0.15-0.25 ms, 8 of the sample index's 10 ms retrieval and 20-26 of 25-35 ms on
synthetic graphs of 10k-1M entities. A served or evaluated index is read-only,
so it can be read once into Arrow columns and offset arrays (a CSR adjacency per relationship table) and
looked up in microseconds. What is held is what Kùzu holds; every read returns exactly the rows the Kùzu
store returns for the same keys (contract-tested against it), and anything else (counts, logic-form
templates) still goes to Kùzu, which stays the store of record.

Memory is about 3.5x the database file (Arrow columns, key -> offset dicts for entities and chunks, the CSR
arrays): 1.13 GB for a 333 MB file of 1M entities, 1.5M relations and 250k chunks, read in ~5 s. So
:func:`open_resident` holds a graph only while its file is under a configured limit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.errors import IndexMismatchError
from hxd2_ray.graph.base import (
    ChunkRow,
    EdgeRow,
    EntityRow,
    GraphStore,
    canonical_pair,
    chunk_row,
    edge_row,
    entity_row,
    rank_neighbors,
    unique_in_order,
)

if TYPE_CHECKING:
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore

log = logging.getLogger(__name__)

__all__ = ["ResidentArrays", "ResidentGraph", "WalkEdges", "open_resident"]

_EDGE_PROPS = ("description", "keywords", "weight", "source_chunk_ids", "mention_count")


@dataclass(frozen=True)
class ResidentArrays:
    """The held columns and CSR arrays, shared (not copied), for code that walks the whole graph (GraphFlow).
    Read-only by contract: nothing may write into them."""

    entity_keys: list[str]  # entity offset -> key
    entities: pa.Table  # entity offset -> row (name, type, description, ..., degree)
    chunk_ids: list[str]  # chunk offset -> id
    chunks: pa.Table  # chunk offset -> row (text, doc_id, ...)
    adj_ptr: np.ndarray  # entity i's RELATED neighbours are adj_other[adj_ptr[i]:adj_ptr[i+1]] (each edge both ways)
    adj_other: np.ndarray
    adj_edge: np.ndarray  # ... through edge adj_edge[j] (a row of edges)
    edges: pa.Table  # edge id -> description, keywords, weight, ...
    edge_source: np.ndarray  # edge id -> its stored (smaller-key) end
    mention_ptr: np.ndarray  # entity i is mentioned by the chunks mention_chunk[mention_ptr[i]:mention_ptr[i+1]]
    mention_chunk: np.ndarray


class NotDenseError(ValueError):
    """A node table's offsets have gaps (never the case for a bulk-loaded index): rows cannot be found by offset."""


def _by_offset(table: pa.Table, what: str) -> pa.Table:
    """Rows in offset order; offsets of a bulk-loaded table are 0..n-1, so row i is node offset i."""
    if table.num_rows == 0:
        return table
    offsets = table["o"].to_numpy()
    order = np.argsort(offsets, kind="stable")
    if not np.array_equal(offsets[order], np.arange(len(offsets))):
        raise NotDenseError(f"{what} node offsets are not dense (0..n-1); the resident graph cannot index them")
    return table.take(pa.array(order)) if not np.array_equal(order, np.arange(len(order))) else table


def _csr(owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row positions grouped by ``owner`` (0..n-1): ``order[indptr[i]:indptr[i+1]]`` are owner i's rows."""
    order = np.argsort(owner, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=indptr[1:])
    return indptr, order


def _ints(table: pa.Table, column: str) -> np.ndarray:
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    return table[column].to_numpy().astype(np.int64)


def _title_edges(names: pa.Table | None, chunks: pa.Table) -> tuple[np.ndarray, np.ndarray, int]:
    """The walk's chunk--title edges from the NAMES_TITLE rows (chunk offset ``c``, document id ``doc_id``): one
    title node per named document, joined to the chunks that name it and to the document's own chunks."""
    empty = np.zeros(0, np.int64)
    if names is None or not names.num_rows or not chunks.num_rows:
        return empty, empty, 0
    named_docs, naming_node = np.unique(np.asarray(names["doc_id"].to_pylist(), dtype=object), return_inverse=True)
    doc_of_chunk = np.asarray(chunks["doc_id"].to_pylist(), dtype=object)
    slot = {d: i for i, d in enumerate(named_docs.tolist())}
    own_node = np.fromiter((slot.get(d, -1) for d in doc_of_chunk), dtype=np.int64, count=len(doc_of_chunk))
    own_chunk = np.flatnonzero(own_node >= 0)
    return (
        np.concatenate([_ints(names, "c"), own_chunk]),
        np.concatenate([naming_node.astype(np.int64).ravel(), own_node[own_chunk]]),
        len(named_docs),
    )


@dataclass(frozen=True)
class WalkEdges:
    """The graph as offset arrays, for a random walk over entities and chunks (``retrieval.ppr``)."""

    n_entities: int
    n_chunks: int
    related: tuple[np.ndarray, np.ndarray]  # entity offsets of each RELATED edge (stored orientation)
    mentions: tuple[np.ndarray, np.ndarray]  # (chunk offset, entity offset) of each MENTIONS edge
    synonyms: tuple[np.ndarray, np.ndarray, np.ndarray]  # entity offsets and cosine of each SYNONYM edge
    # (chunk offset, title node) of each chunk--title edge: a title node per document some other chunk's text names
    # (NAMES_TITLE), joined to its own chunks and to the chunks naming it; ``n_titles`` such nodes.
    titles: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    n_titles: int = 0


class ResidentGraph:
    """:class:`~hxd2_ray.graph.base.GraphStore` reads from memory, over the store it was loaded from.

    ``store`` is the open (read-only) Kùzu store; ``tables`` its :meth:`scan_tables` output. The store is
    kept for the reads not held here and closed with this object.
    """

    def __init__(self, store: GraphStore, tables: Mapping[str, pa.Table]):
        self.store = store
        # One chunk per column: ``take`` on a multi-chunk column costs time in proportion to the whole table.
        tables = {name: t.combine_chunks() for name, t in tables.items()}
        entities = _by_offset(tables["Entity"], "Entity")
        chunks = _by_offset(tables["Chunk"], "Chunk")
        self._entities = entities.drop_columns(["o"]) if entities.num_rows else entities
        self._chunks = chunks.drop_columns(["o"]) if chunks.num_rows else chunks
        self._entity_keys: list[str] = self._entities["key"].to_pylist()
        self._entity_of = {k: i for i, k in enumerate(self._entity_keys)}  # shares the key strings
        self._chunk_ids: list[str] = self._chunks["id"].to_pylist()
        self._chunk_of = {c: i for i, c in enumerate(self._chunk_ids)}
        self._degree = _ints(self._entities, "degree")
        # Each chunk's rank in (doc_id, ord, id) order, the order chunks_for_entities returns a key's chunks in
        # (Arrow sorts strings by UTF-8 bytes, which is Python's code-point order).
        self._chunk_rank = np.zeros(len(self._chunk_ids), dtype=np.int64)
        if self._chunk_ids:
            order = pc.sort_indices(
                self._chunks, sort_keys=[("doc_id", "ascending"), ("ord", "ascending"), ("id", "ascending")]
            ).to_numpy()
            self._chunk_rank[order] = np.arange(len(order))
        docs = tables["Document"]
        fields = ("doc_title", "doc_source_id", "doc_source_path")
        self._docs = (
            {d: dict(zip(fields, v)) for d, *v in zip(*(docs[c].to_pylist() for c in ("id", *fields)))}
            if docs.num_rows
            else {}
        )

        n_ent = len(self._entity_keys)
        rel = tables["RELATED"]
        self._rel_a, rel_b = _ints(rel, "a"), _ints(rel, "b")
        self._rel_b = rel_b
        self._rel_props = rel.select(list(_EDGE_PROPS)) if rel.num_rows else rel
        self._rel_weight = rel["weight"].to_numpy() if rel.num_rows else np.zeros(0)
        # Undirected adjacency: each edge under both ends, a self-loop once (the ranking folds pairs anyway).
        # Within each entity's span the far ends are sorted, so a pair is a binary search, even at a hub.
        edge_ids = np.arange(len(self._rel_a), dtype=np.int64)
        loop = self._rel_a == rel_b
        ends = np.concatenate([self._rel_a, rel_b[~loop]])
        others = np.concatenate([rel_b, self._rel_a[~loop]])
        order = np.lexsort((others, ends))
        self._adj_edge = np.concatenate([edge_ids, edge_ids[~loop]])[order]
        self._adj_other = others[order]
        self._adj_ptr = np.zeros(n_ent + 1, dtype=np.int64)
        np.cumsum(np.bincount(ends, minlength=n_ent), out=self._adj_ptr[1:])

        men = tables["MENTIONS"]
        men_chunk, men_entity = _ints(men, "c"), _ints(men, "e")
        self._men_ptr, order = _csr(men_entity, n_ent)
        self._men_chunk = men_chunk[order]
        self._men_entity = men_entity[order]  # aligned with _men_chunk: the walk needs both ends

        # SYNONYM edges (near entity names, written by index builds since synonym edges exist; an older graph
        # has none). Only the random walk of the ``ppr`` chunk ranking reads them.
        syn = tables.get("SYNONYM")
        self._syn_a = _ints(syn, "a") if syn is not None else np.zeros(0, np.int64)
        self._syn_b = _ints(syn, "b") if syn is not None else np.zeros(0, np.int64)
        self._syn_score = (
            syn["score"].to_numpy().astype(np.float64) if syn is not None and syn.num_rows else np.zeros(0)
        )
        self._title_chunk, self._title_node, self._n_titles = _title_edges(tables.get("NAMES_TITLE"), self._chunks)

    def arrays(self) -> ResidentArrays:
        """Everything held, as shared read-only views (no copy)."""
        return ResidentArrays(
            entity_keys=self._entity_keys,
            entities=self._entities,
            chunk_ids=self._chunk_ids,
            chunks=self._chunks,
            adj_ptr=self._adj_ptr,
            adj_other=self._adj_other,
            adj_edge=self._adj_edge,
            edges=self._rel_props,
            edge_source=self._rel_a,
            mention_ptr=self._men_ptr,
            mention_chunk=self._men_chunk,
        )

    # -- reads held in memory ------------------------------------------------------------------------

    def get_entities(self, keys: Iterable[str]) -> list[EntityRow]:
        found = [i for k in unique_in_order(keys) if (i := self._entity_of.get(k)) is not None]
        return [entity_row(r) for r in self._entities.take(pa.array(found, type=pa.int64())).to_pylist()]

    def find_entity_by_name(self, name: str, key_fn: Callable[[str], str] | None = None) -> EntityRow | None:
        if key_fn is not None:
            hits = self.get_entities([key_fn(name)])
            return hits[0] if hits else None
        return self.store.find_entity_by_name(name)  # by the name property: rare, and ordered by Kùzu

    def neighbors(self, keys: Iterable[str], limit_per_entity: int | None = None) -> list[EdgeRow]:
        seeds = unique_in_order(keys)
        if not seeds:
            return []
        spans: list[tuple[int, np.ndarray, np.ndarray]] = []  # (seed offset, edge ids, far ends)
        for seed in seeds:
            i = self._entity_of.get(seed)
            if i is None:
                spans.append((-1, self._adj_edge[:0], self._adj_other[:0]))
                continue
            lo, hi = self._adj_ptr[i], self._adj_ptr[i + 1]
            edges, others = self._adj_edge[lo:hi], self._adj_other[lo:hi]
            if limit_per_entity is not None and len(edges) > limit_per_entity:
                edges, others = self._best_edges(edges, others, limit_per_entity)
            spans.append((i, edges, others))
        edge_ids = np.concatenate([edges for _, edges, _ in spans])
        rows = iter(self._rel_props.take(pa.array(edge_ids, type=pa.int64())).to_pylist() if len(edge_ids) else [])
        per_seed: list[list[dict[str, Any]]] = []
        for i, edges, others in spans:
            mine = []
            for other in others.tolist():
                r = next(rows)
                r["other"] = self._entity_keys[other]
                r["degree"] = int(self._degree[i] + self._degree[other])
                mine.append(r)
            per_seed.append(mine)
        return rank_neighbors(seeds, per_seed, limit_per_entity)

    def _best_edges(self, edges: np.ndarray, others: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """A hub's edges that can rank in its best ``limit`` (by far-end degree, then weight: the seed's degree is
        common to all), the whole tie at the cut included, so :func:`rank_neighbors` decides exactly as it would
        over every edge while only these become Python rows."""
        if limit <= 0:
            return edges[:0], others[:0]
        degree, weight = self._degree[others], self._rel_weight[edges]
        cut = np.lexsort((-weight, -degree))[limit - 1]
        keep = (degree > degree[cut]) | ((degree == degree[cut]) & (weight >= weight[cut]))
        return edges[keep], others[keep]

    def get_relations(self, pairs: Iterable[tuple[str, str]]) -> list[EdgeRow]:
        found: list[tuple[int, int, int]] = []
        for s, t in unique_in_order(canonical_pair(a, b) for a, b in pairs):
            i, j = self._entity_of.get(s), self._entity_of.get(t)
            if i is None or j is None:
                continue
            lo, hi = self._adj_ptr[i], self._adj_ptr[i + 1]
            at = lo + int(np.searchsorted(self._adj_other[lo:hi], j))
            # The loader keeps one edge per pair, stored smaller key first: the orientation asked.
            if at < hi and self._adj_other[at] == j and self._rel_a[self._adj_edge[at]] == i:
                found.append((int(self._adj_edge[at]), i, j))
        if not found:
            return []
        props = self._rel_props.take(pa.array([e for e, _, _ in found], type=pa.int64())).to_pylist()
        out = []
        for (_, i, j), r in zip(found, props):
            r["degree"] = int(self._degree[i] + self._degree[j])
            out.append(edge_row(self._entity_keys[i], self._entity_keys[j], r))
        return out

    def chunks_for_entities(self, keys: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for key in unique_in_order(keys):
            i = self._entity_of.get(key)
            if i is None:
                out[key] = []
                continue
            mine = self._men_chunk[self._men_ptr[i] : self._men_ptr[i + 1]]
            out[key] = [self._chunk_ids[c] for c in mine[np.argsort(self._chunk_rank[mine])].tolist()]
        return out

    def get_chunks(self, ids: Iterable[str]) -> list[ChunkRow]:
        found = [i for c in unique_in_order(ids) if (i := self._chunk_of.get(c)) is not None]
        rows = self._chunks.take(pa.array(found, type=pa.int64())).to_pylist()
        return [chunk_row(r, self._docs.get(r["doc_id"], {})) for r in rows]

    def entity_degree(self, keys: Iterable[str]) -> dict[str, int]:
        return {k: int(self._degree[i]) for k in unique_in_order(keys) if (i := self._entity_of.get(k)) is not None}

    # -- the arrays a random walk needs (chunk ranking ``ppr``) -------------------------------------------

    def walk_edges(self) -> WalkEdges:
        return WalkEdges(
            n_entities=len(self._entity_keys),
            n_chunks=len(self._chunk_ids),
            related=(self._rel_a, self._rel_b),
            mentions=(self._men_chunk, self._men_entity),
            synonyms=(self._syn_a, self._syn_b, self._syn_score),
            titles=(self._title_chunk, self._title_node),
            n_titles=self._n_titles,
        )

    def entity_offsets(self, keys: Iterable[str]) -> list[int | None]:
        return [self._entity_of.get(k) for k in keys]

    def chunk_offsets(self, ids: Iterable[str]) -> list[int | None]:
        return [self._chunk_of.get(c) for c in ids]

    def entity_keys_at(self, offsets: Iterable[int]) -> list[str]:
        return [self._entity_keys[i] for i in offsets]

    def chunk_ids_at(self, offsets: Iterable[int]) -> list[str]:
        return [self._chunk_ids[i] for i in offsets]

    def synonym_count(self) -> int:
        return len(self._syn_a)

    def document_chunks(self) -> list[tuple[str, np.ndarray]]:
        """(document title, offsets of its chunks) per document that has chunks."""
        if not self._chunk_ids:
            return []
        doc_of = self._chunks["doc_id"].to_pylist()
        by_doc: dict[str, list[int]] = {}
        for i, d in enumerate(doc_of):
            by_doc.setdefault(d, []).append(i)
        return [
            (self._docs.get(d, {}).get("doc_title") or "", np.asarray(rows, dtype=np.int64))
            for d, rows in by_doc.items()
        ]

    # -- everything else: the store of record ------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    def run_template(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self.store.run_template(name, params)

    def top_relation_keywords(self, limit: int) -> list[str]:
        return self.store.top_relation_keywords(limit)

    def scan_tables(self) -> dict[str, pa.Table]:
        return self.store.scan_tables()

    def warm(self) -> None:
        """Nothing to load: what this object answers was loaded with it, and the Kùzu store's node columns would
        only hold memory for reads that never reach the store."""

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "ResidentGraph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_resident(store: KuzuGraphStore, mode: str, max_mb: int) -> GraphStore:
    """``store`` held in memory (a :class:`ResidentGraph` over it) when ``mode`` is ``on``, or ``auto`` and the
    database file is at most ``max_mb``; otherwise ``store`` itself. ``off`` always reads through Kùzu."""
    if mode == "off":
        return store
    size_mb = store.size_bytes / 2**20
    if mode == "auto" and size_mb > max_mb:
        log.info("graph of %.0f MB above resident_graph_max_mb=%d: reading it through Kùzu", size_mb, max_mb)
        return store
    started = time.perf_counter()
    try:
        try:
            graph = ResidentGraph(store, store.scan_tables())
        except NotDenseError as exc:
            if mode == "on":
                raise IndexMismatchError(f"retrieval.resident_graph=on cannot hold this graph: {exc}") from None
            log.warning("reading the graph through Kùzu: %s", exc)
            return store
        # The scan left every page it read in Kùzu's buffer pool (~0.7 GB at 1M entities); a fresh database starts
        # empty and fills only with what the remaining Kùzu reads (counts, logic-form templates) touch.
        store.reopen(store.buffer_pool_bytes)
    except BaseException:
        store.close()
        raise
    log.info("graph of %.0f MB held in memory in %.2f s", size_mb, time.perf_counter() - started)
    return graph
