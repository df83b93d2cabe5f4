"""The corpus an index is built from, as tables, and how adding, updating and deleting documents changes it.

A document's identity is its ``source_id`` (the record's id field, else the file path, ``path#line N`` for a
record of a ``.jsonl`` without ids); its ``doc_id`` is the hash of its text. ``sources`` keeps every document
read, duplicates included; the ``documents`` table keeps one per text (the first in path order), and chunks
belong to a text. The same functions build these tables for a build from scratch and for a change, so a change
yields exactly the tables a build of the final corpus would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.errors import HxdError
from hxd2_ray.index_store import tables


@dataclass(frozen=True)
class ParsedCorpus:
    """What ingest made of some input files: their documents (``SOURCES``), quarantined files and chunks."""

    sources: pa.Table
    quarantine: pa.Table
    chunks: pa.Table  # CHUNKS, one row per chunk id
    paths: tuple[str, ...] = ()  # every file read (documents or quarantine), in the input's form


@dataclass(frozen=True)
class CorpusChange:
    """The corpus after a change, and what changed."""

    sources: pa.Table
    documents: pa.Table
    quarantine: pa.Table
    chunks: pa.Table
    added: tuple[str, ...] = ()  # source ids
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    unchanged: int = 0
    chunks_added: frozenset[str] = field(default_factory=frozenset)
    chunks_removed: frozenset[str] = field(default_factory=frozenset)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.deleted)

    def describe(self) -> dict[str, object]:
        return {
            "added": len(self.added),
            "updated": len(self.updated),
            "deleted": len(self.deleted),
            "unchanged": self.unchanged,
            "chunks_added": len(self.chunks_added),
            "chunks_removed": len(self.chunks_removed),
            "document_ids": {
                "added": list(self.added[:20]),
                "updated": list(self.updated[:20]),
                "deleted": list(self.deleted[:20]),
            },
        }


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    if table.num_rows == 0:
        return schema.empty_table()
    return table.select(schema.names).cast(schema)


def corpus_from_parsed(parsed: pa.Table, n_shards: int, paths: Sequence[str] = ()) -> ParsedCorpus:
    """Sources, quarantine rows and chunks from ingest's parsed rows (``stages.columns.PARSED``, any order).

    Rows are ordered by path (stably: a file's records keep their order), which is what ``position`` records."""
    parsed = parsed.sort_by([("source_path", "ascending")])
    is_doc = pc.equal(parsed.column("kind"), "document")
    quarantine = _conform(parsed.filter(pc.invert(is_doc)).select(tables.QUARANTINE.names), tables.QUARANTINE)
    doc_rows = parsed.filter(is_doc)
    positions: list[int] = []
    seen_in_path: dict[str, int] = {}
    for path in doc_rows.column("source_path").to_pylist():
        positions.append(seen_in_path.get(path, 0))
        seen_in_path[path] = positions[-1] + 1
    sources = pa.table(
        {
            "source_id": doc_rows.column("source_id"),
            "source_path": doc_rows.column("source_path"),
            "position": pa.array(positions, pa.int64()),
            "doc_id": doc_rows.column("doc_id"),
            "title": doc_rows.column("title"),
            "n_chars": doc_rows.column("n_chars"),
        },
        schema=tables.SOURCES,
    )
    flat = pc.list_flatten(doc_rows.column("chunks"))
    if len(flat):
        chunk_struct = flat.combine_chunks() if isinstance(flat, pa.ChunkedArray) else flat
        chunks = pa.Table.from_struct_array(chunk_struct)
        _, first = _unique_first(chunks.column("id").to_pylist())
        chunks = chunks.take(pa.array(first, pa.int64()))
    else:
        chunks = tables.CHUNKS.empty_table().drop_columns(["shard"])
    shard = [int(cid[:8], 16) % n_shards for cid in chunks.column("id").to_pylist()]
    chunks = _conform(chunks.append_column("shard", pa.array(shard, pa.int64())), tables.CHUNKS)
    return ParsedCorpus(sources=sources, quarantine=quarantine, chunks=chunks, paths=tuple(paths))


def derive_documents(sources: pa.Table) -> pa.Table:
    """One document per text: the first source in (path, position) order gives its metadata."""
    ordered = sources.sort_by([("source_path", "ascending"), ("position", "ascending")])
    _, first = _unique_first(ordered.column("doc_id").to_pylist())
    kept = ordered.take(pa.array(first, pa.int64()))
    return pa.table(
        {
            "id": kept.column("doc_id"),
            "source_id": kept.column("source_id"),
            "source_path": kept.column("source_path"),
            "title": kept.column("title"),
            "n_chars": kept.column("n_chars"),
        },
        schema=tables.DOCUMENTS,
    )


def sources_from_documents(documents: pa.Table) -> pa.Table:
    """Sources for a corpus staged before sources were recorded: one per document (duplicates were not kept)."""
    return pa.table(
        {
            "source_id": documents.column("source_id"),
            "source_path": documents.column("source_path"),
            "position": pa.array(range(documents.num_rows), pa.int64()),
            "doc_id": documents.column("id"),
            "title": documents.column("title"),
            "n_chars": documents.column("n_chars"),
        },
        schema=tables.SOURCES,
    )


def chunks_in_document_order(documents: pa.Table, chunk_tables: Iterable[pa.Table]) -> pa.Table:
    """The chunks of ``documents``, drawn from any of ``chunk_tables``: documents in table order, each one's
    chunks by ``order`` — the order a build from scratch writes them in."""
    wanted = documents.column("id").to_pylist()
    rank = {doc_id: i for i, doc_id in enumerate(wanted)}
    parts = [t for t in chunk_tables if t.num_rows]
    if not parts or not rank:
        return tables.CHUNKS.empty_table()
    merged = pa.concat_tables([_conform(t, tables.CHUNKS) for t in parts])
    merged = merged.filter(pc.is_in(merged.column("doc_id"), value_set=pa.array(wanted, pa.string())))
    _, first = _unique_first(merged.column("id").to_pylist())
    merged = merged.take(pa.array(first, pa.int64()))
    doc_rank = pa.array([rank[d] for d in merged.column("doc_id").to_pylist()], pa.int64())
    merged = merged.append_column("_rank", doc_rank).sort_by([("_rank", "ascending"), ("order", "ascending")])
    return merged.drop_columns(["_rank"])


def _unique_first(values: list[str]) -> tuple[list[str], list[int]]:
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        seen.setdefault(v, i)
    return list(seen), sorted(seen.values())


def _doc_ids_by_source(sources: pa.Table) -> dict[str, list[tuple[str, str, str]]]:
    out: dict[str, list[tuple[str, str, str]]] = {}
    for sid, path, doc, title in zip(
        sources.column("source_id").to_pylist(),
        sources.column("source_path").to_pylist(),
        sources.column("doc_id").to_pylist(),
        sources.column("title").to_pylist(),
        strict=True,
    ):
        out.setdefault(sid, []).append((path, doc, title))
    return {k: sorted(v) for k, v in out.items()}


def _finish(
    old_chunks: pa.Table,
    sources: pa.Table,
    quarantine: pa.Table,
    extra_chunks: pa.Table | None,
    added: list[str],
    updated: list[str],
    deleted: list[str],
    unchanged: int,
) -> CorpusChange:
    documents = derive_documents(sources)
    chunks = chunks_in_document_order(documents, [old_chunks] + ([extra_chunks] if extra_chunks is not None else []))
    before = set(old_chunks.column("id").to_pylist())
    after = set(chunks.column("id").to_pylist())
    return CorpusChange(
        sources=sources,
        documents=documents,
        quarantine=quarantine,
        chunks=chunks,
        added=tuple(sorted(added)),
        updated=tuple(sorted(updated)),
        deleted=tuple(sorted(deleted)),
        unchanged=unchanged,
        chunks_added=frozenset(after - before),
        chunks_removed=frozenset(before - after),
    )


def upsert(sources: pa.Table, quarantine: pa.Table, chunks: pa.Table, incoming: ParsedCorpus) -> CorpusChange:
    """Add the incoming documents and update those whose ``source_id`` is known (every earlier document with that
    id is replaced). Files read again replace their earlier quarantine rows; nothing else is removed."""
    incoming_ids = set(incoming.sources.column("source_id").to_pylist())
    old = _doc_ids_by_source(sources)
    new = _doc_ids_by_source(incoming.sources)
    added = [sid for sid in new if sid not in old]
    updated = [sid for sid in new if sid in old and new[sid] != old[sid]]
    unchanged = len(new) - len(added) - len(updated)
    keep = pc.invert(pc.is_in(sources.column("source_id"), value_set=pa.array(sorted(incoming_ids), pa.string())))
    merged_sources = pa.concat_tables([sources.filter(keep), _conform(incoming.sources, tables.SOURCES)])
    reread = (
        set(incoming.paths)
        | set(incoming.sources.column("source_path").to_pylist())
        | set(incoming.quarantine.column("source_path").to_pylist())
    )
    kept_q = quarantine.filter(
        pc.invert(pc.is_in(quarantine.column("source_path"), value_set=pa.array(sorted(reread), pa.string())))
    )
    merged_q = pa.concat_tables([kept_q, _conform(incoming.quarantine, tables.QUARANTINE)]).sort_by(
        [("source_path", "ascending")]
    )
    return _finish(chunks, merged_sources, merged_q, incoming.chunks, added, updated, [], unchanged)


def missing_from(sources: pa.Table, listed: set[str]) -> list[str]:
    """The source paths of the index's documents that the input listing ``listed`` no longer holds."""
    return sorted({path for path in sources.column("source_path").to_pylist() if path not in listed})


def sync(
    sources: pa.Table, quarantine: pa.Table, chunks: pa.Table, incoming: ParsedCorpus, listed: set[str]
) -> CorpusChange:
    """The corpus made exactly the input: the incoming documents added or updated (as :func:`upsert`), and the
    documents and quarantine rows of every path the input listing ``listed`` no longer holds removed, in one
    change."""
    up = upsert(sources, quarantine, chunks, incoming)
    gone = missing_from(up.sources, listed)
    stale_q = [p for p in up.quarantine.column("source_path").to_pylist() if p not in listed]
    if not gone and not stale_q:
        return up
    down = delete(up.sources, up.quarantine, up.chunks, [], gone) if gone else up
    kept_q = down.quarantine.filter(
        pa.array([p in listed for p in down.quarantine.column("source_path").to_pylist()], pa.bool_())
    )
    deleted = list(down.deleted)
    return _finish(
        chunks,
        down.sources,
        kept_q,
        incoming.chunks,
        list(up.added),
        list(up.updated),
        deleted,
        up.unchanged - len(deleted),
    )


class NothingToDeleteError(HxdError):
    """A delete named documents the index does not hold (a typo, or a delete already done: the caller tells)."""

    def __init__(self, message: str, *, unknown_ids: Sequence[str], missing_sources: Sequence[str]):
        super().__init__(message)
        self.unknown_ids = tuple(unknown_ids)
        self.missing_sources = tuple(missing_sources)


def matching_sources(
    sources: pa.Table, doc_ids: Sequence[str], source_paths: Sequence[str], quarantined: Sequence[str] = ()
) -> set[str]:
    """Source ids named by ``doc_ids`` or read from one of ``source_paths`` (a file, or a folder: every file
    under it; a path that only ``quarantined`` files match is a match with no document). Raises
    :class:`HxdError` naming what matched nothing, so a typo deletes nothing."""
    ids = sources.column("source_id").to_pylist()
    paths = sources.column("source_path").to_pylist()
    known = set(ids)
    unknown = [d for d in doc_ids if d not in known]
    matched = {d for d in doc_ids if d in known}
    missing_paths = []
    for p in source_paths:
        folder = p.rstrip("/") + "/"
        hits = {sid for sid, sp in zip(ids, paths, strict=True) if sp == p or sp.startswith(folder)}
        if not hits and not any(q == p or q.startswith(folder) for q in quarantined):
            missing_paths.append(p)
        matched |= hits
    if unknown or missing_paths:
        what = [f"document id {d!r}" for d in unknown[:5]] + [f"source {p!r}" for p in missing_paths[:5]]
        more = len(unknown) + len(missing_paths) - len(what)
        raise NothingToDeleteError(
            f"nothing was deleted: no document matches {', '.join(what)}"
            + (f" (and {more} more)" if more > 0 else "")
            + "; document ids are the records' id field or the file path (see the index's "
            "sources)",
            unknown_ids=unknown,
            missing_sources=missing_paths,
        )
    return matched


def delete(
    sources: pa.Table, quarantine: pa.Table, chunks: pa.Table, doc_ids: Sequence[str], source_paths: Sequence[str]
) -> CorpusChange:
    """Remove the documents named by id or read from ``source_paths`` (and those paths' quarantine rows)."""
    doomed = matching_sources(sources, doc_ids, source_paths, quarantine.column("source_path").to_pylist())
    keep = pc.invert(pc.is_in(sources.column("source_id"), value_set=pa.array(sorted(doomed), pa.string())))
    folders = tuple(p.rstrip("/") + "/" for p in source_paths)
    q_paths = quarantine.column("source_path").to_pylist()
    q_keep = [not (sp in source_paths or sp.startswith(folders)) for sp in q_paths]
    kept_q = quarantine.filter(pa.array(q_keep, pa.bool_())) if q_paths else quarantine
    remaining = sources.filter(keep)
    return _finish(
        chunks, remaining, kept_q, None, [], [], sorted(doomed), len(set(remaining.column("source_id").to_pylist()))
    )
