"""Read structures: the graph as the query side reads it, written beside the Kùzu file at index time and
memory-mapped when an index opens.

A question touches 40-100 keys, and Kùzu answers a key at a time (~0.2 ms a statement), so the query side reads
the graph from flat arrays instead (:class:`~hxd2_ray.graph.resident.ResidentGraph`). Building those arrays from
the Kùzu file costs ~3.5x the file in memory and ~5 s per million entities, in every process. So the index job
builds them once, into the generation's ``reads/`` folder, in formats that map without parsing:

* the node and edge columns the pipeline returns (entities, chunks, documents, RELATED properties) as Arrow IPC
  files, one record batch each, opened with :func:`pyarrow.memory_map`;
* CSR adjacencies (entity--entity with edge ids, entity--chunk), edge ends, degrees, each chunk's rank in
  (document, order, id), the SYNONYM and title edges, and the walk matrix of the ``ppr`` ranking
  (:mod:`hxd2_ray.graph.walk_matrix`) as ``.npy`` files opened with ``np.load(mmap_mode="r")``;
* key -> row lookups for entities, chunks and documents without a Python dict: the keys' 64-bit BLAKE2b hashes,
  sorted, with the row of each (:class:`KeyLookup`, searched with ``searchsorted``, the key itself compared).

Opening maps the files and reads nothing else; every process on a node (Serve replicas, evaluation actors, the
CLI) shares the same pages through the OS page cache, and what a question touches is paged in on demand. The
files' sizes and checksums go into the manifest with the generation's other files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.graph.walk_matrix import WALK_ARRAYS, WalkMatrix, build_walk_matrix

__all__ = [
    "READS_DIR",
    "GraphReads",
    "KeyLookup",
    "NotDenseError",
    "build_graph_reads",
    "has_graph_reads",
    "open_graph_reads",
    "write_graph_reads",
]

READS_DIR = "reads"  # inside a generation's folder, beside graph.kuzu
READS_FORMAT = 1  # bumped when a file's meaning changes; an index with another one is read through Kùzu
_META = "reads.json"  # written last: a reads folder with it is complete
# The most frequent relation keywords (the planner's hints), so a query process need not open Kùzu for them; absent
# from read structures written before it (the store answers then).
RELATION_KEYWORDS_FILE = "relation_keywords.json"
RELATION_KEYWORDS_KEPT = 4096
_TABLES = ("entities", "chunks", "documents", "edges")
_ARRAYS = (
    "degree",  # entity offset -> degree
    "chunk_rank",  # chunk offset -> rank in (doc_id, ord, id) order
    "rel_a",  # RELATED edge id -> stored (smaller-key) end, and the other end
    "rel_b",
    "rel_weight",
    "adj_ptr",  # entity i's RELATED neighbours: adj_other[adj_ptr[i]:adj_ptr[i+1]] through edges adj_edge[...]
    "adj_other",
    "adj_edge",
    "men_ptr",  # entity i is mentioned by chunks men_chunk[men_ptr[i]:men_ptr[i+1]]
    "men_chunk",
    "men_entity",
    "syn_a",  # SYNONYM edges: entity offsets and cosine
    "syn_b",
    "syn_score",
    "title_chunk",  # chunk--title edges: chunk offset and title node
    "title_node",
)
_LOOKUPS = ("entity", "chunk", "document")
_EDGE_PROPS = ("description", "keywords", "weight", "source_chunk_ids", "mention_count")


class NotDenseError(ValueError):
    """A node table's offsets have gaps (never the case for a bulk-loaded index): rows cannot be found by offset."""


def key_hashes(keys: Iterable[str]) -> np.ndarray:
    """64-bit BLAKE2b of each key's UTF-8 bytes: the same in every process (Python's ``hash`` is not)."""
    return np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(k.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
            for k in keys
        ),
        dtype=np.uint64,
    )


class KeyLookup:
    """Key -> row of a string column without a Python dict: sorted key hashes and their rows, searched with
    ``searchsorted``; a hash hit is confirmed against the column itself, so a collision costs a comparison."""

    def __init__(self, hashes: np.ndarray, rows: np.ndarray, column: pa.Array):
        self.hashes = hashes  # uint64, ascending
        self.rows = rows  # int64: the row of each hash
        self.column = column  # the keys themselves, row by row

    @classmethod
    def build(cls, column: pa.Array) -> "KeyLookup":
        hashes = key_hashes(column.to_pylist())
        order = np.argsort(hashes, kind="stable")
        return cls(hashes[order], order.astype(np.int64), column)

    def __len__(self) -> int:
        return len(self.rows)

    def find(self, keys: Sequence[str]) -> list[int | None]:
        """The row of each key, None where it is absent."""
        if not keys or not len(self.hashes):
            return [None] * len(keys)
        wanted = key_hashes(keys)
        first = np.searchsorted(self.hashes, wanted, side="left")
        out: list[int | None] = []
        for key, h, at in zip(keys, wanted.tolist(), first.tolist()):
            row = None
            while at < len(self.hashes) and int(self.hashes[at]) == h:
                candidate = int(self.rows[at])
                if self.column[candidate].as_py() == key:
                    row = candidate
                    break
                at += 1
            out.append(row)
        return out

    def get(self, key: str) -> int | None:
        return self.find([key])[0]


@dataclass(frozen=True)
class GraphReads:
    """Everything the query side reads from the graph, in memory or memory-mapped. Read-only by contract."""

    entities: pa.Table  # entity offset -> key, name, type, description, source_chunk_ids, mention_count, ...
    chunks: pa.Table  # chunk offset -> id, doc_id, ord, start, text, header_path, language
    documents: pa.Table  # id, doc_title, doc_source_id, doc_source_path
    edges: pa.Table  # RELATED edge id -> description, keywords, weight, source_chunk_ids, mention_count
    arrays: Mapping[str, np.ndarray]  # the CSR adjacencies and per-node columns (_ARRAYS)
    walk: WalkMatrix
    n_titles: int
    entity_lookup: KeyLookup
    chunk_lookup: KeyLookup
    document_lookup: KeyLookup
    folder: Path | None = None  # where they were mapped from (None: built in memory)


# ------------------------------------------------------------------------------------------------ build


def _by_offset(table: pa.Table, what: str) -> pa.Table:
    """Rows in offset order, without the offset column; offsets of a bulk-loaded table are 0..n-1, so row i is
    node offset i."""
    if table.num_rows == 0:
        return table.drop_columns(["o"]) if "o" in table.column_names else table
    offsets = table["o"].to_numpy()
    order = np.argsort(offsets, kind="stable")
    if not np.array_equal(offsets[order], np.arange(len(offsets))):
        raise NotDenseError(f"{what} node offsets are not dense (0..n-1); the read structures cannot index them")
    if not np.array_equal(order, np.arange(len(order))):
        table = table.take(pa.array(order))
    return table.drop_columns(["o"])


def _large_strings(table: pa.Table) -> pa.Table:
    """String columns as large_string, so one record batch can hold past 2 GB of text (a big chunk table)."""
    fields = [
        pa.field(f.name, pa.large_string(), f.nullable) if pa.types.is_string(f.type) else f for f in table.schema
    ]
    return table.cast(pa.schema(fields)).combine_chunks()


def _ints(table: pa.Table | None, column: str) -> np.ndarray:
    if table is None or table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    return table[column].to_numpy().astype(np.int64)


def _csr(owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row positions grouped by ``owner`` (0..n-1): ``order[indptr[i]:indptr[i+1]]`` are owner i's rows."""
    order = np.argsort(owner, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=indptr[1:])
    return indptr, order


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


def build_graph_reads(tables: Mapping[str, pa.Table]) -> GraphReads:
    """The read structures of a graph from its tables (:meth:`KuzuGraphStore.scan_tables`: nodes with their offset
    ``o``, relationships with their ends' offsets). Each table is released once converted: at millions of
    entities the scan's tables are the largest thing in memory."""
    tables = dict(tables)
    entities = _large_strings(_by_offset(tables.pop("Entity"), "Entity"))
    chunks = _large_strings(_by_offset(tables.pop("Chunk"), "Chunk"))
    documents = _large_strings(_by_offset(tables.pop("Document"), "Document"))
    n_ent, n_chunk = entities.num_rows, chunks.num_rows
    arrays: dict[str, np.ndarray] = {"degree": _ints(entities, "degree")}
    # Each chunk's rank in (doc_id, ord, id) order, the order chunks_for_entities returns a key's chunks in
    # (Arrow sorts strings by UTF-8 bytes, which is Python's code-point order).
    rank = np.zeros(n_chunk, dtype=np.int64)
    if n_chunk:
        order = pc.sort_indices(
            chunks, sort_keys=[("doc_id", "ascending"), ("ord", "ascending"), ("id", "ascending")]
        ).to_numpy()
        rank[order] = np.arange(n_chunk)
    arrays["chunk_rank"] = rank

    rel = tables.pop("RELATED").combine_chunks()
    rel_a, rel_b = _ints(rel, "a"), _ints(rel, "b")
    edges = _large_strings(rel.select(list(_EDGE_PROPS))) if rel.num_rows else rel
    arrays.update(rel_a=rel_a, rel_b=rel_b, rel_weight=_floats(rel, "weight"))
    del rel
    # Undirected adjacency: each edge under both ends, a self-loop once (the ranking folds pairs anyway).
    # Within each entity's span the far ends are sorted, so a pair is a binary search, even at a hub.
    edge_ids = np.arange(len(rel_a), dtype=np.int64)
    loop = rel_a == rel_b
    ends = np.concatenate([rel_a, rel_b[~loop]])
    others = np.concatenate([rel_b, rel_a[~loop]])
    order = np.lexsort((others, ends))
    adj_ptr = np.zeros(n_ent + 1, dtype=np.int64)
    np.cumsum(np.bincount(ends, minlength=n_ent), out=adj_ptr[1:])
    arrays.update(adj_ptr=adj_ptr, adj_other=others[order], adj_edge=np.concatenate([edge_ids, edge_ids[~loop]])[order])

    men = tables.pop("MENTIONS")
    men_chunk, men_entity = _ints(men, "c"), _ints(men, "e")
    del men
    men_ptr, order = _csr(men_entity, n_ent)
    arrays.update(men_ptr=men_ptr, men_chunk=men_chunk[order], men_entity=men_entity[order])

    # SYNONYM edges (near entity names; an older graph has none). Only the walk of the ``ppr`` ranking reads them.
    syn = tables.get("SYNONYM")
    arrays.update(syn_a=_ints(syn, "a"), syn_b=_ints(syn, "b"), syn_score=_floats(syn, "score"))
    title_chunk, title_node, n_titles = _title_edges(tables.get("NAMES_TITLE"), chunks)
    arrays.update(title_chunk=title_chunk, title_node=title_node)
    walk = build_walk_matrix(
        n_ent,
        n_chunk,
        related=(rel_a, rel_b),
        mentions=(arrays["men_chunk"], arrays["men_entity"]),
        synonyms=(arrays["syn_a"], arrays["syn_b"], arrays["syn_score"]),
        titles=(title_chunk, title_node),
        n_titles=n_titles,
    )
    return GraphReads(
        entities=entities,
        chunks=chunks,
        documents=documents,
        edges=edges,
        arrays=arrays,
        walk=walk,
        n_titles=n_titles,
        entity_lookup=KeyLookup.build(_column(entities, "key")),
        chunk_lookup=KeyLookup.build(_column(chunks, "id")),
        document_lookup=KeyLookup.build(_column(documents, "id")),
    )


def _floats(table: pa.Table | None, column: str) -> np.ndarray:
    if table is None or table.num_rows == 0:
        return np.zeros(0, dtype=np.float64)
    return table[column].to_numpy().astype(np.float64)


def _column(table: pa.Table, name: str) -> pa.Array:
    """One column as a single Arrow array (the tables hold one chunk per column)."""
    if name not in table.column_names:
        return pa.array([], pa.large_string())
    column = table[name]
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


# ------------------------------------------------------------------------------------------------ files


def write_graph_reads(
    reads: GraphReads, folder: str | os.PathLike[str], also: Callable[[Path], None] | None = None
) -> Path:
    """Write ``reads`` into ``folder`` (replaced whole: written beside it, then renamed into place); ``also``
    writes more files derived from the same graph into the folder before the rename (the fuzzy name index)."""
    target = Path(folder)
    tmp = target.with_name(f".{target.name}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        for name in _TABLES:
            table: pa.Table = getattr(reads, name)
            with pa.OSFile(str(tmp / f"{name}.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
                # One record batch: a mapped column is then one contiguous array (a take costs what it returns).
                for batch in table.combine_chunks().to_batches(max_chunksize=max(table.num_rows, 1)):
                    out.write_batch(batch)
        for name in _ARRAYS:
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(reads.arrays[name]))
        for name, array in reads.walk.arrays().items():
            np.save(tmp / f"walk_{name}.npy", np.ascontiguousarray(array))
        for name in _LOOKUPS:
            lookup: KeyLookup = getattr(reads, f"{name}_lookup")
            np.save(tmp / f"{name}_hash.npy", lookup.hashes)
            np.save(tmp / f"{name}_hash_row.npy", lookup.rows)
        _write_relation_keywords(reads.edges, tmp / RELATION_KEYWORDS_FILE)
        if also is not None:
            also(tmp)
        meta = {"format": READS_FORMAT, "n_titles": reads.n_titles, "walk": reads.walk.counts()}
        (tmp / _META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        # Renames only between the old folder and the new one: a reader opening meanwhile finds one or the other
        # (a process that mapped the old files keeps them: their pages outlive the unlink).
        old = target.with_name(f".{target.name}-old-{uuid.uuid4().hex[:8]}")
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _write_relation_keywords(edges: pa.Table, path: Path) -> None:
    """The RELATED keywords by count, most frequent first, ties by keyword (as ``top_relation_keywords`` orders
    them in the store), the first :data:`RELATION_KEYWORDS_KEPT`, and how many distinct ones there are."""
    ranked: list[str] = []
    distinct = 0
    if edges.num_rows and "keywords" in edges.column_names:
        counts = pc.value_counts(pc.list_flatten(edges["keywords"]))
        if len(counts):
            table = pa.table({"k": counts.field("values"), "n": counts.field("counts")})
            order = pc.sort_indices(table, sort_keys=[("n", "descending"), ("k", "ascending")])
            distinct = table.num_rows
            ranked = table["k"].take(order[:RELATION_KEYWORDS_KEPT]).to_pylist()
    path.write_text(json.dumps({"distinct": distinct, "ranked": ranked}, ensure_ascii=False), encoding="utf-8")


def read_relation_keywords(folder: str | os.PathLike[str], limit: int) -> list[str] | None:
    """The ``limit`` most frequent relation keywords from read structures (None when they hold too few, or were
    written before the file was): what the store's ``top_relation_keywords`` answers."""
    path = Path(folder) / RELATION_KEYWORDS_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    ranked = data["ranked"]
    if limit > len(ranked) and int(data["distinct"]) > len(ranked):
        return None
    return [str(k) for k in ranked[: max(0, int(limit))] if k]


def has_graph_reads(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds complete read structures of the format this code reads."""
    meta = Path(folder) / _META
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text(encoding="utf-8")).get("format") == READS_FORMAT
    except (OSError, ValueError):
        return False


def _mapped_table(path: Path) -> pa.Table:
    # Zero-copy: the columns point into the mapping, which their buffers keep alive.
    return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()


def _mapped_array(path: Path) -> np.ndarray:
    try:
        # A plain ndarray view of the mapping: np.memmap's own __getitem__ costs ~15 us a call in Python.
        return np.load(path, mmap_mode="r").view(np.ndarray)
    except ValueError:  # numpy cannot map an array of no elements
        return np.load(path)


def open_graph_reads(folder: str | os.PathLike[str]) -> GraphReads:
    """The read structures in ``folder``, memory-mapped (nothing is read up front)."""
    root = Path(folder)
    meta = json.loads((root / _META).read_text(encoding="utf-8"))

    def mapped(name: str) -> np.ndarray:
        return _mapped_array(root / f"{name}.npy")

    tables = {name: _mapped_table(root / f"{name}.arrow") for name in _TABLES}
    counts = meta["walk"]
    walk = WalkMatrix(
        n_entities=int(counts["n_entities"]),
        n_chunks=int(counts["n_chunks"]),
        n_titles=int(counts["n_titles"]),
        synonym_edges=int(counts["synonym_edges"]),
        title_edges=int(counts["title_edges"]),
        **{name: mapped(f"walk_{name}") for name in WALK_ARRAYS},
    )
    lookups = {
        name: KeyLookup(mapped(f"{name}_hash"), mapped(f"{name}_hash_row"), _column(tables[table], column))
        for name, table, column in (
            ("entity", "entities", "key"),
            ("chunk", "chunks", "id"),
            ("document", "documents", "id"),
        )
    }
    return GraphReads(
        **tables,
        arrays={name: mapped(name) for name in _ARRAYS},
        walk=walk,
        n_titles=int(meta["n_titles"]),
        entity_lookup=lookups["entity"],
        chunk_lookup=lookups["chunk"],
        document_lookup=lookups["document"],
        folder=root,
    )


def document_chunks(reads: GraphReads) -> list[tuple[str, np.ndarray]]:
    """(document title, offsets of its chunks) per document that has chunks."""
    if not reads.chunks.num_rows:
        return []
    by_doc: dict[str, list[int]] = {}
    for i, d in enumerate(reads.chunks.column("doc_id").to_pylist()):
        by_doc.setdefault(d, []).append(i)
    titles = dict(zip(reads.documents.column("id").to_pylist(), reads.documents.column("doc_title").to_pylist()))
    return [(titles.get(d) or "", np.asarray(rows, dtype=np.int64)) for d, rows in by_doc.items()]


def write_graph_reads_from(
    store: object, folder: str | os.PathLike[str], also: Callable[[GraphReads, Path], None] | None = None
) -> GraphReads:
    """Build the read structures of an open store's graph (its ``scan_tables()``) and write them to ``folder``:
    the index job's step after the graph is loaded. ``also(reads, folder)`` adds files derived from them.
    Returns what was written (in memory)."""
    # A page of a million nodes at a time: the engine holds one page's result (hxd2_ray.graph.kuzu_store).
    reads = build_graph_reads(store.scan_tables(page_nodes=1_000_000))  # type: ignore[attr-defined]
    write_graph_reads(reads, folder, None if also is None else (lambda tmp: also(reads, tmp)))
    return reads
