"""Open a built index for querying: manifest first, then the Kùzu graph (read-only) and the vector families.

The manifest is what marks an index complete, so it is read before anything else: no manifest means a
missing or half-written index (:class:`IndexNotFoundError`), and a manifest written with another embedding
model or dimension than the query configuration is refused (:class:`IndexMismatchError` naming both).

An ``s3://`` index is copied to a local cache first (Kùzu and Faiss read local files): into a fresh temp
folder, then renamed into place, with the manifest copied last, so a cache entry is complete or absent.

The graph and the vectors are those of the manifest's current generation (``generations/<id>/``, or the root of
an index written before generations): an open index keeps reading the generation it opened, whatever the index
job publishes meanwhile, until it is opened again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig, RetrievalConfig, embedding_model_id
from hxd2_ray.errors import HxdError, IndexDamagedError, IndexMismatchError, IndexNotFoundError
from hxd2_ray.graph.base import GraphStore
from hxd2_ray.graph.read_structures import READS_DIR
from hxd2_ray.graph.resident import LazyStore, open_resident
from hxd2_ray.index_store.layout import GRAPH_NAME, IndexLayout
from hxd2_ray.index_store.manifest import (
    MANIFEST_NAME,
    IndexManifest,
    check_compatible,
    check_files,
    generation_dir,
    read_manifest,
)
from hxd2_ray.index_store.tables import VECTOR_FAMILIES
from hxd2_ray.ingest.sources import resolve_filesystem
from hxd2_ray.retrieval.fuzzy import FuzzyNameIndex
from hxd2_ray.retrieval.lexical import LEXICAL_DIR, LexicalIndex
from hxd2_ray.vectors.base import FAMILY_JSON, VectorIndex, family_dir, family_keys, id_map_files

# What dual-level retrieval searches; relation_keywords is for logic-form predicate linking.
DUAL_LEVEL_FAMILIES = ("entity_name", "entity_mix", "relation_mix", "chunk")
# Copied from S3; the build's _staging folder (large, not needed to query) is left behind.
_QUERY_FILES = (GRAPH_NAME, READS_DIR, "vectors", LEXICAL_DIR, "index_summary.json")
# The id map's files in either format (the entity keys of an index without read structures come from them).
_ID_MAP_FILES = (FAMILY_JSON, *id_map_files(1), *id_map_files(2))


@dataclass(frozen=True)
class OpenIndex:
    """A queryable index: everything read-only, safe to share between threads."""

    location: str  # as the caller gave it (local path or s3:// URI)
    root: Path  # the local folder actually read
    manifest: IndexManifest
    graph: GraphStore
    families: Mapping[str, VectorIndex]
    names: FuzzyNameIndex  # folded entity keys for near-miss name matching
    lexical: LexicalIndex | None = None  # BM25 over the generation's chunks; None for an index built before it
    _closers: tuple[Callable[[], None], ...] = field(default=(), repr=False)

    def family(self, name: str) -> VectorIndex:
        try:
            return self.families[name]
        except KeyError:
            raise IndexNotFoundError(
                f"vector family {name!r} was not opened from {self.location} (opened: {', '.join(self.families)})"
            ) from None

    def close(self) -> None:
        for close in self._closers:
            close()

    def __enter__(self) -> "OpenIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_index(
    path_or_s3: str | os.PathLike[str],
    cfg: HxdConfig,
    families: Sequence[str] = VECTOR_FAMILIES,
    generation: str | None = None,
) -> OpenIndex:
    """Open the index at a local path or ``s3://bucket/prefix`` for querying with ``cfg``'s embedding model: the
    manifest's current generation, or ``generation`` while it is still on disk (a request pinned to it before a
    change was published; its files were checked when it was current)."""
    location = os.fspath(path_or_s3)
    fs, path = resolve_filesystem(location, cfg.s3)
    if isinstance(fs, pafs.LocalFileSystem):
        if not os.path.isdir(path):
            raise IndexNotFoundError(f"no index at {location}: the folder does not exist")
        if not os.path.exists(os.path.join(path, MANIFEST_NAME)):
            raise IndexNotFoundError(_no_manifest(location))
        manifest = _pinned(read_manifest(path), generation)
        root = Path(path)
    else:
        if fs.get_file_info(f"{path.rstrip('/')}/{MANIFEST_NAME}").type == pafs.FileType.NotFound:
            raise IndexNotFoundError(_no_manifest(location))
        manifest = _pinned(read_manifest(path, filesystem=fs), generation)
        root = _cached_copy(fs, path, location, manifest, _cache_root(cfg))
    check_compatible(manifest, embedding_model_id(cfg.embedding), cfg.embedding.dim, cfg.graph.backend)
    # Sizes always (a stat per file), checksums on request: a damaged file is named before Kùzu or Faiss reads it.
    check_files(
        root,
        manifest,
        location=location,
        checksums=cfg.retrieval.verify_checksums,
        only=(
            GRAPH_NAME,
            f"{READS_DIR}/",
            *(f"vectors/{f}/" for f in families),
            *(f"vectors/{f}/{name}" for f in ("entity_name", "entity_mix") for name in _ID_MAP_FILES),
        ),
    )
    if cfg.retrieval.search_threads is not None:
        _set_search_threads(cfg.retrieval.search_threads)
    return _open_local(location, root, manifest, families, cfg.retrieval)


def _pinned(manifest: IndexManifest, generation: str | None) -> IndexManifest:
    """The manifest as a reader of ``generation`` sees it: the recorded file sizes are the current generation's,
    so an older one is opened without them."""
    if generation is None or generation == manifest.generation:
        return manifest
    if generation not in [g.get("id") for g in manifest.generations]:
        raise IndexNotFoundError(
            f"generation {generation!r} is not in the index's history (current: {manifest.generation!r})"
        )
    return manifest.model_copy(update={"generation": generation, "files": {}})


def _set_search_threads(threads: int) -> None:
    # Through faiss_index's own module reference: that module stays the only one importing faiss.
    from hxd2_ray.vectors import faiss_index

    getattr(faiss_index, "faiss").omp_set_num_threads(threads)


def _no_manifest(location: str) -> str:
    return (
        f"no {MANIFEST_NAME} in {location}: the index is missing or half-written (the index job writes the "
        "manifest last); finish or rerun the build, or point at a complete index"
    )


def _open_local(
    location: str, root: Path, manifest: IndexManifest, families: Sequence[str], retrieval: RetrievalConfig
) -> OpenIndex:
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore
    from hxd2_ray.vectors.faiss_index import FaissFamilyIndex

    layout = IndexLayout(root=root, manifest=manifest)
    root = layout.generation_root  # the current generation's files
    graph_path = layout.graph_path
    if not graph_path.exists():
        raise IndexNotFoundError(f"index at {location} has a manifest but no {GRAPH_NAME}: copy or rebuild it whole")
    opened: dict[str, VectorIndex] = {}
    try:
        for name in dict.fromkeys(families):
            with _unreadable_as_damage(location, f"vector family {name!r}"):
                index = FaissFamilyIndex.open(root, name)
            if index.count and index.dim != manifest.embedding_dim:
                raise IndexMismatchError(
                    f"vector family {name!r} has dimension {index.dim} but the manifest says {manifest.embedding_dim}"
                )
            opened[name] = index
        with _unreadable_as_damage(location, "the entity id map"):
            # Mapped from the generation's read structures; an index written before them builds it here.
            names = FuzzyNameIndex.open(root / READS_DIR) or FuzzyNameIndex(_entity_keys(root))
        with _unreadable_as_damage(location, "the lexical index"):
            lexical = LexicalIndex.open(root / LEXICAL_DIR)

        def open_store() -> KuzuGraphStore:
            with _unreadable_as_damage(location, GRAPH_NAME):
                return KuzuGraphStore(
                    graph_path, read_only=True, max_threads=retrieval.graph_threads, engine=manifest.graph_backend
                )

        with _unreadable_as_damage(location, GRAPH_NAME):
            # Opened when a read needs it: with read structures, most processes never do (LazyStore).
            graph = open_resident(
                LazyStore(open_store),
                retrieval.resident_graph,
                retrieval.resident_graph_max_mb,
                reads_dir=root / READS_DIR,
                index=location,
            )
    except BaseException:
        for ix in opened.values():
            ix.close()
        raise
    closers = (graph.close, *(ix.close for ix in opened.values()))
    return OpenIndex(
        location=location,
        root=root,
        manifest=manifest,
        graph=graph,
        families=opened,
        names=names,
        lexical=lexical,
        _closers=closers,
    )


@contextmanager
def _unreadable_as_damage(location: str, what: str) -> Iterator[None]:
    """What Kùzu, Faiss or Arrow raise on a damaged file (past the size check, e.g. an older manifest without
    sizes, or a same-size corruption) becomes :class:`IndexDamagedError` naming the part."""
    try:
        yield
    except HxdError:
        raise
    except (RuntimeError, OSError, pa.ArrowException) as exc:
        raise IndexDamagedError(
            f"index at {location}: cannot read {what} ({str(exc)[:300]}); run hxd2 index verify "
            f"--index {location} --checksums, then rebuild or copy the index again"
        ) from None


def _entity_keys(root: Path) -> list[str]:
    """Every entity key, from the entity_name family's id map (one row per entity; no graph scan needed).

    Keys are the normalised names (NFKC, casefolded), which is what fuzzy matching compares anyway.
    """
    for family in ("entity_name", "entity_mix"):
        if (family_dir(root, family) / FAMILY_JSON).exists():
            return family_keys(root, family).to_pylist()
    raise IndexNotFoundError(f"index at {root} has no entity_name or entity_mix vector family")


# ------------------------------------------------------------------------------------------- S3 cache


def _cache_root(cfg: HxdConfig) -> Path:
    configured = cfg.retrieval.cache_dir or os.environ.get("HXD2_INDEX_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "hxd2" / "indexes"


def cache_dir_for(cache_root: Path, location: str, manifest: IndexManifest) -> Path:
    """One cache entry per index build: a rebuild at the same URI gets a new entry."""
    ident = f"{location}\n{manifest.fingerprint}\n{manifest.created_at}\n{manifest.generation}"
    return cache_root / hashlib.sha256(ident.encode()).hexdigest()[:24]


def _cached_copy(fs: pafs.FileSystem, path: str, location: str, manifest: IndexManifest, cache_root: Path) -> Path:
    target = cache_dir_for(cache_root, location, manifest)
    if (target / MANIFEST_NAME).exists():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = cache_root / f".download-{uuid.uuid4().hex}"
    tmp.mkdir()
    local = pafs.LocalFileSystem()
    try:
        generation = generation_dir(manifest.generation)
        for name in _QUERY_FILES:
            # The graph and vectors of the current generation only, at the same place as in the index.
            name = f"{generation}/{name}" if generation and name != "index_summary.json" else name
            src = f"{path.rstrip('/')}/{name}"
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            info = fs.get_file_info(src)
            if info.type == pafs.FileType.NotFound:
                continue
            if info.type == pafs.FileType.File:
                pafs.copy_files(src, str(tmp / name), source_filesystem=fs, destination_filesystem=local)
            else:
                (tmp / name).mkdir()
                pafs.copy_files(src, str(tmp / name), source_filesystem=fs, destination_filesystem=local)
        # The manifest last: a cache entry with a manifest is complete.
        pafs.copy_files(
            f"{path.rstrip('/')}/{MANIFEST_NAME}",
            str(tmp / MANIFEST_NAME),
            source_filesystem=fs,
            destination_filesystem=local,
        )
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process finished the same download first; theirs is as good as ours.
            if not (target / MANIFEST_NAME).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
