"""Back up an index to one archive and restore it elsewhere (``hxd2 index export`` / ``hxd2 index import``).

An export holds what a reader needs and nothing else: ``manifest.json`` as it names the published generation, and
that generation's folder (graph, read structures, vectors, lexical index, the corpus tables the next update starts
from), or the root's query files for the flat layout. No ``_staging``, ``_llm_cache``, ``_logs``, leases, lock or
older generation. The archive's last member, ``hxd2-export.json``, lists every other member's size and sha256.

The export reads under a reader lease on the generation (:mod:`hxd2_ray.index_store.leases`, renewed while it runs),
so an update that publishes meanwhile never prunes the files being read; the manifest it archives is the one it
read, so archive and generation always match. A generation pruned between reading the manifest and taking the lease
is noticed (a file missing or changed) and the export starts again from the new manifest.

The import refuses a non-empty output and any member that is not a plain file or folder inside it (an absolute
path, ``..``, a link, a device) or no part of an exported index; it writes into a hidden folder beside the output,
checks every file against the listing and the manifest's checksums (as ``hxd2 index verify`` does), and only then
renames it to the output (without the listing), so a refused or broken archive leaves no index behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import shutil
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable

import pyarrow.fs as pafs

import hxd2_ray
from hxd2_ray.errors import HxdError, IndexDamagedError, IndexMismatchError, IndexNotFoundError
from hxd2_ray.index_store.leases import LeaseKeeper
from hxd2_ray.index_store.manifest import (
    GENERATIONS_DIR,
    MANIFEST_FORMAT_VERSION,
    MANIFEST_NAME,
    IndexManifest,
    find_damage,
    generation_dir,
    read_manifest,
    utc_now_iso,
)

EXPORT_LISTING = "hxd2-export.json"
EXPORT_FORMAT = 1
# The flat layout's query files at the root (the names generations.QUERY_FILES gives, and Kùzu's log).
FLAT_FILES = ("graph.kuzu", "graph.kuzu.wal", "reads", "vectors", "lexical")
ATTEMPTS = 3
_BLOCK = 1 << 20


class ArchiveRefusedError(HxdError):
    """An archive that is not an exported index, or one that would write outside the output folder."""


class ExportTornError(HxdError):
    """The generation being exported changed under the export (pruned before its lease was taken)."""


@dataclass
class _Hashing:
    """A reader that hashes and counts what passes through it."""

    stream: IO[bytes]
    sha: Any = field(default_factory=hashlib.sha256)
    size: int = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data


# --------------------------------------------------------------------------------------------- export


def _parse_manifest(raw: bytes, where: str) -> IndexManifest:
    try:
        manifest = IndexManifest.model_validate(json.loads(raw))
    except ValueError as exc:
        raise IndexNotFoundError(f"manifest.json at {where} is unreadable ({exc})") from None
    if manifest.format_version > MANIFEST_FORMAT_VERSION:
        raise IndexMismatchError(
            f"index at {where} has manifest format {manifest.format_version}, newer than this hxd2_ray "
            f"{hxd2_ray.__version__} reads ({MANIFEST_FORMAT_VERSION}); upgrade hxd2_ray"
        )
    return manifest


def generation_members(fs: pafs.FileSystem, root: str, manifest: IndexManifest) -> list[str]:
    """The files of the manifest's published generation, relative to the index root, sorted."""
    tops = [generation_dir(manifest.generation)] if manifest.generation else list(FLAT_FILES)
    out: list[str] = []
    for top in tops:
        path = posixpath.join(root, top)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            out.append(top)
        elif info.type == pafs.FileType.Directory:
            for found in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
                if found.type == pafs.FileType.File:
                    out.append(posixpath.join(top, posixpath.relpath(found.path, path)))
    return sorted(out)


def export_index(
    fs: pafs.FileSystem,
    root: str,
    archive: str | os.PathLike[str],
    *,
    location: str,
    keeper: LeaseKeeper | None = None,
    before_archiving: Callable[[IndexManifest], None] | None = None,
) -> dict[str, Any]:
    """Write the index at ``root`` (on ``fs``) to the gzipped tar ``archive`` (a local path, not yet there).

    ``before_archiving`` (tests): called with the manifest once its generation's lease is held."""
    target = Path(archive)
    if target.exists():
        raise HxdError(f"{target} exists: remove it or name another archive (an export never overwrites one)")
    if not target.parent.is_dir():
        raise HxdError(f"{target.parent} does not exist: create the archive's folder first")
    own_keeper = keeper is None
    keeper = keeper or LeaseKeeper()
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return _export_once(fs, root, target, location, keeper, before_archiving)
            except ExportTornError:
                if attempt == ATTEMPTS:
                    raise
        raise AssertionError("unreachable")
    finally:
        if own_keeper:
            keeper.close()


def _export_once(
    fs: pafs.FileSystem,
    root: str,
    target: Path,
    location: str,
    keeper: LeaseKeeper,
    before_archiving: Callable[[IndexManifest], None] | None,
) -> dict[str, Any]:
    read_manifest(root, filesystem=fs)  # the clear errors of a missing or unreadable index
    with fs.open_input_stream(posixpath.join(root, MANIFEST_NAME)) as fh:
        raw = fh.read()
    manifest = _parse_manifest(raw, location)
    lease = keeper.hold(fs, root, manifest.generation)  # None on a read-only folder: nothing of ours prunes it
    partial = target.with_name(f".{target.name}.partial-{uuid.uuid4().hex[:8]}")
    try:
        if not manifest.files:
            raise IndexDamagedError(
                f"the manifest of {location} records no file checksums (built before they were recorded), so a "
                "restore could not be checked: rebuild the index to get them, then export it"
            )
        if find_damage(root, manifest, filesystem=fs):  # pruned before the lease: a newer manifest names another
            raise ExportTornError(f"generation {manifest.generation} of {location} changed while it was exported")
        if before_archiving is not None:
            before_archiving(manifest)
        members = generation_members(fs, root, manifest)
        if not members:
            raise IndexNotFoundError(f"index at {location}: its generation {manifest.generation!r} holds no files")
        recorded = {posixpath.join(generation_dir(manifest.generation), k): v for k, v in manifest.files.items()}
        listing: dict[str, dict[str, Any]] = {}
        with tarfile.open(partial, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, MANIFEST_NAME, raw)
            listing[MANIFEST_NAME] = {"size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
            for name in members:
                listing[name] = _add_file(fs, root, name, tar, recorded.get(name), manifest.generation, location)
            body = json.dumps(
                {
                    "format": EXPORT_FORMAT,
                    "exported_at": utc_now_iso(),
                    "source": location,
                    "generation": manifest.generation,
                    "hxd2_ray_version": hxd2_ray.__version__,
                    "files": listing,
                },
                indent=2,
                sort_keys=True,
            ).encode()
            _add_bytes(tar, EXPORT_LISTING, body)
        os.replace(partial, target)
    except (FileNotFoundError, tarfile.TarError) as exc:
        raise ExportTornError(f"generation {manifest.generation} of {location} changed while exported: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
        keeper.drop(lease)
    return {
        "index": location,
        "archive": str(target),
        "generation": manifest.generation,
        "files": len(listing),
        "bytes": sum(int(v["size"]) for v in listing.values()),
        "archive_bytes": target.stat().st_size,
    }


def _add_bytes(tar: tarfile.TarFile, name: str, body: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(body)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(body))


def _add_file(
    fs: pafs.FileSystem,
    root: str,
    name: str,
    tar: tarfile.TarFile,
    want: dict[str, Any] | None,
    generation: str,
    location: str,
) -> dict[str, Any]:
    path = posixpath.join(root, name)
    info = tarfile.TarInfo(name)
    info.size = int(fs.get_file_info(path).size or 0)
    info.mode = 0o644
    with fs.open_input_stream(path) as fh:
        reader = _Hashing(fh)
        tar.addfile(info, reader)  # read(n) is all tarfile uses of it
    got = {"size": reader.size, "sha256": reader.sha.hexdigest()}
    if want is not None and (want.get("size") != got["size"] or want.get("sha256", got["sha256"]) != got["sha256"]):
        raise ExportTornError(f"{name} of generation {generation} in {location} differs from its manifest record")
    return got


# --------------------------------------------------------------------------------------------- import


def _member_path(name: str) -> PurePosixPath:
    """The member's path relative to the output, or :class:`ArchiveRefusedError` for one that could leave it."""
    if not name or name.startswith(("/", "\\")) or "\\" in name or "\x00" in name or ":" in name.split("/", 1)[0]:
        raise ArchiveRefusedError(f"archive member {name!r} has an absolute path: refused")
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if ".." in parts:
        raise ArchiveRefusedError(f"archive member {name!r} climbs out of the output with '..': refused")
    if not parts:
        raise ArchiveRefusedError(f"archive member {name!r} names no file: refused")
    return PurePosixPath(*parts)


def _part_of_an_export(path: PurePosixPath) -> bool:
    top = path.parts[0]
    if top in (MANIFEST_NAME, EXPORT_LISTING):
        return len(path.parts) == 1
    return top == GENERATIONS_DIR or top in FLAT_FILES


def import_index(archive: str | os.PathLike[str], output: str | os.PathLike[str]) -> dict[str, Any]:
    """Restore the index in ``archive`` (an :func:`export_index` archive) to the local folder ``output``, which must
    be missing or empty. Every file is checked against the archive's listing and the manifest's checksums before
    the output appears; an :class:`ArchiveRefusedError` or :class:`IndexDamagedError` leaves nothing there."""
    source, out = Path(archive), Path(output).expanduser()
    if not source.is_file():
        raise HxdError(f"no archive at {source}")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise HxdError(f"{out} exists and is not a folder: name a missing or empty folder")
    if out.is_dir() and any(out.iterdir()):
        raise HxdError(f"{out} is not empty: an import writes only into a missing or empty folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".{out.name}.importing-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    try:
        written = _extract(source, work)
        manifest, listing = _check(work, written, source)
        (work / EXPORT_LISTING).unlink()  # checked: the output holds the index alone
        del written[EXPORT_LISTING]
        if out.is_dir():
            out.rmdir()  # empty (checked above); the checked folder takes its place in one rename
        os.replace(work, out)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return {
        "archive": str(source),
        "index": str(out),
        "generation": manifest.generation,
        "files": len(written),
        "bytes": sum(size for size, _ in written.values()),
        "checked": "size+sha256",
        "exported_at": listing.get("exported_at", ""),
        "source": listing.get("source", ""),
    }


def _extract(source: Path, work: Path) -> dict[str, tuple[int, str]]:
    """Write the archive's files under ``work``; returns (size, sha256) by member path."""
    written: dict[str, tuple[int, str]] = {}
    try:
        with tarfile.open(source, "r:*") as tar:
            for member in tar:
                rel = _member_path(member.name)
                if member.issym() or member.islnk():
                    raise ArchiveRefusedError(f"archive member {member.name!r} is a link: refused")
                if not (member.isfile() or member.isdir()):
                    raise ArchiveRefusedError(f"archive member {member.name!r} is a device or special file: refused")
                if not _part_of_an_export(rel):
                    raise ArchiveRefusedError(
                        f"archive member {member.name!r} is no part of an exported index: refused"
                    )
                dest = work.joinpath(*rel.parts)
                if member.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                if work.resolve() not in dest.parent.resolve().parents and dest.parent.resolve() != work.resolve():
                    raise ArchiveRefusedError(f"archive member {member.name!r} would be written outside the output")
                written[rel.as_posix()] = _write(tar, member, dest)
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileExistsError):
            raise ArchiveRefusedError(f"{source} holds one file twice ({exc.filename}): refused") from None
        raise ArchiveRefusedError(f"{source} is not a readable index archive: {exc}") from None
    return written


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> tuple[int, str]:
    stream = tar.extractfile(member)
    if stream is None:
        raise ArchiveRefusedError(f"archive member {member.name!r} has no content")
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    sha, size = hashlib.sha256(), 0
    with os.fdopen(fd, "wb") as fh, stream:
        for block in iter(lambda: stream.read(_BLOCK), b""):
            sha.update(block)
            size += len(block)
            fh.write(block)
    return size, sha.hexdigest()


def _check(work: Path, written: dict[str, tuple[int, str]], source: Path) -> tuple[IndexManifest, dict[str, Any]]:
    if EXPORT_LISTING not in written or MANIFEST_NAME not in written:
        missing = EXPORT_LISTING if EXPORT_LISTING not in written else MANIFEST_NAME
        raise ArchiveRefusedError(f"{source} has no {missing}: not an archive of hxd2 index export")
    try:
        listing = json.loads((work / EXPORT_LISTING).read_bytes())
        files = {str(k): (int(v["size"]), str(v["sha256"])) for k, v in listing["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArchiveRefusedError(f"{source}: its {EXPORT_LISTING} is unreadable ({exc})") from None
    got = {k: v for k, v in written.items() if k != EXPORT_LISTING}
    for name in sorted(set(files) | set(got)):
        if name not in got:
            raise IndexDamagedError(f"{source} lacks {name}, which its listing records: the archive is incomplete")
        if name not in files:
            raise ArchiveRefusedError(f"{source} holds {name}, which its listing does not record: refused")
        if got[name] != files[name]:
            raise IndexDamagedError(
                f"{name} in {source} has {got[name][0]} bytes, sha256 {got[name][1][:16]}…; the export recorded "
                f"{files[name][0]} bytes, sha256 {files[name][1][:16]}…: the archive is damaged"
            )
    manifest = read_manifest(work)
    if listing.get("generation", manifest.generation) != manifest.generation:
        raise ArchiveRefusedError(f"{source}: its manifest names another generation than the export recorded")
    own = generation_dir(manifest.generation)
    stray = [n for n in got if n.startswith(f"{GENERATIONS_DIR}/") and not n.startswith(f"{own}/")]
    if stray or (manifest.generation and any(n.split("/", 1)[0] in FLAT_FILES for n in got)):
        raise ArchiveRefusedError(f"{source} holds files of no published generation ({(stray or ['flat files'])[0]})")
    damage = find_damage(work, manifest, checksums=True)
    if damage:
        raise IndexDamagedError(f"the index in {source} is damaged: {'; '.join(d.problem for d in damage)}")
    if not manifest.files:
        raise IndexDamagedError(f"the manifest in {source} records no file checksums: rebuild the index to get them")
    return manifest, listing
