"""Loop-NER over a batch of chunks on one LLM engine, persisting the batch's extractions before returning."""

from __future__ import annotations

import posixpath
import time

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig
from hxd2_ray.extraction.extractor import Extractor
from hxd2_ray.extraction.prompts import load_prompts
from hxd2_ray.llm.base import LLMClient
from hxd2_ray.progress import NO_COUNTER, CountingLLM, StageCounter
from hxd2_ray.stages.columns import chunks_from_table, extractions_to_table
from hxd2_ray.stages.faults import crash_point
from hxd2_ray.stages.stage_run import IndexingLLM, StageRun, current_node
from hxd2_ray.stages.staging import batch_file_name, write_table_atomic
from hxd2_ray.wiring import build_llm

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
        ("path", pa.string()),  # where the file was written, and by which node: the driver checks it reads it
        ("rows", pa.int64()),
        ("node", pa.string()),
        ("skipped", pa.int64()),  # chunks of a batch not started because the run's budget was spent
    ]
)


class ExtractAndPersist:
    """Runs :class:`Extractor` on each batch and writes ``extractions/part-<hash of chunk ids>.parquet``.

    Writing inside the stage (rather than after a shuffle) means every finished batch survives a crash; a
    rerun extracts only the chunks with no successful extraction on disk.
    """

    def __init__(
        self,
        cfg: HxdConfig,
        staging_fs: pafs.FileSystem,
        staging_root: str,
        llm: LLMClient | None = None,
        run: StageRun | None = None,
        counter: StageCounter = NO_COUNTER,
    ) -> None:
        self._fs = staging_fs
        self._folder = posixpath.join(staging_root, "extractions")
        self._run = run or StageRun()
        # Progress counts the backend's calls and tokens as each round returns (below the cache: a hit costs none);
        # chunks when the batch is persisted.
        backend = llm if llm is not None else build_llm(cfg.llm)
        self._llm = IndexingLLM(CountingLLM(backend, counter), self._run)
        self._counter = counter
        self._gpus = cfg.ray.gpus_per_ner_actor
        self._extractor = Extractor(
            self._llm.client, cfg.extraction, load_prompts(), max_retries=cfg.ray.max_batch_retries
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        if self._run.exhausted():
            self._run.skipped()
            row = {
                "file": "",
                "chunks": 0,
                "entities": 0,
                "relations": 0,
                "malformed_records": 0,
                "failed_chunks": 0,
                "llm_calls": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "seconds": 0.0,
                "path": "",
                "rows": 0,
                "node": current_node(),
                "skipped": batch.num_rows,
            }
            return pa.Table.from_pylist([row], schema=EXTRACT_STATS)
        chunks = chunks_from_table(batch)
        extractions = self._extractor.extract(chunks)
        table = extractions_to_table(extractions)
        name = batch_file_name(c.id for c in chunks)
        path = posixpath.join(self._folder, name)
        crash_point("worker:extract")  # crash tests: a worker dies with its batch in flight
        write_table_atomic(self._fs, path, table)
        self._run.charge(self._llm.payload(self._gpus))
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
            "path": path,
            "rows": table.num_rows,
            "node": current_node(),
            "skipped": 0,
        }
        self._counter.add(done=row["chunks"], malformed=row["malformed_records"], failed=row["failed_chunks"])
        return pa.Table.from_pylist([row], schema=EXTRACT_STATS)
