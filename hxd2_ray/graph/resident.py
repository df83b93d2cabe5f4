"""A read-only graph read from arrays: the query pipeline's reads as array lookups instead of Kùzu statements.

A question touches 40-100 keys (matched entities, their neighbours' endpoints, the chunks that mention them),
and Kùzu 0.11.3 answers a key at a time: every list-parameter form scans the table, so each key costs a
prepared statement of ~0.15-0.25 ms, 8 of the sample index's 10 ms retrieval and 20-26 of 25-35 ms on
synthetic graphs of 10k-1M entities. A served or evaluated index is read-only, so its reads are answered from
Arrow columns and CSR arrays (:mod:`hxd2_ray.graph.read_structures`) in microseconds. What is held is what
Kùzu holds; every read returns exactly the rows the Kùzu store returns for the same keys (contract-tested
against it), and anything else (counts, logic-form templates) still goes to Kùzu, the store of record.

The arrays are the generation's read structures, written at index time and memory-mapped: opening costs
milliseconds at any size and every process on a node shares the pages. An index written before them has its
arrays built in memory from the Kùzu file (about 3.5x the file, ~5 s per million entities, in every process),
up to ``retrieval.resident_graph_max_mb``; :func:`open_resident` says so, naming the command that writes them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, cast

import numpy as np
import pyarrow as pa

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
from hxd2_ray.graph.read_structures import (
    GraphReads,
    NotDenseError,
    build_graph_reads,
    document_chunks,
    has_graph_reads,
    open_graph_reads,
    read_relation_keywords,
)
from hxd2_ray.graph.walk_matrix import WalkMatrix

if TYPE_CHECKING:
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore

log = logging.getLogger(__name__)

__all__ = ["ResidentArrays", "ResidentGraph", "WalkEdges", "open_resident"]


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


@dataclass(frozen=True)
class WalkEdges:
    """The walk graph's edge lists as offset arrays (what :class:`WalkMatrix` is built from): for inspection."""

    n_entities: int
    n_chunks: int
    related: tuple[np.ndarray, np.ndarray]  # entity offsets of each RELATED edge (stored orientation)
    mentions: tuple[np.ndarray, np.ndarray]  # (chunk offset, entity offset) of each MENTIONS edge
    synonyms: tuple[np.ndarray, np.ndarray, np.ndarray]  # entity offsets and cosine of each SYNONYM edge
    # (chunk offset, title node) of each chunk--title edge: a title node per document some other chunk's text names
    # (NAMES_TITLE), joined to its own chunks and to the chunks naming it; ``n_titles`` such nodes.
    titles: tuple[np.ndarray, np.ndarray]
    n_titles: int


class ResidentGraph:
    """:class:`~hxd2_ray.graph.base.GraphStore` reads from arrays (:class:`GraphReads`: memory-mapped read
    structures written at index time, or built in memory from the store's tables), over the store of record.

    ``store`` is the open (read-only) Kùzu store, kept for the reads not held here and closed with this object.
    """

    def __init__(self, store: GraphStore, reads: GraphReads):
        self.store = store
        self.reads = reads
        a = reads.arrays
        self._entities = reads.entities
        self._chunks = reads.chunks
        self._documents = reads.documents
        self._entity_of = reads.entity_lookup
        self._chunk_of = reads.chunk_lookup
        self._entity_keys = reads.entity_lookup.column  # entity offset -> key (an Arrow array)
        self._chunk_ids = reads.chunk_lookup.column
        self._degree = a["degree"]
        self._chunk_rank = a["chunk_rank"]
        self._rel_a, self._rel_b = a["rel_a"], a["rel_b"]
        self._rel_props = reads.edges
        self._rel_weight = a["rel_weight"]
        self._adj_ptr, self._adj_other, self._adj_edge = a["adj_ptr"], a["adj_other"], a["adj_edge"]
        self._men_ptr, self._men_chunk = a["men_ptr"], a["men_chunk"]

    @classmethod
    def from_tables(cls, store: GraphStore, tables: Mapping[str, pa.Table]) -> "ResidentGraph":
        """Held in memory, built from ``store.scan_tables()`` (an index written before read structures)."""
        return cls(store, build_graph_reads(tables))

    def arrays(self) -> ResidentArrays:
        """Everything held, as shared read-only views (no copy but the key lists)."""
        return ResidentArrays(
            entity_keys=self._entity_keys.to_pylist(),
            entities=self._entities,
            chunk_ids=self._chunk_ids.to_pylist(),
            chunks=self._chunks,
            adj_ptr=self._adj_ptr,
            adj_other=self._adj_other,
            adj_edge=self._adj_edge,
            edges=self._rel_props,
            edge_source=self._rel_a,
            mention_ptr=self._men_ptr,
            mention_chunk=self._men_chunk,
        )

    def _entity_key(self, offset: int) -> str:
        return str(self._entity_keys[offset].as_py())

    def _keys_at(self, column: pa.Array, offsets: Iterable[int]) -> list[str]:
        offsets = list(offsets)
        if not offsets:
            return []
        return column.take(pa.array(offsets, type=pa.int64())).to_pylist()

    # -- reads held in memory ------------------------------------------------------------------------

    def get_entities(self, keys: Iterable[str]) -> list[EntityRow]:
        wanted = unique_in_order(keys)
        found = [i for i in self._entity_of.find(wanted) if i is not None]
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
        for i in self._entity_of.find(seeds):
            if i is None:
                spans.append((-1, self._adj_edge[:0], self._adj_other[:0]))
                continue
            lo, hi = self._adj_ptr[i], self._adj_ptr[i + 1]
            edges, others = self._adj_edge[lo:hi], self._adj_other[lo:hi]
            if limit_per_entity is not None and len(edges) > limit_per_entity:
                edges, others = self._best_edges(edges, others, limit_per_entity)
            spans.append((i, edges, others))
        edge_ids = np.concatenate([edges for _, edges, _ in spans])
        far = np.concatenate([others for _, _, others in spans]).astype(np.int64)
        rows = iter(self._rel_props.take(pa.array(edge_ids, type=pa.int64())).to_pylist() if len(edge_ids) else [])
        far_keys = iter(self._keys_at(self._entity_keys, far.tolist()))
        per_seed: list[list[dict[str, Any]]] = []
        for i, _, others in spans:
            mine = []
            for other in others.tolist():
                r = next(rows)
                r["other"] = next(far_keys)
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
        wanted = unique_in_order(canonical_pair(a, b) for a, b in pairs)
        offsets = self._entity_of.find([k for pair in wanted for k in pair])
        found: list[tuple[int, int, int]] = []
        for n, _ in enumerate(wanted):
            i, j = offsets[2 * n], offsets[2 * n + 1]
            if i is None or j is None:
                continue
            lo, hi = int(self._adj_ptr[i]), int(self._adj_ptr[i + 1])
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
            out.append(edge_row(self._entity_key(i), self._entity_key(j), r))
        return out

    def chunks_for_entities(self, keys: Iterable[str]) -> dict[str, list[str]]:
        wanted = unique_in_order(keys)
        out: dict[str, list[str]] = {}
        for key, i in zip(wanted, self._entity_of.find(wanted)):
            if i is None:
                out[key] = []
                continue
            mine = np.asarray(self._men_chunk[self._men_ptr[i] : self._men_ptr[i + 1]])
            out[key] = self._keys_at(self._chunk_ids, mine[np.argsort(self._chunk_rank[mine], kind="stable")].tolist())
        return out

    def get_chunks(self, ids: Iterable[str]) -> list[ChunkRow]:
        found = [i for i in self._chunk_of.find(unique_in_order(ids)) if i is not None]
        rows = self._chunks.take(pa.array(found, type=pa.int64())).to_pylist()
        doc_ids = unique_in_order(r["doc_id"] for r in rows)
        doc_rows = [i for i in self.reads.document_lookup.find(doc_ids) if i is not None]
        docs = {d["id"]: d for d in self._documents.take(pa.array(doc_rows, type=pa.int64())).to_pylist()}
        return [chunk_row(r, docs.get(r["doc_id"], {})) for r in rows]

    def entity_degree(self, keys: Iterable[str]) -> dict[str, int]:
        wanted = unique_in_order(keys)
        return {k: int(self._degree[i]) for k, i in zip(wanted, self._entity_of.find(wanted)) if i is not None}

    # -- the arrays a random walk needs (chunk ranking ``ppr``) -------------------------------------------

    def walk_matrix(self) -> WalkMatrix:
        return self.reads.walk

    def walk_edges(self) -> WalkEdges:
        a = self.reads.arrays
        return WalkEdges(
            n_entities=self._entities.num_rows,
            n_chunks=self._chunks.num_rows,
            related=(a["rel_a"], a["rel_b"]),
            mentions=(a["men_chunk"], a["men_entity"]),
            synonyms=(a["syn_a"], a["syn_b"], a["syn_score"]),
            titles=(a["title_chunk"], a["title_node"]),
            n_titles=self.reads.n_titles,
        )

    def entity_offsets(self, keys: Iterable[str]) -> list[int | None]:
        return self._entity_of.find(list(keys))

    def chunk_offsets(self, ids: Iterable[str]) -> list[int | None]:
        return self._chunk_of.find(list(ids))

    def entity_keys_at(self, offsets: Iterable[int]) -> list[str]:
        return self._keys_at(self._entity_keys, offsets)

    def chunk_ids_at(self, offsets: Iterable[int]) -> list[str]:
        return self._keys_at(self._chunk_ids, offsets)

    def synonym_count(self) -> int:
        return len(self.reads.arrays["syn_a"])

    def document_chunks(self) -> list[tuple[str, np.ndarray]]:
        """(document title, offsets of its chunks) per document that has chunks."""
        return document_chunks(self.reads)

    # -- everything else: the store of record ------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    def run_template(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self.store.run_template(name, params)

    def top_relation_keywords(self, limit: int) -> list[str]:
        # Written with the read structures (the Kùzu file stays closed); the store for structures from before.
        found = read_relation_keywords(self.reads.folder, limit) if self.reads.folder is not None else None
        return found if found is not None else self.store.top_relation_keywords(limit)

    def scan_tables(self, page_nodes: int | None = None) -> dict[str, pa.Table]:
        return self.store.scan_tables(page_nodes)

    def warm(self) -> None:
        """Nothing to load: what this object answers was loaded with it, and the Kùzu store's node columns would
        only hold memory for reads that never reach the store."""

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "ResidentGraph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LazyStore:
    """The store of record, opened on first use. A query process whose reads all come from the mapped structures
    never opens the Kùzu file: opening one costs ~75 MB of private memory per process (100k entities), which
    is most of what each extra Serve replica or evaluation actor would otherwise hold."""

    def __init__(self, opener: Callable[[], GraphStore]):
        self._opener = opener
        self._store: GraphStore | None = None
        self._lock = threading.Lock()

    def opened(self) -> GraphStore:
        with self._lock:
            if self._store is None:
                self._store = self._opener()
            return self._store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.opened(), name)

    def close(self) -> None:
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()


# The command an index without read structures is pointed to (one line, in the log and on the terminal).
REINDEX_READS_HINT = "hxd2 index reindex-reads --index {index}"


def open_resident(
    store: KuzuGraphStore | LazyStore,
    mode: str,
    max_mb: int,
    reads_dir: str | os.PathLike[str] | None = None,
    index: str = "",
) -> GraphStore:
    """``store`` read from arrays (a :class:`ResidentGraph` over it) unless ``mode`` is ``off``: the read
    structures in ``reads_dir``, memory-mapped, at any size; for an index without them (written before they
    existed), arrays built in memory from the store while its file is at most ``max_mb`` (``auto``) or always
    (``on``), and a warning naming the command that writes them. A :class:`LazyStore` stays unopened while the
    mapped structures answer."""
    if mode != "off" and reads_dir is not None and has_graph_reads(reads_dir):
        started = time.perf_counter()
        try:
            graph = ResidentGraph(cast(GraphStore, store), open_graph_reads(reads_dir))
        except BaseException:
            store.close()
            raise
        log.info("graph read structures mapped in %.3f s", time.perf_counter() - started)
        return graph
    if isinstance(store, LazyStore):
        store = cast("KuzuGraphStore", store.opened())
    if mode == "off":
        return store
    hint = REINDEX_READS_HINT.format(index=index or "<index>")
    size_mb = store.size_bytes / 2**20
    if mode == "auto" and size_mb > max_mb:
        log.warning(
            "this index has no graph read structures (written before they existed) and its %.0f MB graph is above "
            "retrieval.resident_graph_max_mb=%d: reading it through Kùzu, and ppr cannot rank; run %s",
            size_mb,
            max_mb,
            hint,
        )
        return store
    log.warning(
        "this index has no graph read structures (written before they existed): building them in memory in "
        "this process; run %s to write them once",
        hint,
    )
    started = time.perf_counter()
    try:
        try:
            graph = ResidentGraph.from_tables(store, store.scan_tables())
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
