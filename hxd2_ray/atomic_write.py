"""Writing a file so that a reader sees either the old content or the whole new one, never a part.

Locally: write a hidden temporary sibling, then rename it over the target (a rename within a folder is atomic).
On S3: write the object directly; an object appears only when its upload completes, so that is atomic already.
"""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


def write_atomic(fs: pafs.FileSystem, path: str, write: Callable[[str], object]) -> None:
    """``write(target)`` to ``path`` on ``fs`` (its parent folder made), atomically as above."""
    parent = posixpath.dirname(path)
    fs.create_dir(parent, recursive=True)
    if not isinstance(fs, pafs.LocalFileSystem):
        write(path)
        return
    tmp = posixpath.join(parent, f".tmp-{uuid.uuid4().hex}-{posixpath.basename(path)}")
    write(tmp)
    fs.move(tmp, path)


def write_table_atomic(fs: pafs.FileSystem, path: str, table: pa.Table) -> None:
    """``table`` as a Parquet file at ``path``."""
    write_atomic(fs, path, lambda target: pq.write_table(table, target, filesystem=fs))


def write_json_atomic(fs: pafs.FileSystem, path: str, payload: Any) -> None:
    """``payload`` as indented JSON with sorted keys at ``path``."""
    data = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False).encode()

    def write(target: str) -> None:
        with fs.open_output_stream(target) as out:
            out.write(data)

    write_atomic(fs, path, write)


def replace_local_file(path: Path, write: Callable[[str], object], *, durable: bool = False) -> None:
    """``write(tmp)`` to a temporary sibling of the local ``path``, then rename it over ``path``; the temporary
    file is removed if anything fails. ``durable``: flush it to disk before the rename (a manifest that says
    which generation is current must survive a power cut with the files it names)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        if durable:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
