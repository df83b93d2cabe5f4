"""Write the graph read structures of an index built before they existed (``hxd2 index reindex-reads``).

The read structures (:mod:`hxd2_ray.graph.read_structures`) are derived from the generation's Kùzu file alone,
so they are written into the current generation in place, under the build lock (no build changes the index
meanwhile), replaced whole by a rename, and recorded in the manifest with their sizes and checksums. A reader
that opened the generation before keeps what it holds; the next open maps them.

The vector families and the lexical index written before they were mapped (format 1: ``idmap.parquet``, Faiss id
maps, ``chunk_ids.json``) are rewritten in their mapped format the same way (the same vectors and scores: they
answer the same), so an index from before opens without reading any array whole after this one command.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig
from hxd2_ray.errors import HxdError, IndexNotFoundError
from hxd2_ray.graph.read_structures import READS_DIR
from hxd2_ray.index_store.build_lock import acquire_build_lock
from hxd2_ray.index_store.disk_space import GRAPH_BASE_BYTES, MB, WriteSeam
from hxd2_ray.index_store.layout import IndexLayout
from hxd2_ray.index_store.manifest import (
    MANIFEST_NAME,
    QUERY_FILE_ROOTS,
    read_manifest,
    record_files,
    write_manifest,
)
from hxd2_ray.indexer.query_reads import upgrade_mapped, write_query_reads
from hxd2_ray.ingest.sources import resolve_filesystem

__all__ = ["reindex_reads"]


def reindex_reads(location: str, cfg: HxdConfig, progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Write (or rewrite) the read structures of the index at ``location``'s current generation."""
    fs, root = resolve_filesystem(location, cfg.s3)
    if not isinstance(fs, pafs.LocalFileSystem):
        raise HxdError(
            f"reindex-reads writes into a local index folder; {location} is not one (run hxd2 index with --output "
            f"{location} and the changed documents as --input: the update writes a new generation with read structures)"
        )
    if not (Path(root) / MANIFEST_NAME).is_file():
        raise IndexNotFoundError(f"no index at {location}: no {MANIFEST_NAME} there")
    with acquire_build_lock(fs, root, location, cfg.s3, "hxd2 index reindex-reads"):
        manifest = read_manifest(root)
        layout = IndexLayout(root=Path(root), manifest=manifest)
        if not layout.graph_path.exists():
            raise HxdError(f"index at {location} has no graph at {layout.graph_path}: rebuild it")
        started = time.perf_counter()
        progress(f"writing the graph read structures of generation {manifest.generation or '(root)'}")
        # A full or read-only disk ends as one error naming the path and the space needed, as in a build. The new
        # structures are written beside the old ones before the rename; their size is taken as the old ones', or
        # the graph's past its empty pages (the tiny test index: graph 4.2 MB, structures 20 KB), at least 1 MB.
        target = layout.generation_root / READS_DIR
        needed = max(_size(target), _size(layout.graph_path) - GRAPH_BASE_BYTES, MB)
        seam = WriteSeam(
            str(layout.generation_root), needed, rerun="run the same command again: the index is served as it was"
        )
        seam.check_room(str(layout.generation_root), seam.needed_bytes, "the graph read structures")
        with seam.writing("the graph read structures", str(target)):
            reads = write_query_reads(layout.graph_path, target, manifest.graph_backend)

        @contextmanager
        def room_for(what: str, path: Path, size: int) -> Iterator[None]:
            seam.check_room(str(path.parent), max(size, MB), what)  # written beside the old one, then renamed
            with seam.writing(what, str(path)):
                yield

        upgraded = upgrade_mapped(layout.generation_root, room_for, progress)
        seconds = time.perf_counter() - started
        update: dict[str, Any] = {}
        if "vectors" in upgraded:  # the manifest's copy of each family.json
            families = manifest.vector_families.items()
            update["vector_families"] = {name: {**info, "format_version": 2} for name, info in families}
        if manifest.files:  # an older manifest without file records stays without them (verify says so)
            tops = (READS_DIR, *(t for t in upgraded if t in QUERY_FILE_ROOTS))  # the tops the manifest records
            files = {k: v for k, v in manifest.files.items() if not any(k.startswith(f"{t}/") for t in tops)}
            files.update(record_files(layout.generation_root, tops=tops))
            update["files"] = files
        if update:
            write_manifest(root, manifest.model_copy(update=update))
    return {
        "index": location,
        "generation": manifest.generation,
        "entities": reads.entities.num_rows,
        "chunks": reads.chunks.num_rows,
        "seconds": round(seconds, 2),
    }


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (a Kùzu database is either, by version)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
