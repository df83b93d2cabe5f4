"""Texts to embed per vector family, and the stage that embeds and persists them, keyed by the text itself.

A vector is stored under the sha256 of the text it embeds (:func:`text_key`), never under the entity or relation it
was made for: when a description changes, its new text has a new key and is embedded again, while the old vector
stays with the old text (and a text shared by several keys or families is embedded once).
"""

from __future__ import annotations

import posixpath
import time
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig, embedding_model_id
from hxd2_ray.embedding.base import Embedder
from hxd2_ray.graph_assembly.embedding_texts import (
    EMBED_INPUTS,
    TEXT_VECTORS_FOLDER,
    TEXTS_TO_EMBED,
    TOKENS_PER_WORD_ESTIMATE,
    embedding_inputs,
    relation_key,
    text_key,
)
from hxd2_ray.index_store import tables
from hxd2_ray.progress import NO_COUNTER, StageCounter
from hxd2_ray.stages.cost import embedding_payload
from hxd2_ray.stages.faults import crash_point
from hxd2_ray.stages.stage_run import StageRun, current_node
from hxd2_ray.stages.staging import batch_file_name, write_table_atomic
from hxd2_ray.wiring import build_embedder

__all__ = [
    "EMBED_INPUTS",
    "EMBED_STATS",
    "TEXTS_TO_EMBED",
    "TEXT_VECTORS_FOLDER",
    "EmbedAndPersist",
    "count_embedding_tokens",
    "embedding_inputs",
    "relation_key",
    "text_key",
]

EMBED_STATS = pa.schema(
    [
        ("file", pa.string()),
        ("vectors", pa.int64()),
        ("failed", pa.int64()),
        ("error", pa.string()),
        ("chars", pa.int64()),
        ("seconds", pa.float64()),
        ("path", pa.string()),
        ("rows", pa.int64()),
        ("node", pa.string()),
        ("tokens", pa.int64()),
        ("skipped", pa.int64()),
    ]
)


def count_embedding_tokens(embedder: Any, texts: Sequence[str]) -> int:
    """Tokens of ``texts`` under the embedder's tokenizer, or a words-based estimate when it has none."""
    count = getattr(embedder, "count_tokens", None)
    if callable(count):
        return int(count(texts))
    return int(sum(len(t.split()) for t in texts) * TOKENS_PER_WORD_ESTIMATE + 0.5)


class EmbedAndPersist:
    """Embeds a batch of distinct texts (``text_key``, ``text``) and writes ``text_vectors/part-<hash>.parquet``
    (``text_key``, ``vector``); returns one stats row naming the file, its rows and the node that wrote it."""

    def __init__(
        self,
        cfg: HxdConfig,
        staging_fs: pafs.FileSystem,
        staging_root: str,
        embedder: Embedder | None = None,
        run: StageRun | None = None,
        counter: StageCounter = NO_COUNTER,
    ) -> None:
        self._max_retries = cfg.ray.max_batch_retries
        self._fs = staging_fs
        self._folder = posixpath.join(staging_root, TEXT_VECTORS_FOLDER)
        self._embedder = embedder if embedder is not None else build_embedder(cfg.embedding)
        self._run = run or StageRun()
        self._counter = counter
        self._model_id = embedding_model_id(cfg.embedding)
        self._gpus = cfg.ray.gpus_per_embed_actor

    def _stats(self, **values: Any) -> pa.Table:
        row = {
            "file": "",
            "vectors": 0,
            "failed": 0,
            "error": "",
            "chars": 0,
            "seconds": 0.0,
            "path": "",
            "rows": 0,
            "node": current_node(),
            "tokens": 0,
            "skipped": 0,
            **values,
        }
        return pa.Table.from_pylist([row], schema=EMBED_STATS)

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        if self._run.exhausted():
            self._run.skipped()
            return self._stats(skipped=batch.num_rows)
        keys = batch.column("text_key").to_pylist()
        texts = batch.column("text").to_pylist()
        error = ""
        for _attempt in range(self._max_retries + 1):
            try:
                vectors = np.ascontiguousarray(self._embedder.embed(texts), dtype=np.float32)
                if vectors.shape != (len(texts), self._embedder.dim):
                    raise ValueError(
                        f"embedder returned {vectors.shape}, expected ({len(texts)}, {self._embedder.dim})"
                    )
                break
            except Exception as exc:  # noqa: BLE001 - recorded below; the rerun embeds what is missing
                error = f"{type(exc).__name__}: {exc}"
        else:
            self._counter.add(failed=len(keys))
            return self._stats(
                failed=len(keys), error=error, chars=sum(map(len, texts)), seconds=time.perf_counter() - started
            )
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        offsets = pa.array(np.arange(0, vectors.size + 1, vectors.shape[1], dtype=np.int32))
        table = pa.table(
            {"text_key": keys, "vector": pa.ListArray.from_arrays(offsets, flat)}, schema=tables.TEXT_VECTORS
        )
        name = batch_file_name(keys)
        path = posixpath.join(self._folder, name)
        crash_point("worker:embed")  # crash tests: a worker dies with its batch in flight
        write_table_atomic(self._fs, path, table)
        seconds = time.perf_counter() - started
        tokens = count_embedding_tokens(self._embedder, texts)
        self._run.charge(embedding_payload(self._model_id, len(texts), tokens, seconds, self._gpus))
        crash_point("driver:embed")  # crash tests: the driver dies with the stage half done
        self._counter.add(done=len(keys))
        return self._stats(
            file=name,
            vectors=len(keys),
            chars=sum(map(len, texts)),
            seconds=seconds,
            path=path,
            rows=table.num_rows,
            tokens=tokens,
        )
