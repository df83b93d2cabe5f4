"""The graph store of record: one bulk writer and a parameterised reader, on Kùzu or on LadybugDB (its fork).

The engine is a parameter (:class:`~hxd2_ray.graph.engine.GraphEngine`, ``graph.backend``; Kùzu by default):
both speak the same DDL and Cypher, so everything engine-specific stays here and in its siblings (the tables' DDL
in :mod:`~hxd2_ray.graph.kuzu_schema`, the Cypher in :mod:`~hxd2_ray.graph.kuzu_queries`, the Arrow tables a COPY
loads in :mod:`~hxd2_ray.graph.kuzu_tables`), and only :mod:`~hxd2_ray.graph.engine` imports a package. Switching
an index to the other engine is a rebuild (the files are not interchangeable). Rules they keep:

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

import os
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from hxd2_ray.errors import IndexMismatchError, IndexNotFoundError
from hxd2_ray.graph.base import (
    COUNT_NAMES,
    GRAPH_SCHEMA_VERSION,
    ChunkRow,
    EdgeRow,
    EntityRow,
    canonical_pair,
    chunk_row,
    edge_row,
    entity_row,
    rank_neighbors,
    unique_in_order,
)
from hxd2_ray.graph.engine import DEFAULT_GRAPH_BACKEND, GraphEngine, graph_engine
from hxd2_ray.graph.kuzu_queries import (
    PAGE_NODE_TABLE,
    Q_CHECKPOINT,
    Q_CHUNK,
    Q_CHUNK_COLUMNS,
    Q_CHUNK_OFFSETS_OF_ENTITY,
    Q_CHUNKS_OF_ENTITY,
    Q_COPY,
    Q_COUNTS,
    Q_DEGREE,
    Q_DOCUMENT,
    Q_DOCUMENT_COLUMNS,
    Q_ENTITY,
    Q_ENTITY_BY_NAME,
    Q_ENTITY_COLUMNS,
    Q_LF_EDGES_BETWEEN_PAIR,
    Q_LF_EDGES_OF,
    Q_LF_ENTITY_NAMES,
    Q_LF_NAME_OF,
    Q_LF_PATHS_2HOP_OF,
    Q_LF_PATHS_BETWEEN_PAIR,
    Q_MAX_OFFSET,
    Q_NEIGHBOR_OFFSETS_OF,
    Q_NEIGHBORS_OF,
    Q_PAGE,
    Q_RELATION,
    Q_RELATION_KEYWORDS,
    Q_SCAN,
    Q_SCAN_PAGE,
    Q_SHOW_TABLES,
    SCAN_PAGE_NODE_TABLE,
    check_params,
)
from hxd2_ray.graph.kuzu_schema import (
    DDL,
    GRAPH_TABLES,
    LOAD_ORDER,
    OPTIONAL_TABLES,
)
from hxd2_ray.graph.kuzu_tables import (
    prepare_tables,
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
    "bulk_load_pool_bytes",
    "check_params",
    "load_graph",
    "prepare_tables",
]


def _one_result(result: Any) -> Any:
    """``Connection.execute`` gives a list only for text holding several statements; every template is one."""
    if isinstance(result, list):
        raise TypeError(f"expected one statement's result, got {len(result)}: the query text holds several")
    return result


def _engine(engine: GraphEngine | str | None) -> GraphEngine:
    """``engine`` as given, or the one a ``graph.backend`` name (None: the default, Kùzu) selects."""
    if isinstance(engine, GraphEngine):
        return engine
    return graph_engine(engine or DEFAULT_GRAPH_BACKEND)


# The bulk load's buffer pool when none is configured (graph.build_buffer_pool_mb: None): Kùzu 0.11.3's COPY of a
# synthetic graph (bench/graph_scale.py's shape) stopped with "the buffer pool is full" below 1.0-1.7x the Arrow
# bytes of its tables (300k entities: 134 MB of tables, 128 MB failed, 256 MB loaded; 1M: 447 MB, 512 MB failed,
# 768 MB loaded), so twice them, at least 1 GiB, at most half the machine's memory.
BULK_LOAD_POOL_PER_ARROW_BYTE = 2
BULK_LOAD_POOL_FLOOR = 1 << 30


def bulk_load_pool_bytes(table_bytes: int, configured_mb: int | None = None) -> int:
    """The buffer pool of a bulk load of tables of ``table_bytes`` (Arrow): ``configured_mb`` MB when given, else
    ``BULK_LOAD_POOL_PER_ARROW_BYTE`` times the tables, at least ``BULK_LOAD_POOL_FLOOR`` and at most half the
    machine's physical memory (Kùzu's own default, 80% of it whatever the graph, sits beside the tables being
    loaded and the processes of the job)."""
    if configured_mb is not None:
        return int(configured_mb) << 20
    want = max(BULK_LOAD_POOL_FLOOR, BULK_LOAD_POOL_PER_ARROW_BYTE * int(table_bytes))
    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows) or no such name: no ceiling known
        machine = 0
    pool = min(want, machine // 2) if machine > 0 else want
    return -(-pool >> 20) << 20  # whole MB


class KuzuGraphWriter:
    """Single-use bulk loader: open read-write, :meth:`bulk_load` once (which closes the database).

    A failed load leaves a partial database behind; the job builds into a fresh temporary path and only
    renames it into place after ``close()``, so a half graph is never published.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_threads: int = 0,
        buffer_pool_bytes: int = 0,
        engine: GraphEngine | str | None = None,
    ):
        """``engine``: a :class:`GraphEngine` or a ``graph.backend`` name (None: Kùzu)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.engine = _engine(engine)
        self._db: Any = self.engine.database(
            self.path, read_only=False, max_threads=max_threads, buffer_pool_bytes=buffer_pool_bytes
        )
        self._conn: Any = self.engine.connection(self._db)
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
    engine: GraphEngine | str | None = None,
    buffer_pool_bytes: int = 0,
) -> dict[str, int]:
    """Open a writer on a fresh ``path`` (with ``engine``, None: Kùzu; a buffer pool of ``buffer_pool_bytes``, 0: the
    engine's default), load, close. Returns the loaded counts."""
    with KuzuGraphWriter(path, max_threads=max_threads, buffer_pool_bytes=buffer_pool_bytes, engine=engine) as writer:
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
    """Read side (:class:`hxd2_ray.graph.base.GraphStore`). Thread-safe: one engine connection per thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        read_only: bool = True,
        *,
        max_threads: int = 0,
        buffer_pool_bytes: int = 0,
        node_columns: bool | None = None,
        engine: GraphEngine | str | None = None,
    ):
        """``node_columns``: resolve far nodes of neighbour and mention reads through offset-indexed columns
        (:class:`_NodeColumns`, loaded on first use or by :meth:`warm`). Default: on for a read-only store
        (the offsets cannot change under it), off otherwise; off reads everything per key (same rows).
        ``engine``: a :class:`GraphEngine` or a ``graph.backend`` name (None: Kùzu), the one that wrote the file."""
        self.path = Path(path)
        if not self.path.exists():
            raise IndexNotFoundError(f"no graph database at {self.path}: the index is missing or was never completed")
        self.engine = _engine(engine)
        self._db: Any = self.engine.database(
            self.path, read_only=read_only, max_threads=max_threads, buffer_pool_bytes=buffer_pool_bytes
        )
        self._open_args = (read_only, max_threads)
        self.buffer_pool_bytes = buffer_pool_bytes  # 0: the engine's default (a share of the machine's memory)
        self._local = threading.local()
        self._conns: list[Any] = []
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

    def _conn(self) -> Any:
        if self._db is None:
            raise RuntimeError("KuzuGraphStore is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.engine.connection(self._db)
            self._local.conn = conn
            self._local.prepared = {}
            with self._lock:
                self._conns.append(conn)
        return conn

    def _prepared(self, query: str) -> tuple[Any, Any]:
        """This thread's connection and its prepared statement for ``query`` (a template constant).

        Repeated per-key lookups are ~3-4x cheaper prepared once and executed with new bindings than
        re-planned on every ``execute(text, params)``. ``Connection.prepare`` is deprecated in Kùzu 0.11.3
        (frozen) and in LadybugDB 0.22 (where it still works); the warning is silenced here, once per template
        and thread.
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
    def scan_tables(self, page_nodes: int | None = None) -> dict[str, pa.Table]:
        """Every table of the graph as Arrow (:data:`Q_SCAN`'s columns; nodes carry their offset ``o``,
        relationships their endpoints' offsets), for a resident copy of a read-only index. ``page_nodes``: read
        each table a page of that many (FROM) nodes at a time (:data:`Q_SCAN_PAGE`), so the engine holds one page's
        result, not the table's (the index job's read structures at millions of entities); None: one query each."""
        out = {}
        present = {row["name"] for row in self._rows(Q_SHOW_TABLES, {})}
        for name, query in Q_SCAN.items():
            if name in OPTIONAL_TABLES and name not in present:
                continue
            pages = (
                []
                if page_nodes is None
                else list(self._pages(Q_SCAN_PAGE[name], SCAN_PAGE_NODE_TABLE[name], page_nodes))
            )
            # One query, also for an empty table (its columns, no rows).
            out[name] = pa.concat_tables(pages) if pages else self._arrow(query, {}, 1_000_000)
        return out

    def _arrow(self, query: str, params: Mapping[str, Any], chunk_size: int) -> pa.Table:
        check_params(query, params)
        conn, stmt = self._prepared(query)
        res = _one_result(conn.execute(stmt, dict(params)))
        try:
            return res.get_as_arrow(chunk_size=chunk_size)
        finally:
            res.close()

    def _pages(self, query: str, node_table: str, page_nodes: int) -> Iterator[pa.Table]:
        """The non-empty results of ``query`` over consecutive ranges of ``page_nodes`` offsets of ``node_table``."""
        top = self._rows(Q_MAX_OFFSET[node_table], {})[0]["m"]
        step = max(1, int(page_nodes))
        for lo in range(0, -1 if top is None else int(top) + 1, step):
            page = self._arrow(query, {"lo": lo, "hi": lo + step}, max(step, 1024))
            if page.num_rows:
                yield page

    def iter_pages(self, table: str, page_nodes: int = 50_000) -> Iterator[pa.Table]:
        """Every row of ``table`` (a key of :data:`Q_PAGE`) as Arrow pages: the rows of ``page_nodes`` consecutive
        nodes at a time (for a relationship table, of its FROM nodes), so memory stays bounded by the page."""
        if table not in Q_PAGE:
            raise ValueError(f"unknown page table {table!r}; valid: {', '.join(Q_PAGE)}")
        return self._pages(Q_PAGE[table], PAGE_NODE_TABLE[table], page_nodes)

    def reopen(self, buffer_pool_bytes: int) -> None:
        """Close and reopen the database (a buffer pool of ``buffer_pool_bytes``, 0: the default), which drops
        the pages the pool holds, e.g. after a whole-graph scan. Call it before other threads use the store:
        their connections are closed with the old database."""
        read_only, max_threads = self._open_args
        self.close()
        self._local = threading.local()
        self._db = self.engine.database(
            self.path, read_only=read_only, max_threads=max_threads, buffer_pool_bytes=buffer_pool_bytes
        )
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
        return [chunk_row(r, docs.get(r["doc_id"], {})) for r in chunks]

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
