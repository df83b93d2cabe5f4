"""Generations of an index: every build or change publishes a whole new generation, then switches to it.

Layout of an index written by the index job::

    <root>/manifest.json                   names the current generation; written last, in one atomic write
    <root>/generations/<id>/graph.kuzu     the Kùzu graph
    <root>/generations/<id>/vectors/       the Faiss families
    <root>/generations/<id>/lexical/       BM25 over the generation's chunks (hxd2_ray.retrieval.lexical)
    <root>/generations/<id>/tables/        the corpus the next change starts from (sources, documents, chunks,
                                           quarantine, entities, relations, merged_chunks)
    <root>/index_summary.json              the last run's summary
    <root>/_staging/                       work shared by every generation, addressed by content (extractions per
                                           chunk, vectors per text) and a build's stage outputs
    <root>/_llm_cache/                     the LLM response cache (hxd2_ray.llm.cache)

A change never writes into the current generation: a reader that opened it keeps reading the same files until
it reopens (then it sees the manifest's new generation). ``generations.keep`` generations stay on disk; older
ones are removed after the switch. Manifests of format 1 (and ``hxd2 index-kb``) have ``generation == ""``:
their files sit at the root, and the first change moves the index to this layout.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.corpus import derive_documents, sources_from_documents
from hxd2_ray.index_store.leases import held_generations
from hxd2_ray.index_store.manifest import GENERATIONS_DIR, IndexManifest, generation_dir, utc_now_iso

TABLES_DIR = "tables"
QUERY_FILES = ("graph.kuzu", "reads", "vectors", "lexical")  # what a reader opens, relative to a generation's folder
HISTORY_LIMIT = 200

STATE_SCHEMAS: Mapping[str, pa.Schema] = {
    "sources": tables.SOURCES,
    "documents": tables.DOCUMENTS,
    "chunks": tables.CHUNKS,
    "quarantine": tables.QUARANTINE,
    "entities": tables.ENTITIES,
    "relations": tables.RELATIONS,
    "merged_chunks": tables.MERGED_CHUNKS,
}


def generation_id(number: int) -> str:
    return f"g{number:06d}"


def next_generation_id(current: IndexManifest | None) -> str:
    if current is None or not current.generation:
        return generation_id(1)
    return generation_id(int(current.generation.lstrip("g")) + 1)


def query_root(root: str, manifest: IndexManifest) -> str:
    """The folder holding the graph and the vectors of the manifest's current generation."""
    sub = generation_dir(manifest.generation)
    return posixpath.join(root, sub) if sub else root


def history(current: IndexManifest | None, new_id: str, kind: str, change: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The manifest's generation history with the new generation appended (oldest dropped past a limit)."""
    past = list(current.generations) if current is not None else []
    if current is not None and not past:
        past = [
            {
                "id": current.generation,
                "parent": current.parent_generation,
                "created_at": current.created_at,
                "kind": "build",
                "change": {},
            }
        ]
    entry = {
        "id": new_id,
        "parent": current.generation if current is not None else "",
        "created_at": utc_now_iso(),
        "kind": kind,
        "change": dict(change),
    }
    return (past + [entry])[-HISTORY_LIMIT:]


# --------------------------------------------------------------------------------------------- corpus state


@dataclass(frozen=True)
class CorpusState:
    """The tables a generation was built from: what the next change starts from."""

    sources: pa.Table
    documents: pa.Table
    chunks: pa.Table
    quarantine: pa.Table
    entities: pa.Table
    relations: pa.Table
    merged_chunks: pa.Table

    def table(self, name: str) -> pa.Table:
        value: pa.Table = getattr(self, name)
        return value

    def merged_chunk_ids(self) -> set[str]:
        return set(self.merged_chunks.column("chunk_id").to_pylist())


def write_state(folder: str, state: CorpusState) -> None:
    """Write the state's tables under ``<folder>/tables/`` (a local build folder, published with the graph)."""
    target = os.path.join(folder, TABLES_DIR)
    os.makedirs(target, exist_ok=True)
    for name, schema in STATE_SCHEMAS.items():
        table = state.table(name)
        pq.write_table(
            table.select(schema.names).cast(schema) if table.num_rows else schema.empty_table(),
            os.path.join(target, f"{name}.parquet"),
        )


def read_state(fs: pafs.FileSystem, root: str, manifest: IndexManifest) -> CorpusState:
    """The current generation's corpus state; for a flat-layout index, what its build staged."""
    if manifest.generation:
        folder = posixpath.join(root, generation_dir(manifest.generation), TABLES_DIR)
        read = {}
        for name, schema in STATE_SCHEMAS.items():
            path = posixpath.join(folder, f"{name}.parquet")
            try:
                read[name] = pq.read_table(path, filesystem=fs, schema=schema)
            except (OSError, pa.ArrowInvalid) as exc:
                raise IndexNotFoundError(
                    f"generation {manifest.generation} of {root} lacks its table {name} ({exc}); the index cannot "
                    "be changed incrementally: rebuild it with --overwrite"
                ) from None
        return CorpusState(**read)
    return _legacy_state(fs, root)


def _legacy_state(fs: pafs.FileSystem, root: str) -> CorpusState:
    staged: dict[str, pa.Table] = {}
    for name in ("documents", "chunks", "quarantine", "entities", "relations"):
        folder = posixpath.join(root, "_staging", name)
        infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        files = sorted(
            i.path
            for i in infos
            if i.type == pafs.FileType.File
            and i.path.endswith(".parquet")
            and not posixpath.basename(i.path).startswith(".")
        )
        if not files and name != "quarantine":
            raise IndexNotFoundError(
                f"{root} was built before index generations and its build's staging ({folder}) is gone; it cannot be "
                "changed incrementally: rebuild it with --overwrite"
            )
        schema = STATE_SCHEMAS[name]
        parts = [pq.read_table(f, filesystem=fs, schema=schema) for f in files]
        staged[name] = pa.concat_tables(parts) if parts else schema.empty_table()
    sources = sources_from_documents(staged["documents"])
    provenance: set[str] = set()
    for name in ("entities", "relations"):
        col = staged[name].column("source_chunk_ids")
        provenance.update(pc.list_flatten(col).to_pylist() if staged[name].num_rows else [])
    return CorpusState(
        sources=sources,
        documents=derive_documents(sources),
        chunks=staged["chunks"],
        quarantine=staged["quarantine"],
        entities=staged["entities"],
        relations=staged["relations"],
        merged_chunks=pa.table({"chunk_id": sorted(provenance)}, schema=tables.MERGED_CHUNKS),
    )


# --------------------------------------------------------------------------------------------- publishing


def publish(fs: pafs.FileSystem, root: str, build_dir: str, generation: str) -> str:
    """Move (local) or copy (S3) a finished build folder to ``<root>/generations/<generation>``; returns it.

    The generation is not current yet: the caller writes the manifest afterwards. A folder of the same id left by
    a change that crashed before its manifest switch is replaced."""
    target = posixpath.join(root, generation_dir(generation))
    info = fs.get_file_info(target)
    if info.type == pafs.FileType.Directory:
        fs.delete_dir(target)
    if isinstance(fs, pafs.LocalFileSystem):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(build_dir, target)
    else:
        fs.create_dir(target, recursive=True)
        pafs.copy_files(build_dir, target, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    return target


def prune(
    fs: pafs.FileSystem, root: str, manifest: IndexManifest, keep: int, held: set[str] | None = None
) -> list[str]:
    """Remove the generations older than the ``keep`` newest of the manifest's history (the current one is always
    kept), the flat-layout files once they fall out of that window, and folders of changes that never became
    current; never a generation a live reader holds a lease on (``held``; default: the leases under ``root``,
    :mod:`hxd2_ray.index_store.leases`). Returns what was removed (relative paths)."""
    order = [g["id"] for g in manifest.generations]
    if manifest.generation not in order:
        order.append(manifest.generation)
    pos = order.index(manifest.generation)
    kept = set(order[max(0, pos - keep + 1) : pos + 1])
    kept |= held_generations(fs, root) if held is None else held
    removed = []
    folder = posixpath.join(root, GENERATIONS_DIR)
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        name = posixpath.basename(info.path)
        if info.type == pafs.FileType.Directory and name not in kept:
            fs.delete_dir(info.path)
            removed.append(generation_dir(name))
    if "" not in kept and manifest.generation:
        for name in (*QUERY_FILES, "graph.kuzu.wal"):
            path = posixpath.join(root, name)
            kind = fs.get_file_info(path).type
            if kind == pafs.FileType.Directory:
                fs.delete_dir(path)
                removed.append(name)
            elif kind == pafs.FileType.File:
                fs.delete_file(path)
                removed.append(name)
    return removed
