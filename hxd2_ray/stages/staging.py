"""Staging files of an index build on a pyarrow filesystem (local or S3): atomic, content-named, resumable.

A batch is written under a name derived from its row keys, so rerunning a batch writes the same file, and
a file is either complete or absent (local: temp + rename; S3: one PUT). Readers skip files that a crash
left unreadable and report them.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hxd2_ray.atomic_write import write_json_atomic as write_json_atomic
from hxd2_ray.atomic_write import write_table_atomic as write_table_atomic


def batch_file_name(keys: Iterable[str], prefix: str = "part") -> str:
    h = hashlib.sha256()
    for key in sorted(keys):
        h.update(key.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return f"{prefix}-{h.hexdigest()[:20]}.parquet"


def read_json(fs: pafs.FileSystem, path: str) -> Any | None:
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as src:
        return json.loads(src.read().decode())


def exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def list_parquet(fs: pafs.FileSystem, folder: str) -> list[str]:
    info = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    return sorted(
        i.path
        for i in info
        if i.type == pafs.FileType.File
        and i.path.endswith(".parquet")
        and not posixpath.basename(i.path).startswith((".tmp-", "."))
    )


@dataclass
class StagedRead:
    table: pa.Table
    files: list[str]
    unreadable: list[str] = field(default_factory=list)


def read_staged(fs: pafs.FileSystem, folder: str, schema: pa.Schema, columns: list[str] | None = None) -> StagedRead:
    files = list_parquet(fs, folder)
    tables, good, bad = [], [], []
    for path in files:
        try:
            tables.append(pq.read_table(path, filesystem=fs, columns=columns, schema=schema))
            good.append(path)
        except (OSError, pa.ArrowInvalid):
            bad.append(path)
    target = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    table = pa.concat_tables(tables) if tables else target.empty_table()
    return StagedRead(table=table, files=good, unreadable=bad)


def remove_files(fs: pafs.FileSystem, paths: Iterable[str]) -> None:
    for path in paths:
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass


def fingerprint_of(items: Iterable[str]) -> str:
    h = hashlib.sha256()
    for item in items:
        h.update(item.encode())
        h.update(b"\n")
    return h.hexdigest()[:20]
