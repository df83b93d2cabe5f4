"""The one place that opens an output folder: checked (before Ray starts), created, locked, swept of leftovers.

:func:`open_output` answers a bad output with one clear :class:`OutputError` instead of whatever the filesystem
raises: a path that is a file or lies under one, a folder that cannot be created or written, an S3 bucket that
does not exist or a key that is an object. :func:`build_output` adds what an index build needs on top: the build
lock (:mod:`hxd2_ray.index_store.build_lock`), ``--overwrite`` (which never deletes an input inside the output),
and the removal of what a killed build left behind (``.building-*`` folders, ``.tmp-*`` staging files) — safe
because the lock says no other build is using them.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from hxd2_ray.config import S3Config
from hxd2_ray.errors import HxdError
from hxd2_ray.index_store.build_lock import LOCK_NAME, BuildLock, acquire_build_lock
from hxd2_ray.ingest.filesystems import resolve_filesystem
from hxd2_ray.ingest.listing import GLOB_CHARS

BUILDING_PREFIX = ".building-"
STAGING_TMP_PREFIX = ".tmp-"
MANIFEST_TMP_PREFIX = ".manifest-"


class OutputError(HxdError):
    """The output location cannot be used (a file, not writable, a missing bucket)."""


def open_output(uri: str, s3: S3Config) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) of an output folder, created if missing, after checking it can hold an index."""

    fs, root = resolve_filesystem(uri, s3)
    if isinstance(fs, pafs.LocalFileSystem):
        _open_local(root, uri)
    else:
        _check_object_store(fs, root, uri)
    return fs, root


def _open_local(path: str, uri: str) -> None:
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        where = "" if existing == path else f" ({existing}, on its path)"
        raise OutputError(
            f"the output {uri} cannot be a folder: {existing if where else 'it'} is a file{where}; "
            "choose another --output"
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output folder {path}: {exc.strerror or exc}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".hxd2-write-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write to the output folder {path}: {exc.strerror or exc}") from None


def _check_object_store(fs: pafs.FileSystem, root: str, uri: str) -> None:
    bucket = root.split("/", 1)[0]
    if not bucket:
        raise OutputError(f"the output {uri} names no bucket")
    try:
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise OutputError(f"the bucket of {uri} does not exist; create it first")
        if root != bucket and fs.get_file_info(root).type == pafs.FileType.File:
            raise OutputError(f"the output {uri} is an object, not a folder (prefix); choose another --output")
    except OSError as exc:
        raise OutputError(f"cannot reach the output {uri}: {str(exc)[:300]}") from None


def _same_or_inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_input_outside(input_uri: str, output_uri: str, s3: S3Config) -> None:
    """``--overwrite`` empties the output: refuse when the input lies inside it."""

    in_fs, in_path = resolve_filesystem(input_uri, s3)
    out_fs, out_path = resolve_filesystem(output_uri, s3)
    if type(in_fs) is not type(out_fs):
        return
    glob_at = GLOB_CHARS.search(in_path)
    if glob_at:
        in_path = in_path[: glob_at.start()].rsplit("/", 1)[0] or "/"
    if isinstance(in_fs, pafs.LocalFileSystem):
        in_path, out_path = os.path.realpath(in_path), os.path.realpath(out_path)
    if _same_or_inside(in_path, out_path):
        raise OutputError(
            f"--overwrite would delete the input {input_uri}, which is inside the output folder "
            f"{output_uri}; choose an output outside the input"
        )


def clear_output(fs: pafs.FileSystem, root: str, keep: tuple[str, ...] = (LOCK_NAME,)) -> None:
    """Delete what the output folder holds, except the names in ``keep`` (the lock this build holds)."""
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=False, allow_not_found=True)):
        if posixpath.basename(info.path) in keep:
            continue
        if info.type == pafs.FileType.Directory:
            fs.delete_dir(info.path)
        else:
            fs.delete_file(info.path)


def sweep_leftovers(fs: pafs.FileSystem, root: str) -> list[str]:
    """Remove what a killed build left: ``.building-*`` folders, ``.manifest-*`` temp files and ``.tmp-*`` staging
    files. Call it only while holding the build lock. Returns what was removed."""
    if not isinstance(fs, pafs.LocalFileSystem):
        return []  # S3 writes are single PUTs; the build folder of an S3 output is a local temp folder
    removed = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.startswith(BUILDING_PREFIX) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        elif name.startswith(MANIFEST_TMP_PREFIX) and name.endswith(".tmp"):
            os.unlink(path)
            removed.append(path)
    staging = os.path.join(root, "_staging")
    for folder, _, files in os.walk(staging):
        for name in files:
            if name.startswith(STAGING_TMP_PREFIX):
                os.unlink(os.path.join(folder, name))
                removed.append(os.path.join(folder, name))
    return removed


@dataclass
class BuildOutput:
    uri: str
    fs: pafs.FileSystem
    root: str
    lock: BuildLock
    swept: list[str] = field(default_factory=list)


@contextmanager
def build_output(
    uri: str,
    s3: S3Config,
    *,
    overwrite: bool = False,
    input_uri: str | None = None,
    command: str = "",
    keep_on_overwrite: tuple[str, ...] = (),
    **lock_options: Any,
) -> Iterator[BuildOutput]:
    """Open ``uri`` for an index build: checked, created, locked (released on exit), emptied with ``overwrite``
    (but for ``keep_on_overwrite``: the run's own open log folder) and swept of a killed build's leftovers."""
    if overwrite and input_uri is not None:
        check_input_outside(input_uri, uri, s3)
    fs, root = open_output(uri, s3)
    lock = acquire_build_lock(fs, root, uri, s3, command, **lock_options)
    try:
        if overwrite:
            clear_output(fs, root, keep=(LOCK_NAME, *keep_on_overwrite))
        yield BuildOutput(uri=uri, fs=fs, root=root, lock=lock, swept=sweep_leftovers(fs, root))
    finally:
        lock.release()
