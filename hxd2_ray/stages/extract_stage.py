"""Loop-NER over a batch of chunks on one LLM engine, persisting the batch's extractions before returning."""

from __future__ import annotations

import posixpath
import time

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig
from hxd2_ray.indexing.faults import crash_point
from hxd2_ray.progress import NO_COUNTER, CountingLLM, StageCounter
from hxd2_ray.stages.columns import chunks_from_table, extractions_to_table
from hxd2_ray.stages.staging import batch_file_name, write_table_atomic

EXTRACT_STATS = pa.schema(
    [
        ("file", pa.string()),
        ("chunks", pa.int64()),
        ("entities", pa.int64()),
        ("relations", pa.int64()),
        ("malformed_records", pa.int64()),
        ("failed_chunks", pa.int64()),
        ("llm_calls", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("seconds", pa.float64()),
    ]
)


class ExtractAndPersist:
    """Runs :class:`Extractor` on each batch and writes ``extractions/part-<hash of chunk ids>.parquet``.

    Writing inside the stage (rather than after a shuffle) means every finished batch survives a crash; a
    rerun extracts only the chunks with no successful extraction on disk.
    """

    def __init__(self, cfg: HxdConfig, staging_fs: pafs.FileSystem, staging_root: str, llm=None,
                 counter: StageCounter = NO_COUNTER) -> None:
        from hxd2_ray.extraction.extractor import Extractor
        from hxd2_ray.extraction.prompts import load_prompts
        from hxd2_ray.wiring import build_llm

        self._fs = staging_fs
        self._folder = posixpath.join(staging_root, "extractions")
        self._llm = llm if llm is not None else build_llm(cfg.llm)
        self._counter = counter  # LLM calls and tokens as each round returns; chunks when the batch is persisted
        self._extractor = Extractor(CountingLLM(self._llm, counter), cfg.extraction, load_prompts(), max_retries=cfg.ray.max_batch_retries)

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        chunks = chunks_from_table(batch)
        extractions = self._extractor.extract(chunks)
        table = extractions_to_table(extractions)
        name = batch_file_name(c.id for c in chunks)
        crash_point("worker:extract")  # crash tests: a worker dies with its batch in flight
        write_table_atomic(self._fs, posixpath.join(self._folder, name), table)
        crash_point("driver:extract")  # crash tests: the driver dies with the stage half done
        row = {
            "file": name,
            "chunks": len(extractions),
            "entities": sum(len(e.entities) for e in extractions),
            "relations": sum(len(e.relations) for e in extractions),
            "malformed_records": sum(e.malformed_records for e in extractions),
            "failed_chunks": sum(bool(e.error) for e in extractions),
            "llm_calls": sum(e.llm_calls for e in extractions),
            "prompt_tokens": sum(e.prompt_tokens for e in extractions),
            "completion_tokens": sum(e.completion_tokens for e in extractions),
            "seconds": time.perf_counter() - started,
        }
        self._counter.add(done=row["chunks"], malformed=row["malformed_records"], failed=row["failed_chunks"])
        return pa.Table.from_pylist([row], schema=EXTRACT_STATS)
