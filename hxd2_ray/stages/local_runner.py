"""The index build's stages in this process (:class:`InProcessRunner`), and what every runner shares
(:class:`RunnerBase`): the run's LLM cache, the checks of the files the stages report, the cache's compaction.

The in-process runner calls the very stage classes the Ray Data runner (:mod:`hxd2_ray.stages.ray_runner`) maps,
in the same batches, so a small corpus or a test builds the same index without Ray.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig, llm_model_id
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.cluster_storage import ReportedFile, check_reported_files
from hxd2_ray.ingest.sources import resolve_filesystem
from hxd2_ray.llm.cache import ResponseStore
from hxd2_ray.stages.cost import UsageLedger
from hxd2_ray.stages.embed_stage import EmbedAndPersist
from hxd2_ray.stages.extract_stage import ExtractAndPersist
from hxd2_ray.stages.ingest_stage import ParseAndChunk
from hxd2_ray.stages.merge_stage import (
    MERGED_ENTITIES,
    MERGED_RELATIONS,
    ExplodeEntityMentions,
    ExplodeRelationMentions,
    MergeEntityGroups,
    MergeRelationGroups,
    SummarizeLongDescriptions,
)
from hxd2_ray.stages.runner import InputListing, MergeResult, RunContext, cache_location
from hxd2_ray.stages.stage_run import Ledger, StageRun

# Files parsed per call of the ingest stage (the batch size of Ray Data's map over the files).
PARSE_BATCH_FILES = 32


def blocks(table: pa.Table, rows_per_block: int) -> list[pa.Table]:
    """``table`` cut into batches of ``rows_per_block`` rows (one empty batch for an empty table)."""
    rows_per_block = max(1, rows_per_block)
    return [table.slice(i, rows_per_block) for i in range(0, table.num_rows, rows_per_block)] or [table]


def concat(parts: list[pa.Table]) -> pa.Table:
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return pa.table({})
    return pa.concat_tables(parts, promote_options="permissive")


def with_scheme(batch: pa.Table, scheme: str) -> pa.Table:
    """Paths in a filesystem back in the form the user gave (``s3://bucket/key``): documents keep that URI."""
    if not scheme:
        return batch
    paths = pa.array([scheme + p for p in batch.column("path").to_pylist()], pa.string())
    return batch.set_column(batch.schema.get_field_index("path"), "path", paths)


def scheme_of(fs: pafs.FileSystem) -> str:
    return "s3://" if isinstance(fs, pafs.S3FileSystem) else ""


def merge_in_process(cfg: HxdConfig, ok: pa.Table) -> MergeResult:
    """The merge with one partition holding every key: the explode and merge functions called here give the rows
    the distributed merge gives."""
    relation_mention_rows = ExplodeRelationMentions(cfg)(ok)
    merged_entities = tables.conform(MergeEntityGroups(cfg)(ExplodeEntityMentions(cfg)(ok)), MERGED_ENTITIES)
    merged_relations = tables.conform(MergeRelationGroups(cfg)(relation_mention_rows), MERGED_RELATIONS)
    return MergeResult(merged_entities, merged_relations, relation_mention_rows, "in the driver")


class RunnerBase:
    """What every runner keeps for its run: the :class:`StageRun` its stages get (LLM cache, prompt version,
    ledger), and the checks of the files they report."""

    def __init__(self, run: RunContext, ledger: Ledger) -> None:
        self.run = run
        self.cfg = run.cfg
        self.fs = run.fs
        self.staging = run.staging
        self.output_uri = run.output_uri
        self.hooks = run.hooks
        self.cache = cache_location(run.cfg, run.fs, run.root)
        self.stage_run = StageRun(cache=self.cache, prompt_version=run.prompt_version, ledger=ledger)
        self.nodes_checked = 0
        self.files_checked = 0
        self.writer_nodes: set[str] = set()  # nodes whose workers wrote the files checked

    def check_reported(self, stats: pa.Table, stage: str) -> None:
        """Every file the stage's workers reported must be readable here with the rows they reported."""
        if not stats.num_rows or "path" not in stats.column_names:
            return
        reported = [
            ReportedFile(p, int(r), n)
            for p, r, n in zip(
                stats.column("path").to_pylist(),
                stats.column("rows").to_pylist(),
                stats.column("node").to_pylist(),
                strict=True,
            )
            if p
        ]
        self.files_checked += check_reported_files(self.fs, reported, stage, self.output_uri)
        self.writer_nodes.update(r.node for r in reported if r.node)

    def cache_summary(self) -> dict[str, Any]:
        if self.cache is None:
            return {"enabled": False}
        return {"enabled": True, "location": self.cache.folder}

    def compact_cache(self) -> int:
        """Fold the cache's many small parts (one per batch) once a run is over."""
        if self.cache is None:
            return 0
        return ResponseStore(self.cache, llm_model_id(self.cfg.llm)).compact()


class InProcessRunner(RunnerBase):
    """Every stage in this process, one batch after the other; the usage ledger is a plain object."""

    def __init__(self, run: RunContext) -> None:
        self.ledger = UsageLedger(run.cfg.cost, run.options.budget_tokens, run.options.budget_usd)
        super().__init__(run, self.ledger)

    def parse(self, listing: InputListing) -> pa.Table:
        paths = [resolve_filesystem(u, self.cfg.s3)[1] for u in listing.readable]
        scheme = scheme_of(listing.fs)
        counter = self.hooks.counter("ingest", unit="files", total=len(paths))
        stage = ParseAndChunk(self.cfg)
        parts = []
        for i in range(0, len(paths), PARSE_BATCH_FILES):
            batch_paths = paths[i : i + PARSE_BATCH_FILES]
            blobs = []
            for path in batch_paths:
                with listing.fs.open_input_stream(path) as f:
                    blobs.append(f.read())
            batch = pa.table({"bytes": pa.array(blobs, pa.binary()), "path": pa.array(batch_paths, pa.string())})
            parts.append(stage(with_scheme(batch, scheme)))
            counter.add(done=batch.num_rows)
        return concat(parts)

    def extract(self, pending: pa.Table) -> pa.Table:
        batch = self.cfg.ray.ner_batch_size
        counter = self.hooks.counter("extract", unit="chunks", total=pending.num_rows)
        stage = ExtractAndPersist(self.cfg, self.fs, self.staging, run=self.stage_run, counter=counter)
        return concat([stage(b) for b in blocks(pending.drop_columns(["shard"]), batch)])

    def merge(self, ok: pa.Table) -> MergeResult:
        return merge_in_process(self.cfg, ok)

    def summarize(self, long_rows: pa.Table, schema: pa.Schema) -> pa.Table:
        counter = self.hooks.counter("merge")
        stage = SummarizeLongDescriptions(self.cfg, run=self.stage_run, counter=counter)
        return concat([stage(b) for b in blocks(long_rows, self.cfg.ray.ner_batch_size)])

    def embed(self, pending: pa.Table) -> pa.Table:
        counter = self.hooks.counter("embed", unit="texts", total=pending.num_rows)
        stage = EmbedAndPersist(self.cfg, self.fs, self.staging, run=self.stage_run, counter=counter)
        return concat([stage(b) for b in blocks(pending, self.cfg.ray.embed_batch_size)])

    def totals(self) -> dict[str, Any]:
        return self.ledger.totals()

    def exhausted(self) -> str:
        return self.ledger.exhausted()

    def check_nodes(self, staging: str, input_fs: pafs.FileSystem | None, input_paths: list[str]) -> None:
        return None  # one process: one node

    def close(self) -> None:
        return None
