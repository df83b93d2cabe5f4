"""The index manifest: written last, so its presence is what marks an index as complete.

Readers open ``<root>/manifest.json`` before anything else; a crash mid-build leaves no manifest and the
index reads as missing rather than half-there. The manifest also records the models, dimension and
schema versions the query side must match, and the size and sha256 of every file the query side reads
(``files``), so a truncated graph or a missing shard is named before Kùzu or Faiss trips over it.

Format 2 adds generations: the query files of an index built or changed by the index job live in
``<root>/generations/<id>/`` and the manifest names the current one (``generation``), its parent and the history,
so a change publishes a whole new generation and switches to it with one manifest write
(:mod:`hxd2_ray.index_store.generations`). ``generation == ""`` is the flat layout (files at the root) of format 1
and of ``hxd2 index-kb``.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import pyarrow.fs as pafs
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import hxd2_ray
from hxd2_ray.atomic_write import replace_local_file
from hxd2_ray.config import HxdConfig, embedding_model_id, llm_model_id
from hxd2_ray.errors import IndexDamagedError, IndexMismatchError, IndexNotFoundError
from hxd2_ray.graph.base import GRAPH_SCHEMA_VERSION

MANIFEST_FORMAT_VERSION = 2
MANIFEST_NAME = "manifest.json"
GENERATIONS_DIR = "generations"


def generation_dir(generation: str) -> str:
    """The generation's folder relative to the index root ("" for the flat layout)."""
    return posixpath.join(GENERATIONS_DIR, generation) if generation else ""


class IndexManifest(BaseModel):
    # extra="ignore": a newer writer may add fields; format_version guards real incompatibility.
    model_config = ConfigDict(frozen=True, extra="ignore")

    format_version: int = MANIFEST_FORMAT_VERSION
    fingerprint: str
    prompt_version: str
    llm_model_id: str
    embedding_model_id: str
    embedding_dim: int = Field(gt=0)
    counts: dict[str, int] = Field(default_factory=dict)
    vector_families: dict[str, dict[str, Any]] = Field(default_factory=dict)  # family -> FamilyInfo.to_dict()
    graph_schema_version: int = GRAPH_SCHEMA_VERSION
    # The engine that wrote the graph (graph.backend) and its package version; a manifest without it is Kùzu's.
    graph_backend: str = "kuzu"
    graph_engine_version: str = ""
    created_at: str = Field(default_factory=lambda: utc_now_iso())
    config: dict[str, Any] = Field(default_factory=dict)  # the HxdConfig used, as JSON
    hxd2_ray_version: str = hxd2_ray.__version__
    generation: str = ""  # the current generation's id ("" = files at the root)
    parent_generation: str = ""  # the generation this one was made from ("" for a build from scratch)
    # Every generation of this index, oldest first: {"id", "parent", "created_at", "kind", "change": {...}}.
    generations: list[dict[str, Any]] = Field(default_factory=list)
    # The current generation's files: path relative to that generation's folder (the index root in the flat
    # layout) -> {"size": bytes, "sha256": hex}; empty in manifests older than checksums
    files: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # SYNONYM edges of the graph: the settings that made them and how many ({} for an index built before them).
    synonyms: dict[str, Any] = Field(default_factory=dict)
    # The refusal threshold calibrated on this index when it was built (hxd2_ray.retrieval.refusal_calibration):
    # rule, threshold, precision/recall/F1 and the question sets; None when it was not calibrated.
    refusal: dict[str, Any] | None = None

    @classmethod
    def create(
        cls,
        *,
        fingerprint: str,
        prompt_version: str,
        llm_model_id: str,
        embedding_model_id: str,
        embedding_dim: int,
        counts: Mapping[str, int],
        vector_families: Mapping[str, Mapping[str, Any]],
        config: Mapping[str, Any],
        generation: str = "",
        parent_generation: str = "",
        generations: list[dict[str, Any]] | None = None,
        files: Mapping[str, Mapping[str, Any]] | None = None,
        synonyms: Mapping[str, Any] | None = None,
        refusal: Mapping[str, Any] | None = None,
        graph_backend: str = "kuzu",
    ) -> "IndexManifest":
        """A manifest stamped now, with this version's format, graph schema and package version.

        ``files``: :func:`record_files` of the finished generation's folder (sizes and checksums).
        ``graph_backend``: the engine that wrote the graph (``graph.backend``), recorded with its version."""
        return cls(
            graph_backend=graph_backend,
            graph_engine_version=_package_version(graph_backend),
            synonyms=dict(synonyms or {}),
            refusal=dict(refusal) if refusal is not None else None,
            fingerprint=fingerprint,
            prompt_version=prompt_version,
            llm_model_id=llm_model_id,
            embedding_model_id=embedding_model_id,
            embedding_dim=embedding_dim,
            counts=dict(counts),
            vector_families={k: dict(v) for k, v in vector_families.items()},
            config=dict(config),
            generation=generation,
            parent_generation=parent_generation,
            generations=list(generations or []),
            files={k: dict(v) for k, v in (files or {}).items()},
        )


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_manifest(
    cfg: HxdConfig,
    prompt_version: str,
    counts: Mapping[str, int],
    vector_families: Mapping[str, Mapping[str, Any]],
) -> IndexManifest:
    """A manifest filled from the config that built the index."""
    return IndexManifest.create(
        fingerprint=cfg.index_fingerprint(prompt_version),
        prompt_version=prompt_version,
        llm_model_id=llm_model_id(cfg.llm),
        embedding_model_id=embedding_model_id(cfg.embedding),
        embedding_dim=cfg.embedding.dim,
        counts=counts,
        vector_families=vector_families,
        config=cfg.model_dump(mode="json"),
        graph_backend=cfg.graph.backend,
    )


def _resolve(
    location: str | os.PathLike[str], filesystem: pafs.FileSystem | None
) -> tuple[pafs.FileSystem | None, str]:
    """(filesystem, path) for a URI like s3://bucket/idx, or (None, local path) for a plain path."""
    loc = os.fspath(location)
    if filesystem is not None:
        return filesystem, loc.rstrip("/")
    if "://" in loc and not loc.startswith("file://"):
        fs, path = pafs.FileSystem.from_uri(loc)
        return fs, path.rstrip("/")
    return None, loc.removeprefix("file://")


def _manifest_path(path: str) -> str:
    return path if path.endswith(MANIFEST_NAME) else f"{path.rstrip('/')}/{MANIFEST_NAME}"


def write_manifest(
    root: str | os.PathLike[str], manifest: IndexManifest, filesystem: pafs.FileSystem | None = None
) -> str:
    """Write ``<root>/manifest.json``; returns where. Call it after every other index file is in place.

    Locally: temp file + fsync + rename, so a reader never sees a partial manifest. On object stores a
    single PUT of the final key is already atomic, and being the last object written is what matters.
    """
    body = json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True, ensure_ascii=False).encode()
    fs, path = _resolve(root, filesystem)
    if fs is None or isinstance(fs, pafs.LocalFileSystem):
        final = Path(_manifest_path(path))
        final.parent.mkdir(parents=True, exist_ok=True)
        replace_local_file(final, lambda tmp: Path(tmp).write_bytes(body), durable=True)
        return str(final)
    key = _manifest_path(path)
    with fs.open_output_stream(key) as out:
        out.write(body)
    return key


def read_manifest(path: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None) -> IndexManifest:
    """Read the manifest of the index at ``path`` (its root, or the manifest.json itself)."""
    fs, p = _resolve(path, filesystem)
    where = _manifest_path(p)
    try:
        if fs is None:
            raw = Path(where).read_bytes()
        else:
            with fs.open_input_stream(where) as fh:
                raw = fh.read()
    except (FileNotFoundError, NotADirectoryError):
        folder = os.path.dirname(where) if fs is None else posixpath.dirname(where)
        local = fs is None or isinstance(fs, pafs.LocalFileSystem)  # object stores have no folders to check
        if local and not os.path.isdir(folder):
            raise IndexNotFoundError(
                f"no index at {folder}: the folder does not exist (the index is missing or was never completed)"
            ) from None
        raise IndexNotFoundError(f"no manifest.json at {where}: the index is missing or was never completed") from None
    except OSError as exc:
        # pyarrow reports a missing S3 key as OSError ("Path does not exist").
        if "does not exist" in str(exc) or "NoSuchKey" in str(exc) or "not found" in str(exc).lower():
            raise IndexNotFoundError(
                f"no manifest.json at {where}: the index is missing or was never completed"
            ) from None
        raise
    try:
        manifest = IndexManifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise IndexNotFoundError(f"manifest.json at {where} is unreadable ({exc}); rebuild the index") from None
    if manifest.format_version > MANIFEST_FORMAT_VERSION:
        raise IndexMismatchError(
            f"index at {where} has manifest format {manifest.format_version}, newer than this hxd2_ray "
            f"{hxd2_ray.__version__} reads ({MANIFEST_FORMAT_VERSION}); upgrade hxd2_ray"
        )
    return manifest


def check_compatible(
    manifest: IndexManifest, embedding_model_id: str, dim: int, graph_backend: str | None = None
) -> None:
    """The query side must embed with the model and dimension the index was built with, and (``graph_backend``
    given) read the graph with the engine that wrote it."""
    if manifest.embedding_model_id != embedding_model_id or manifest.embedding_dim != dim:
        raise IndexMismatchError(
            f"the index was built with embedding model {manifest.embedding_model_id!r} (dim "
            f"{manifest.embedding_dim}) but the query configuration uses {embedding_model_id!r} (dim {dim}); "
            "query with the same embedding model or rebuild the index"
        )
    if graph_backend is not None and manifest.graph_backend != graph_backend:
        raise IndexMismatchError(
            f"the index's graph was written by {manifest.graph_backend} but the query configuration reads graphs "
            f"with {graph_backend} (graph.backend); the two engines' files are not interchangeable: query with "
            f"--set graph.backend={manifest.graph_backend}, or rebuild the index with graph.backend={graph_backend}"
        )
    if manifest.graph_schema_version != GRAPH_SCHEMA_VERSION:
        raise IndexMismatchError(
            f"the index has graph schema version {manifest.graph_schema_version} but this hxd2_ray reads "
            f"version {GRAPH_SCHEMA_VERSION}; rebuild the index"
        )


# --------------------------------------------------------------------------------------------- file checks

# What the query side reads, relative to the index root: the graph, its read structures and every vector
# family's files.
QUERY_FILE_ROOTS = ("graph.kuzu", "reads", "vectors")
_HASH_BLOCK = 1 << 20


def _sha256(stream: Any) -> str:
    h = hashlib.sha256()
    for block in iter(lambda: stream.read(_HASH_BLOCK), b""):
        h.update(block)
    return h.hexdigest()


def record_files(root: str | os.PathLike[str], tops: tuple[str, ...] = QUERY_FILE_ROOTS) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``root`` that the query side reads (``graph.kuzu``, ``reads/``,
    ``vectors/``; or only those under ``tops``)."""
    base = Path(root)
    out: dict[str, dict[str, Any]] = {}
    for top in tops:
        path = base / top
        paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in paths:
            with open(p, "rb") as fh:
                out[p.relative_to(base).as_posix()] = {"size": p.stat().st_size, "sha256": _sha256(fh)}
    return out


@dataclass(frozen=True)
class FileDamage:
    file: str  # relative to the index root
    problem: str


def find_damage(
    root: str | os.PathLike[str],
    manifest: IndexManifest,
    *,
    checksums: bool = False,
    filesystem: pafs.FileSystem | None = None,
    only: tuple[str, ...] | None = None,
) -> list[FileDamage]:
    """Files whose presence, size (always) or sha256 (with ``checksums``) differ from the manifest's record.

    ``root`` is the index root; the files are those of the manifest's current generation. ``only``: check just the
    files equal to or under these paths relative to the generation's folder (``vectors/chunk/``)."""
    fs, base = _resolve(root, filesystem)
    fs = fs or pafs.LocalFileSystem()
    names = sorted(n for n in manifest.files if only is None or any(n == o or n.startswith(o) for o in only))
    # Recorded relative to the current generation's folder; named relative to the index root.
    shown = [posixpath.join(generation_dir(manifest.generation), n) for n in names]
    infos = fs.get_file_info([posixpath.join(base, n) for n in shown]) if names else []
    damage = []
    for key, name, info in zip(names, shown, infos, strict=True):
        want = manifest.files[key]
        if info.type != pafs.FileType.File:
            damage.append(FileDamage(name, f"{name} is missing"))
        elif info.size != want.get("size"):
            damage.append(
                FileDamage(
                    name,
                    f"{name} has {info.size} bytes, the manifest recorded {want.get('size')}"
                    + (" (truncated)" if (info.size or 0) < (want.get("size") or 0) else ""),
                )
            )
        elif checksums and want.get("sha256"):
            with fs.open_input_stream(info.path) as fh:
                got = _sha256(fh)
            if got != want["sha256"]:
                damage.append(
                    FileDamage(
                        name, f"{name} has sha256 {got[:16]}…, the manifest recorded {str(want['sha256'])[:16]}…"
                    )
                )
    return damage


def check_files(
    root: str | os.PathLike[str],
    manifest: IndexManifest,
    *,
    location: str,
    checksums: bool = False,
    filesystem: pafs.FileSystem | None = None,
    only: tuple[str, ...] | None = None,
) -> None:
    """Raise :class:`IndexDamagedError` naming the damaged files (sizes always; sha256 with ``checksums``)."""
    damage = find_damage(root, manifest, checksums=checksums, filesystem=filesystem, only=only)
    if damage:
        more = f" (and {len(damage) - 1} more damaged files)" if len(damage) > 1 else ""
        raise IndexDamagedError(
            f"index at {location} is damaged: {damage[0].problem}{more}; rebuild the index or "
            f"copy it again whole (hxd2 index verify --index {location} lists every file)"
        )
