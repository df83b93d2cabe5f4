"""Texts to embed per vector family, and the stage that embeds and persists them."""

from __future__ import annotations

import posixpath
import time

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig
from hxd2_ray.indexing import tables
from hxd2_ray.indexing.faults import crash_point
from hxd2_ray.progress import NO_COUNTER, StageCounter
from hxd2_ray.stages.staging import batch_file_name, write_table_atomic
from hxd2_ray.types import vector_id

EMBED_INPUTS = pa.schema([("family", pa.string()), ("key", pa.string()), ("text", pa.string())])
EMBED_STATS = pa.schema([("file", pa.string()), ("vectors", pa.int64()), ("failed", pa.int64()),
                         ("error", pa.string()), ("chars", pa.int64()), ("seconds", pa.float64())])


def relation_key(source_key: str, target_key: str) -> str:
    return f"{source_key}\x1f{target_key}"


def embedding_inputs(entities: pa.Table, relations: pa.Table, chunks: pa.Table) -> pa.Table:
    """The five families: entity name, name+description, relation keywords, keywords+endpoints+description, chunk."""
    ent = entities.select(["key", "name", "description"]).to_pylist()
    names = {e["key"]: e["name"] for e in ent}
    rel = relations.select(["source_key", "target_key", "keywords", "description"]).to_pylist()
    family, key, text = [], [], []

    def add(fam: str, k: str, t: str) -> None:
        family.append(fam)
        key.append(k)
        text.append(t)

    for e in ent:
        add("entity_name", e["key"], e["name"])
        add("entity_mix", e["key"], f"{e['name']}: {e['description']}" if e["description"] else e["name"])
    for r in rel:
        k = relation_key(r["source_key"], r["target_key"])
        keywords = ", ".join(r["keywords"] or ())
        src, tgt = names.get(r["source_key"], r["source_key"]), names.get(r["target_key"], r["target_key"])
        add("relation_keywords", k, keywords or f"{src} {tgt}")
        add("relation_mix", k, f"{keywords}\n{src} - {tgt}\n{r['description']}".strip())
    for cid, ctext in zip(chunks.column("id").to_pylist(), chunks.column("text").to_pylist(), strict=True):
        add("chunk", cid, ctext)
    return pa.table({"family": family, "key": key, "text": text}, schema=EMBED_INPUTS)


class EmbedAndPersist:
    """Embeds a batch and writes ``embeddings/part-<hash>.parquet`` (family, key, vector_id, vector)."""

    def __init__(self, cfg: HxdConfig, staging_fs: pafs.FileSystem, staging_root: str, embedder=None,
                 counter: StageCounter = NO_COUNTER) -> None:
        from hxd2_ray.wiring import build_embedder

        self._max_retries = cfg.ray.max_batch_retries
        self._fs = staging_fs
        self._folder = posixpath.join(staging_root, "embeddings")
        self._embedder = embedder if embedder is not None else build_embedder(cfg.embedding)
        self._counter = counter

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        families = batch.column("family").to_pylist()
        keys = batch.column("key").to_pylist()
        texts = batch.column("text").to_pylist()
        error = ""
        for _attempt in range(self._max_retries + 1):
            try:
                vectors = np.ascontiguousarray(self._embedder.embed(texts), dtype=np.float32)
                if vectors.shape != (len(texts), self._embedder.dim):
                    raise ValueError(f"embedder returned {vectors.shape}, expected ({len(texts)}, {self._embedder.dim})")
                break
            except Exception as exc:  # recorded below; the rerun embeds what is missing
                error = f"{type(exc).__name__}: {exc}"
        else:
            row = {"file": "", "vectors": 0, "failed": len(keys), "error": error, "chars": sum(map(len, texts)),
                   "seconds": time.perf_counter() - started}
            self._counter.add(failed=len(keys))
            return pa.Table.from_pylist([row], schema=EMBED_STATS)
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        offsets = pa.array(np.arange(0, vectors.size + 1, vectors.shape[1], dtype=np.int32))
        table = pa.table(
            {
                "family": families,
                "key": keys,
                "vector_id": pa.array([vector_id(k) for k in keys], type=pa.int64()),
                "vector": pa.ListArray.from_arrays(offsets, flat),
            },
            schema=tables.EMBEDDINGS,
        )
        name = batch_file_name(f"{f}\x1f{k}" for f, k in zip(families, keys, strict=True))
        crash_point("worker:embed")  # crash tests: a worker dies with its batch in flight
        write_table_atomic(self._fs, posixpath.join(self._folder, name), table)
        crash_point("driver:embed")  # crash tests: the driver dies with the stage half done
        row = {"file": name, "vectors": len(keys), "failed": 0, "error": "", "chars": sum(map(len, texts)),
               "seconds": time.perf_counter() - started}
        self._counter.add(done=len(keys))
        return pa.Table.from_pylist([row], schema=EMBED_STATS)
