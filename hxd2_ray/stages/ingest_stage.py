"""Parse raw files into documents (or quarantine records) and chunk them, one batch of files at a time."""

from __future__ import annotations

import pyarrow as pa

from hxd2_ray.chunking.splitter import split_document
from hxd2_ray.config import HxdConfig
from hxd2_ray.ingest.sources import read_documents
from hxd2_ray.stages.columns import parsed_rows
from hxd2_ray.types import QuarantinedFile


class ParseAndChunk:
    """Input columns ``path`` and ``bytes`` (Ray's ``read_binary_files``); output: :data:`columns.PARSED`."""

    def __init__(self, cfg: HxdConfig) -> None:
        self._cfg = cfg

    def __call__(self, batch: pa.Table) -> pa.Table:
        paths = batch.column("path").to_pylist()
        blobs = batch.column("bytes").to_pylist()
        docs, quarantined = [], []
        for path, data in zip(paths, blobs, strict=True):
            try:
                file_docs, file_quarantine = read_documents(path, data, self._cfg.ingest)
            except Exception as exc:  # noqa: BLE001 - a reader bug must cost one file, never the job
                file_docs, file_quarantine = [], [QuarantinedFile(path, "unreadable", f"{type(exc).__name__}: {exc}")]
            quarantined.extend(file_quarantine)
            for doc in file_docs:
                chunks = split_document(doc, self._cfg.chunking)
                if not chunks:
                    quarantined.append(QuarantinedFile(path, "no_chunks", f"document {doc.source_id} has no text"))
                    continue
                docs.append((doc, chunks))
        return parsed_rows(docs, quarantined)
