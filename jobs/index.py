"""Indexing job: corpus -> chunks -> loop-NER -> global merge -> embeddings -> Kùzu graph + sharded Faiss.

Run locally (starts a local Ray):   python -m jobs.index --config configs/local.yaml --input DIR --output DIR
On a cluster:  ray job submit --working-dir . -- python -m jobs.index --config configs/gpu.yaml --input s3://…

Every stage persists its results under ``<output>/_staging`` before the next starts, so a rerun after a
crash skips finished work: ingest and merge by input fingerprint, extraction and embedding per row.
``manifest.json`` is written last; an output without it is never taken for a complete index.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig, embedding_model_id, llm_model_id, load_config, synonym_factors
from hxd2_ray.errors import BudgetReached, EmptyCorpusError, HxdError
from hxd2_ray.indexing import tables
from hxd2_ray.indexing.faults import crash_point, worker_env
from hxd2_ray.stages import staging as st
from jobs import telemetry
from jobs.index_run import RunOptions, RunServices

if TYPE_CHECKING:
    from hxd2_ray.indexing.corpus import ParsedCorpus
    from hxd2_ray.indexing.disk_space import WriteSeam
    from hxd2_ray.indexing.generations import CorpusState
    from hxd2_ray.indexing.manifest import IndexManifest
    from hxd2_ray.indexing.output import BuildOutput
    from hxd2_ray.ingest.sources import InputSelection

STAGES = ("ingest", "extract", "merge", "embed", "write")


def _log(msg: str) -> None:
    print(f"[hxd2 index] {msg}", file=sys.stderr, flush=True)


def _say(msg: str) -> None:
    """A line the user must see on the terminal, also when Ray's lines go to the log file: what a crash or a killed
    build left and this run repaired (a lock taken over, a leftover folder removed)."""
    from jobs import progress

    board = progress.current()
    if isinstance(board, progress.NullBoard):
        _log(msg)
    else:
        board.note(msg)


class StageClock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.status: dict[str, str] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        _log(f"stage {name} …")
        started = time.perf_counter()
        with telemetry.stage("index", name, status=lambda: self.status.get(name, "ran")):
            yield
        self.seconds[name] = round(time.perf_counter() - started, 3)
        _log(f"stage {name} done in {self.seconds[name]:.1f}s ({self.status.get(name, 'ran')})")


def init_ray(cfg: HxdConfig) -> None:
    import ray

    if not ray.is_initialized():
        _start_ray(cfg)
    import ray.data

    # Datasets made from here on take this driver's context.
    ray.data.DataContext.get_current().execution_no_progress_timeout_s = cfg.ray.stall_timeout_s or -1


def _start_ray(cfg: HxdConfig) -> None:
    import ray

    env_vars = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Engine logs belong on stderr: stdout carries the --json summary.
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    }
    for name in (
        "HXD2_MODELS_DIR",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_DEFAULT_REGION",
        "VLLM_CPU_KVCACHE_SPACE",
    ):
        if os.environ.get(name):
            env_vars[name] = os.environ[name]
    env_vars.update(worker_env())  # crash tests: the armed fault points reach the workers
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, runtime_env={"env_vars": env_vars}, log_to_driver=True)
        return
    # "local": a new Ray of this process, even when a `ray start` cluster runs on this machine (joining one is
    # explicit: ray.address or RAY_ADDRESS).
    kwargs: dict[str, Any] = {"address": "local", "include_dashboard": False, "runtime_env": {"env_vars": env_vars}}
    if cfg.ray.num_cpus is not None:
        kwargs["num_cpus"] = cfg.ray.num_cpus
    if cfg.ray.object_store_mb is not None:
        kwargs["object_store_memory"] = cfg.ray.object_store_mb * 1024 * 1024
    ray.init(**kwargs)


def _collect(ds: Any) -> pa.Table:
    import ray

    blocks = [b for b in ray.get(ds.to_arrow_refs()) if b.num_rows]
    if not blocks:
        return pa.table({})
    return pa.concat_tables(blocks, promote_options="permissive")


def _blocks(table: pa.Table, rows_per_block: int) -> list[pa.Table]:
    rows_per_block = max(1, rows_per_block)
    return [table.slice(i, rows_per_block) for i in range(0, table.num_rows, rows_per_block)] or [table]


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    if table.num_rows == 0:
        return schema.empty_table()
    return table.select(schema.names).cast(schema)


def _parse_with(batch: pa.Table, cfg: HxdConfig, scheme: str, counter: Any = None) -> pa.Table:
    from hxd2_ray.stages.ingest_stage import ParseAndChunk

    if scheme:
        paths = pa.array([scheme + p for p in batch.column("path").to_pylist()], pa.string())
        batch = batch.set_column(batch.schema.get_field_index("path"), "path", paths)
    parsed = ParseAndChunk(cfg)(batch)
    if counter is not None:
        counter.add(done=batch.num_rows)
    return parsed


@dataclass(frozen=True)
class InputListing:
    files: list[str]  # in the input's form (s3://bucket/key or an absolute path)
    fs: pafs.FileSystem
    paths: list[str]  # in-filesystem paths
    fingerprint: str  # paths, sizes, modification times, and what the walk rejected
    prechecked: list[Any]  # quarantined from the listing alone (too large, unsupported, unreachable)
    readable: list[str]


class IndexBuild:
    """One run of the indexing job over ``input_uri`` into ``output_uri``."""

    def __init__(
        self,
        cfg: HxdConfig,
        input_uri: str,
        output_uri: str,
        options: RunOptions | None = None,
        output: BuildOutput | None = None,
        inputs: InputSelection | None = None,
    ) -> None:
        """``output``: the :class:`BuildOutput` (opened and locked) of :func:`run_index`; ``inputs``: its
        :class:`InputSelection` of ``input_uri``. Without them the output is opened here and the input walked in
        :meth:`list_input`."""
        from hxd2_ray.extraction.prompts import load_prompts
        from hxd2_ray.ingest.sources import open_output_filesystem

        self.cfg = cfg
        self.input_uri = input_uri
        self.output_uri = output_uri
        self.options = options or RunOptions()
        self.output = output
        self.inputs = inputs
        opened: tuple[pafs.FileSystem, str] = (
            (output.fs, output.root) if output is not None else open_output_filesystem(output_uri, cfg.s3)
        )
        self.fs, self.root = opened
        self.staging = posixpath.join(self.root, "_staging")
        self.prompts = load_prompts()
        self.fingerprint = cfg.index_fingerprint(self.prompts.version_hash)
        # What the staged rows depend on: synonym settings shape only the write stage, so changing them reuses
        # the extraction (and an index built before synonym edges existed can be rebuilt from its staging).
        self.staging_fingerprint = cfg.staging_fingerprint(self.prompts.version_hash)
        self.clock = StageClock()
        self.counters: Counter[str] = Counter()
        self.files: dict[str, dict[str, Any]] = {}  # sizes and sha256 of the written generation's files
        self.refusal: dict[str, Any] | None = None  # the refusal calibration of the write stage
        self.write_seam: WriteSeam | None = None  # the write stage's, with its estimate of the space needed
        self.services: RunServices  # started by run(), once Ray is up
        self.generation = ""  # the generation this run writes
        self.sources = tables.SOURCES.empty_table()
        self.stop: dict[str, Any] = {}  # where a budget stopped the run
        # Entities whose per-entity derived data (synonym edges, ...) the write stage must redo; None: all of them.
        self.changed_entity_keys: set[str] | None = None

    # ------------------------------------------------------------------ helpers

    def _stage_path(self, *parts: str) -> str:
        return posixpath.join(self.staging, *parts)

    def _marker(self, stage: str) -> dict[str, Any] | None:
        return st.read_json(self.fs, self._stage_path("_stages", f"{stage}.json"))

    def _mark(self, stage: str, payload: dict[str, Any]) -> None:
        st.write_json_atomic(self.fs, self._stage_path("_stages", f"{stage}.json"), payload)

    def check_lock(self) -> None:
        if self.output is not None:
            self.output.lock.check_held()  # an S3 lock taken over by another build: stop before publishing

    def _check_staging_fingerprint(self) -> None:
        build = st.read_json(self.fs, self._stage_path("build.json"))
        if build is None:
            st.write_json_atomic(self.fs, self._stage_path("build.json"), {"fingerprint": self.staging_fingerprint})
        elif build.get("fingerprint") != self.staging_fingerprint:
            raise HxdError(
                f"{self.output_uri} holds a partial build made with another configuration (fingerprint "
                f"{build.get('fingerprint')}, this run {self.staging_fingerprint}); use a new --output or --overwrite"
            )

    # ------------------------------------------------------------------ stages

    def list_input(self, input_uri: str) -> InputListing:
        from hxd2_ray.ingest.sources import resolve_filesystem, select_inputs

        # Walked by real path, the output never entered; oversized, unsupported and unreachable files are
        # quarantined from the listing alone, so Ray never fetches them.
        selection = (
            self.inputs
            if self.inputs is not None and input_uri == self.input_uri
            else select_inputs(input_uri, self.cfg.ingest, self.cfg.s3, exclude=(self.output_uri,))
        )
        in_fs, _ = resolve_filesystem(selection.readable[0], self.cfg.s3)
        paths = [resolve_filesystem(f, self.cfg.s3)[1] for f in selection.readable]
        input_fp = st.fingerprint_of(
            [f"{i.path}|{i.size}|{i.mtime_ns}" for i in selection.infos]
            + [f"{q.source_path}|{q.reason}" for q in selection.rejected]
        )
        return InputListing(selection.files, in_fs, paths, input_fp, list(selection.rejected), selection.readable)

    def read_input(self, listing: InputListing) -> ParsedCorpus:
        """Parse the listed files on Ray: their documents, quarantined files and chunks."""
        import ray

        from hxd2_ray.indexing.corpus import corpus_from_parsed
        from hxd2_ray.ingest.sources import resolve_filesystem
        from hxd2_ray.stages.columns import PARSED, parsed_rows

        in_fs, readable = listing.fs, listing.readable
        parts = [parsed_rows([], listing.prechecked)]
        if readable:
            ds = ray.data.read_binary_files(
                [resolve_filesystem(u, self.cfg.s3)[1] for u in readable], include_paths=True, filesystem=in_fs
            )
            # Ray hands back in-filesystem paths; documents keep the URI the user gave (s3://bucket/key).
            fn_kwargs = {
                "cfg": self.cfg,
                "scheme": "s3://" if isinstance(in_fs, pafs.S3FileSystem) else "",
                "counter": telemetry.for_job("index").counter("ingest", unit="files", total=len(readable)),
            }
            parts.append(
                _collect(ds.map_batches(_parse_with, fn_kwargs=fn_kwargs, batch_format="pyarrow", batch_size=32))
            )
        parsed = pa.concat_tables([_conform(p, PARSED) for p in parts])
        # The same text in two files is one document (its id is the content hash): sources keep both, the
        # documents table the first in path order (hxd2_ray.indexing.corpus).
        return corpus_from_parsed(parsed, self.cfg.ray.extraction_shards, paths=listing.files)

    def ingest(self, listing: InputListing) -> tuple[pa.Table, pa.Table, pa.Table]:
        from hxd2_ray.indexing.corpus import derive_documents, sources_from_documents

        marker = self._marker("ingest")
        if marker and marker.get("input") == listing.fingerprint:
            self.clock.status["ingest"] = "skipped: finished earlier"
            docs = st.read_staged(self.fs, self._stage_path("documents"), tables.DOCUMENTS).table
            quarantine = st.read_staged(self.fs, self._stage_path("quarantine"), tables.QUARANTINE).table
            chunks = st.read_staged(self.fs, self._stage_path("chunks"), tables.CHUNKS).table
            self.sources = st.read_staged(self.fs, self._stage_path("sources"), tables.SOURCES).table
            if self.sources.num_rows == 0:  # staged by a version that did not record sources
                self.sources = sources_from_documents(docs)
            self.counters["duplicate_documents"] = self.sources.num_rows - docs.num_rows
            return docs, quarantine, chunks

        corpus = self.read_input(listing)
        self.sources, quarantine, chunks = corpus.sources, corpus.quarantine, corpus.chunks
        docs = derive_documents(self.sources)
        self.counters["duplicate_documents"] = self.sources.num_rows - docs.num_rows
        n_shards = self.cfg.ray.extraction_shards

        # Replace whatever an interrupted ingest left, then mark the stage done.
        for sub in ("sources", "documents", "quarantine", "chunks"):
            st.remove_files(self.fs, st.list_parquet(self.fs, self._stage_path(sub)))
        st.write_table_atomic(self.fs, self._stage_path("sources", "part-0000.parquet"), self.sources)
        st.write_table_atomic(self.fs, self._stage_path("documents", "part-0000.parquet"), docs)
        crash_point("driver:ingest")
        st.write_table_atomic(self.fs, self._stage_path("quarantine", "part-0000.parquet"), quarantine)
        for s in range(n_shards):
            part = chunks.filter(pc.equal(chunks.column("shard"), s))
            if part.num_rows:
                st.write_table_atomic(self.fs, self._stage_path("chunks", f"shard-{s:04d}.parquet"), part)
        self._mark("ingest", {"input": listing.fingerprint, "documents": docs.num_rows, "chunks": chunks.num_rows})
        self.clock.status["ingest"] = f"ran on {len(listing.files)} files"
        return docs, quarantine, chunks

    def extract(self, chunks: pa.Table) -> pa.Table:
        folder = self._stage_path("extractions")
        existing = st.read_staged(self.fs, folder, tables.EXTRACTIONS, columns=["chunk_id", "error"])
        if existing.unreadable:
            _say(f"removing {len(existing.unreadable)} unreadable extraction files left by a crash")
            st.remove_files(self.fs, existing.unreadable)
        ok = existing.table.filter(pc.equal(existing.table.column("error"), ""))
        done = pa.array(sorted(set(ok.column("chunk_id").to_pylist())), pa.string())
        pending = chunks.filter(pc.invert(pc.is_in(chunks.column("id"), value_set=done)))
        if pending.num_rows:
            self.clock.status["extract"] = f"ran on {pending.num_rows} of {chunks.num_rows} chunks"
            stats = self.run_extraction(pending)
            self.counters["extraction_batches"] = stats.num_rows
            self.counters["extract_skipped_chunks"] = int(pc.sum(stats.column("skipped")).as_py() or 0)
        else:
            self.clock.status["extract"] = "skipped: every chunk extracted earlier"
        extractions = self.read_extractions(chunks)
        if self.counters["extract_skipped_chunks"]:
            extracted = int(pc.sum(pc.equal(extractions.column("error"), "")).as_py() or 0)
            self.stop = {
                "stage": "extract",
                "chunks": chunks.num_rows,
                "chunks_extracted": extracted,
                "chunks_left": chunks.num_rows - extracted,
            }
            self.clock.status["extract"] += f", stopped: {self.counters['extract_skipped_chunks']} chunks not started"
            raise BudgetReached(
                f"{self.services.exhausted()}; {chunks.num_rows - extracted} of {chunks.num_rows} "
                "chunks still to extract"
            )
        return extractions

    def read_extractions(self, chunks: pa.Table) -> pa.Table:
        """One staged extraction per chunk of ``chunks`` (a successful one where any exists)."""
        staged = st.read_staged(self.fs, self._stage_path("extractions"), tables.EXTRACTIONS).table
        return _latest_per_chunk(staged, chunks)

    def run_extraction(self, pending: pa.Table) -> pa.Table:
        """Extract ``pending`` chunks on the NER actor pool; every file an actor reports is checked here."""
        import ray

        from hxd2_ray.stages.extract_stage import ExtractAndPersist

        batch = self.cfg.ray.ner_batch_size
        ds = ray.data.from_arrow(_blocks(pending.drop_columns(["shard"]), batch))
        counter = telemetry.for_job("index").counter("extract", unit="chunks", total=pending.num_rows)
        stats = _collect(
            ds.map_batches(
                ExtractAndPersist,
                fn_constructor_args=(self.cfg, self.fs, self.staging),
                fn_constructor_kwargs={"run": self.services.stage_run, "counter": counter},
                batch_size=batch,
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=self.cfg.ray.ner_actors),
                num_cpus=self.cfg.ray.cpus_per_ner_actor,
                num_gpus=self.cfg.ray.gpus_per_ner_actor,
                resources=self.cfg.ray.stage_resources or None,
            )
        )
        self.services.check_reported(stats, "extract")
        return stats

    def merge(self, extractions: pa.Table) -> tuple[pa.Table, pa.Table]:
        import ray

        from hxd2_ray.extraction.merge import missing_endpoint_entities
        from hxd2_ray.stages.merge_stage import (
            MERGED_ENTITIES,
            MERGED_RELATIONS,
            ExplodeEntityMentions,
            ExplodeRelationMentions,
            MergeEntityGroups,
            MergeRelationGroups,
            entities_to_table,
        )

        input_fp = st.fingerprint_of(
            f"{c}|{e}"
            for c, e in zip(
                extractions.column("chunk_id").to_pylist(), extractions.column("error").to_pylist(), strict=True
            )
        )
        marker = self._marker("merge")
        if marker and marker.get("input") == input_fp:
            self.clock.status["merge"] = "skipped: finished earlier"
            ents = st.read_staged(self.fs, self._stage_path("entities"), tables.ENTITIES).table
            rels = st.read_staged(self.fs, self._stage_path("relations"), tables.RELATIONS).table
            self.counters["summarized_descriptions"] = marker.get("summarized", 0)
            return ents, rels

        ok = extractions.filter(pc.equal(extractions.column("error"), ""))
        if ok.num_rows < self.cfg.ray.merge_in_driver_below:
            # One partition holds every key: the same explode and merge functions, called here, give the rows the
            # distributed merge gives, without seconds of shuffle and actor start-up for a small input.
            relation_mention_rows = ExplodeRelationMentions(self.cfg)(ok)
            merged_entities = _conform(
                MergeEntityGroups(self.cfg)(ExplodeEntityMentions(self.cfg)(ok)), MERGED_ENTITIES
            )
            merged_relations = _conform(MergeRelationGroups(self.cfg)(relation_mention_rows), MERGED_RELATIONS)
            where = "in the driver"
        else:
            ds = ray.data.from_arrow(_blocks(ok, 256))
            # Merge partitions: enough to spread a large corpus over the workers, few enough to keep calls cheap.
            parts = max(1, min(64, ok.num_rows // 2000 + 1))
            merged_entities = _conform(
                _collect(
                    ds.map_batches(
                        ExplodeEntityMentions,
                        fn_constructor_args=(self.cfg, parts),
                        batch_format="pyarrow",
                        compute=ray.data.ActorPoolStrategy(size=1),
                    )
                    .groupby("partition", num_partitions=parts)
                    .map_groups(
                        MergeEntityGroups,
                        fn_constructor_args=(self.cfg,),
                        batch_format="pyarrow",
                        compute=ray.data.ActorPoolStrategy(size=1),
                    )
                ),
                MERGED_ENTITIES,
            )
            relation_mentions = ds.map_batches(
                ExplodeRelationMentions,
                fn_constructor_args=(self.cfg, parts),
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=1),
            ).materialize()
            relation_mention_rows = _collect(relation_mentions)
            merged_relations = _conform(
                _collect(
                    relation_mentions.groupby("partition", num_partitions=parts).map_groups(
                        MergeRelationGroups,
                        fn_constructor_args=(self.cfg,),
                        batch_format="pyarrow",
                        compute=ray.data.ActorPoolStrategy(size=1),
                    )
                ),
                MERGED_RELATIONS,
            )
            where = f"on Ray in {parts} partition{'s' if parts > 1 else ''}"

        summarized = 0
        for name, merged, schema in (
            ("entities", merged_entities, MERGED_ENTITIES),
            ("relations", merged_relations, MERGED_RELATIONS),
        ):
            long_rows = merged.filter(merged.column("needs_summary"))
            if not long_rows.num_rows:
                continue
            summaries = self.summarize(long_rows, schema, name)
            summarized += summaries.num_rows
            rest = merged.filter(pc.invert(merged.column("needs_summary")))
            merged = pa.concat_tables([rest, summaries])
            if name == "entities":
                merged_entities = merged
            else:
                merged_relations = merged

        # A relation needs both endpoints as nodes; endpoints never extracted as entities get type "unknown".
        known = set(merged_entities.column("key").to_pylist())
        endpoints = set(merged_relations.column("source_key").to_pylist()) | set(
            merged_relations.column("target_key").to_pylist()
        )
        missing = []
        if endpoints - known:
            from hxd2_ray.types import RelationMention

            mention_rows = relation_mention_rows.to_pylist()
            missing = missing_endpoint_entities(
                known,
                (
                    RelationMention(
                        r["source"],
                        r["target"],
                        r["description"],
                        tuple(r["keywords"] or ()),
                        r["strength"],
                        r["chunk_id"],
                    )
                    for r in mention_rows
                ),
                self.cfg.extraction,
            )
        if missing:
            merged_entities = pa.concat_tables([merged_entities, entities_to_table(missing)])
        self.counters["endpoint_only_entities"] = len(missing)
        self.counters["summarized_descriptions"] = summarized

        ents = _conform(merged_entities.sort_by("key"), tables.ENTITIES)
        rels = _conform(
            merged_relations.sort_by([("source_key", "ascending"), ("target_key", "ascending")]), tables.RELATIONS
        )
        for sub, table in (("entities", ents), ("relations", rels)):
            st.remove_files(self.fs, st.list_parquet(self.fs, self._stage_path(sub)))
            st.write_table_atomic(self.fs, self._stage_path(sub, "part-0000.parquet"), table)
            crash_point("driver:merge")
        self._mark(
            "merge",
            {"input": input_fp, "entities": ents.num_rows, "relations": rels.num_rows, "summarized": summarized},
        )
        self.clock.status["merge"] = f"merged {ok.num_rows} chunk extractions {where}"
        return ents, rels

    def summarize(self, long_rows: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
        """LLM summaries of merged rows over the description budget (entities or relations), on the NER actors.

        Raises :class:`BudgetReached` when the run's budget stopped some batches: nothing merged is staged then,
        and the rerun finds the summaries made so far in the LLM cache."""
        import ray

        from hxd2_ray.stages.merge_stage import SummarizeLongDescriptions

        if not long_rows.num_rows:
            return schema.empty_table()
        _log(f"summarising {long_rows.num_rows} {name} descriptions over the token budget")
        summaries = _conform(
            _collect(
                ray.data.from_arrow(_blocks(long_rows, self.cfg.ray.ner_batch_size)).map_batches(
                    SummarizeLongDescriptions,
                    fn_constructor_args=(self.cfg,),
                    batch_format="pyarrow",
                    fn_constructor_kwargs={
                        "run": self.services.stage_run,
                        "counter": telemetry.for_job("index").counter("merge"),
                    },
                    batch_size=self.cfg.ray.ner_batch_size,
                    compute=ray.data.ActorPoolStrategy(size=self.cfg.ray.ner_actors),
                    num_cpus=self.cfg.ray.cpus_per_ner_actor,
                    num_gpus=self.cfg.ray.gpus_per_ner_actor,
                    resources=self.cfg.ray.stage_resources or None,
                )
            ),
            schema,
        )
        if summaries.num_rows < long_rows.num_rows:
            self.stop = {
                "stage": "merge",
                "summaries": long_rows.num_rows,
                "summaries_done": summaries.num_rows,
                "summaries_left": long_rows.num_rows - summaries.num_rows,
            }
            raise BudgetReached(
                f"{self.services.exhausted()}; {long_rows.num_rows - summaries.num_rows} of "
                f"{long_rows.num_rows} {name} summaries still to write"
            )
        return summaries

    def embed(self, entities: pa.Table, relations: pa.Table, chunks: pa.Table) -> pa.Table:
        """The vector of every (family, key) of these tables (``EMBEDDINGS``). Vectors are stored by the text they
        embed, so only texts never embedded before are: a changed description gets a new vector, and keys that
        are gone simply have none to return."""
        import ray

        from hxd2_ray.stages.embed_stage import (
            TEXT_VECTORS_FOLDER,
            TEXTS_TO_EMBED,
            EmbedAndPersist,
            embedding_inputs,
            text_key,
        )
        from hxd2_ray.types import vector_id

        inputs = embedding_inputs(entities, relations, chunks)
        texts = inputs.column("text").to_pylist()
        keys = [text_key(t) for t in texts]
        folder = self._stage_path(TEXT_VECTORS_FOLDER)
        existing = st.read_staged(self.fs, folder, tables.TEXT_VECTORS, columns=["text_key"])
        if existing.unreadable:
            st.remove_files(self.fs, existing.unreadable)
        stored = set(existing.table.column("text_key").to_pylist())
        missing: dict[str, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in stored:
                missing.setdefault(k, t)
        pending = pa.table({"text_key": list(missing), "text": list(missing.values())}, schema=TEXTS_TO_EMBED)
        if pending.num_rows:
            self.clock.status["embed"] = (
                f"ran on {pending.num_rows} of {len(set(keys))} distinct texts ({inputs.num_rows} vectors)"
            )
            batch = self.cfg.ray.embed_batch_size
            counter = telemetry.for_job("index").counter("embed", unit="texts", total=pending.num_rows)
            stats = _collect(
                ray.data.from_arrow(_blocks(pending, batch)).map_batches(
                    EmbedAndPersist,
                    fn_constructor_args=(self.cfg, self.fs, self.staging),
                    batch_size=batch,
                    fn_constructor_kwargs={"run": self.services.stage_run, "counter": counter},
                    batch_format="pyarrow",
                    compute=ray.data.ActorPoolStrategy(size=self.cfg.ray.embed_actors),
                    num_cpus=self.cfg.ray.cpus_per_embed_actor,
                    num_gpus=self.cfg.ray.gpus_per_embed_actor,
                    resources=self.cfg.ray.stage_resources or None,
                )
            )
            self.services.check_reported(stats, "embed")
            self.counters["embedded_texts"] = int(pc.sum(stats.column("vectors")).as_py() or 0)
            failed = int(pc.sum(stats.column("failed")).as_py() or 0) if stats.num_rows else 0
            if failed:
                errors = sorted({e for e in stats.column("error").to_pylist() if e})
                raise HxdError(
                    f"{failed} texts could not be embedded after retries ({'; '.join(errors[:3])}); "
                    "they are recorded and a rerun embeds only what is missing"
                )
            skipped = int(pc.sum(stats.column("skipped")).as_py() or 0)
            if skipped:
                self.stop = {"stage": "embed", "texts": pending.num_rows, "texts_left": skipped}
                raise BudgetReached(
                    f"{self.services.exhausted()}; {skipped} of {pending.num_rows} texts still to embed"
                )
        else:
            self.clock.status["embed"] = "skipped: every text embedded earlier"
        stored_vectors = st.read_staged(self.fs, folder, tables.TEXT_VECTORS).table
        row_of: dict[str, int] = {}
        for i, k in enumerate(stored_vectors.column("text_key").to_pylist()):
            row_of.setdefault(k, i)
        picked = stored_vectors.column("vector").take(pa.array([row_of[k] for k in keys], pa.int64()))
        return pa.table(
            {
                "family": inputs.column("family"),
                "key": inputs.column("key"),
                "vector_id": pa.array([vector_id(k) for k in inputs.column("key").to_pylist()], pa.int64()),
                "vector": picked,
            },
            schema=tables.EMBEDDINGS,
        )

    def write(self, state: CorpusState, vectors: pa.Table) -> dict[str, Any]:
        """Write generation ``self.generation`` (vector families, synonym edges, graph, lexical index, corpus tables,
        the refusal calibration, the files' checksums) beside the current one; the switch to it is :meth:`commit`'s
        manifest write. Synonym edges and the calibration are computed over the whole new generation, as a build from
        scratch of the same corpus would."""
        import numpy as np

        from hxd2_ray.graph.kuzu_store import KuzuGraphWriter
        from hxd2_ray.indexing.disk_space import estimate_graph_bytes, write_seam_for
        from hxd2_ray.indexing.faults import disk_fault
        from hxd2_ray.indexing.generations import publish, write_state
        from hxd2_ray.indexing.manifest import record_files
        from hxd2_ray.indexing.output import BUILDING_PREFIX
        from hxd2_ray.retrieval.lexical import write_lexical
        from hxd2_ray.retrieval.refusal_calibration import calibrate_build
        from hxd2_ray.vectors.faiss_index import write_family

        local = isinstance(self.fs, pafs.LocalFileSystem)
        # At the output's root, where a killed build's folder is swept by the next run (hxd2_ray.indexing.output).
        build_dir = (
            os.path.join(self.root, f"{BUILDING_PREFIX}{self.generation}-{uuid.uuid4().hex[:8]}")
            if local
            else tempfile.mkdtemp(prefix="hxd2-build-")
        )
        os.makedirs(build_dir, exist_ok=True)
        # A full or read-only disk ends as one error naming the path and the space needed (disk_space).
        self.write_seam = write_seam_for(self.root if local else build_dir, state, vectors)
        try:
            with self.write_seam.writing("the new generation", build_dir):
                families: dict[str, Any] = {}
                name_vectors = None
                for family in tables.VECTOR_FAMILIES:
                    part = vectors.filter(pc.equal(vectors.column("family"), family))
                    keys = part.column("key").to_pylist()
                    flat = pc.list_flatten(part.column("vector")).to_numpy(zero_copy_only=False)
                    arr = (
                        np.ascontiguousarray(flat, dtype=np.float32).reshape(len(keys), -1)
                        if keys
                        else np.zeros((0, self.cfg.embedding.dim), np.float32)
                    )
                    disk_fault("vectors", os.path.join(build_dir, "vectors", family))
                    info = write_family(build_dir, family, keys, arr, self.cfg.vectors)
                    families[family] = _as_dict(info)
                    if family == "entity_name":
                        name_vectors = (keys, arr)
                synonyms = self._synonyms(build_dir, name_vectors)
                title_mentions = self._title_mentions(state.documents, state.chunks)
                graph = (
                    state.documents,
                    state.chunks.drop_columns(["shard"]),
                    state.entities,
                    state.relations,
                    synonyms,
                    title_mentions,
                )
                # Kùzu may abort the process on a failed write: refuse first when the room is plainly missing.
                self.write_seam.check_room(build_dir, estimate_graph_bytes(graph), "the graph")
                KuzuGraphWriter(os.path.join(build_dir, "graph.kuzu")).bulk_load(*graph)
                disk_fault("graph", os.path.join(build_dir, "graph.kuzu"))
                crash_point("driver:write")
                # The lexical channel of this generation, from its whole chunk table (an update rebuilds it too).
                write_lexical(build_dir, state.chunks.column("id").to_pylist(), state.chunks.column("text").to_pylist())
                self.refusal = calibrate_build(build_dir, self.cfg, state.chunks.column("text"), progress=_log)
                self.files = record_files(build_dir)  # sizes and sha256 for the manifest, before the files move
                write_state(build_dir, state)
                publish(self.fs, self.root, build_dir, self.generation)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
        return families

    def _synonyms(self, build_dir: str, name_vectors: tuple[list[str], Any] | None) -> pa.Table:
        """SYNONYM edges of every entity against the entity_name family just written (hxd2_ray.indexing.synonyms)."""
        from hxd2_ray.indexing.synonyms import synonym_edges
        from hxd2_ray.vectors.faiss_index import FaissFamilyIndex

        started = time.perf_counter()
        keys, arr = name_vectors if name_vectors is not None else ([], None)
        family = FaissFamilyIndex.open(build_dir, "entity_name")
        try:
            table = synonym_edges(keys, arr if arr is not None else [], family, self.cfg.synonyms, progress=_log)
        finally:
            family.close()
        self.counters["synonym_edges"] = table.num_rows
        self.clock.seconds["synonyms"] = round(time.perf_counter() - started, 3)
        _log(f"{table.num_rows:,} synonym edges among {len(keys):,} entities in {self.clock.seconds['synonyms']:.1f}s")
        return table

    def _title_mentions(self, documents: pa.Table, chunks: pa.Table) -> pa.Table:
        """NAMES_TITLE edges of every chunk against every document title (hxd2_ray.indexing.title_mentions)."""
        from hxd2_ray.indexing.title_mentions import title_mention_edges

        started = time.perf_counter()
        table = title_mention_edges(documents, chunks, self.cfg.title_mentions, progress=_log)
        self.counters["title_mentions"] = table.num_rows
        self.clock.seconds["title_mentions"] = round(time.perf_counter() - started, 3)
        _log(
            f"{table.num_rows:,} title mentions in {chunks.num_rows:,} chunks in "
            f"{self.clock.seconds['title_mentions']:.1f}s"
        )
        return table

    def commit(
        self,
        summary: dict[str, Any],
        families: dict[str, Any],
        current: IndexManifest | None,
        kind: str,
        change: dict[str, Any],
    ) -> None:
        """Switch readers to the written generation (one manifest write), then remove generations past
        ``generations.keep``."""
        from hxd2_ray.indexing.disk_space import WriteSeam
        from hxd2_ray.indexing.faults import disk_fault
        from hxd2_ray.indexing.generations import history, prune
        from hxd2_ray.indexing.manifest import IndexManifest, generation_dir, read_manifest, write_manifest

        manifest_path = posixpath.join(self.root, "manifest.json")
        manifest = IndexManifest.create(
            fingerprint=self.fingerprint,
            prompt_version=self.prompts.version_hash,
            llm_model_id=llm_model_id(self.cfg.llm),
            embedding_model_id=embedding_model_id(self.cfg.embedding),
            embedding_dim=self.cfg.embedding.dim,
            counts={
                k: summary[k]
                for k in ("documents", "chunks", "entities", "relations", "ungrounded_entities", "ungrounded_relations")
            },
            vector_families=families,
            config=self.cfg.model_dump(mode="json"),
            generation=self.generation,
            parent_generation=current.generation if current is not None else "",
            generations=history(current, self.generation, kind, change),
            files=self.files,
            synonyms={**summary["synonyms"], "edges": summary["synonym_edges"]},
            refusal=self.refusal if self.refusal and "error" not in self.refusal else None,
        )
        # A failed switch leaves the written generation unread: it goes, to give its space back.
        local = isinstance(self.fs, pafs.LocalFileSystem)
        unread = os.path.join(self.root, generation_dir(self.generation)) if local else None
        seam = self.write_seam or WriteSeam(self.root if local else tempfile.gettempdir(), 0)
        with seam.writing("the manifest", manifest_path, discard=unread):
            disk_fault("manifest", manifest_path)
            st.write_json_atomic(self.fs, posixpath.join(self.root, "index_summary.json"), summary)
            self.check_lock()
            write_manifest(manifest_path, manifest, filesystem=self.fs)
        read_manifest(manifest_path, filesystem=self.fs)  # the index is complete only if this reads back
        removed = prune(self.fs, self.root, manifest, self.cfg.generations.keep)
        if removed:
            _log(f"removed {', '.join(removed)} (generations.keep={self.cfg.generations.keep})")

    # ------------------------------------------------------------------ the run

    def current_manifest(self) -> IndexManifest | None:
        from hxd2_ray.indexing.manifest import read_manifest

        if not st.exists(self.fs, posixpath.join(self.root, "manifest.json")):
            return None
        return read_manifest(posixpath.join(self.root, "manifest.json"), filesystem=self.fs)

    def run(self) -> dict[str, Any]:
        """Build the index, or change it when the output already holds one (``jobs.index_update``)."""
        started = time.perf_counter()
        current = self.current_manifest()
        self._check_staging_fingerprint()
        # Settings of the final graph only (synonym edges, title mentions) changed: the staged work is reused and
        # the input is built again into a new generation. Anything else that changed the fingerprint needs a new output.
        rebuild = current is not None and current.fingerprint != self.fingerprint
        if rebuild and self.options.dry_run:
            raise HxdError(
                f"{self.output_uri} holds an index built with other graph settings (synonym edges, title "
                "mentions) or before one of them existed; a dry run estimates "
                "changes to an index of the same configuration (or a build into a new --output)"
            )
        self.services = RunServices(
            self.cfg, self.options, self.fs, self.root, self.output_uri, self.prompts.version_hash
        )
        try:
            return self._run(current, rebuild, started)
        finally:
            self.services.close()

    def _run(self, current: IndexManifest | None, rebuild: bool, started: float) -> dict[str, Any]:
        from hxd2_ray.indexing.generations import next_generation_id

        self.generation = next_generation_id(current)
        listing = self.list_input(self.input_uri)
        self.services.check_nodes(self.staging, listing.fs, listing.paths)
        try:
            if self.options.dry_run:
                from jobs.index_dry_run import dry_run

                return dry_run(self, listing, current)
            if rebuild:
                _log(
                    f"{self.output_uri} was built with other graph settings (synonym edges, title mentions): building "
                    "the input again into a "
                    "new generation (extractions and vectors are reused)"
                )
                summary = self.build(listing, parent=current)
            elif current is not None:
                from jobs.index_update import IndexUpdate

                summary = IndexUpdate(self, current).upsert(listing)
            else:
                summary = self.build(listing)
        except BudgetReached as exc:
            return self.stopped_summary(exc, current, started)
        summary["seconds_total"] = round(time.perf_counter() - started, 3)
        self.services.compact_cache()
        return summary

    def build(self, listing: InputListing, parent: IndexManifest | None = None) -> dict[str, Any]:
        """A build from scratch (the output holds no index, or ``parent``, an index of other synonym settings):
        every stage over the whole input, reusing what is staged."""
        from hxd2_ray.indexing.generations import CorpusState

        with self.clock.stage("ingest"):
            docs, quarantine, chunks = self.ingest(listing)
        if docs.num_rows == 0:
            reasons = Counter(quarantine.column("reason").to_pylist())
            raise EmptyCorpusError(
                f"no valid document in {self.input_uri}: {quarantine.num_rows} files quarantined "
                f"({', '.join(f'{k}: {v}' for k, v in sorted(reasons.items())) or 'none'}); no index was written"
            )
        with self.clock.stage("extract"):
            extractions = self.extract(chunks)
        with self.clock.stage("merge"):
            entities, relations = self.merge(extractions)
        with self.clock.stage("embed"):
            vectors = self.embed(entities, relations, chunks)
        self.check_lock()
        ok = extractions.filter(pc.equal(extractions.column("error"), "")).column("chunk_id")
        state = CorpusState(
            sources=self.sources,
            documents=docs,
            chunks=chunks,
            quarantine=quarantine,
            entities=entities,
            relations=relations,
            merged_chunks=pa.table({"chunk_id": ok}, schema=tables.MERGED_CHUNKS),
        )
        with self.clock.stage("write"):
            families = self.write(state, vectors)
        kind = "build" if parent is None else "rebuild"
        summary = self.summary(state, extractions, families, kind=kind)
        self.commit(
            summary,
            families,
            parent,
            kind,
            {"documents": docs.num_rows, "chunks": chunks.num_rows, "input": listing.fingerprint},
        )
        return summary

    def summary(
        self,
        state: CorpusState,
        extractions: pa.Table,
        families: dict[str, Any],
        kind: str,
        change: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        def total(col: str) -> int:
            # An index written before a column existed (grounding counts) reads as zero there.
            if not extractions.num_rows or col not in extractions.column_names:
                return 0
            return int(pc.sum(extractions.column(col)).as_py() or 0)

        docs, quarantine, chunks = state.documents, state.quarantine, state.chunks
        failed = extractions.filter(pc.not_equal(extractions.column("error"), ""))
        return {
            "status": "complete",
            "kind": kind,
            "input": self.input_uri,
            "output": self.output_uri,
            "generation": self.generation,
            "change": change or {},
            "fingerprint": self.fingerprint,
            "prompt_version": self.prompts.version_hash,
            "llm_model": llm_model_id(self.cfg.llm),
            "embedding_model": embedding_model_id(self.cfg.embedding),
            "documents": docs.num_rows,
            "chunks": chunks.num_rows,
            "entities": state.entities.num_rows,
            "relations": state.relations.num_rows,
            "quarantined_files": quarantine.num_rows,
            "quarantine_reasons": dict(sorted(Counter(quarantine.column("reason").to_pylist()).items())),
            "duplicate_documents": self.counters["duplicate_documents"],
            # What the corpus' extractions cost, whenever they ran (recorded per chunk); this run's own usage,
            # per stage and priced, is under "run".
            "llm_calls": total("llm_calls"),
            "prompt_tokens": total("prompt_tokens"),
            "completion_tokens": total("completion_tokens"),
            "malformed_records": total("malformed_records"),
            # dropped by extraction.grounding: names that do not occur in their chunk, relations with such an end
            "ungrounded_entities": total("ungrounded_entities"),
            "ungrounded_relations": total("ungrounded_relations"),
            "failed_chunks": failed.num_rows,
            "failed_chunk_errors": sorted(set(failed.column("error").to_pylist()))[:5],
            "endpoint_only_entities": self.counters["endpoint_only_entities"],
            "summarized_descriptions": self.counters["summarized_descriptions"],
            "embedded_texts": self.counters["embedded_texts"],
            "synonym_edges": self.counters["synonym_edges"],
            "synonyms": synonym_factors(self.cfg.synonyms),
            "title_mentions": self.counters.get("title_mentions", 0),
            "refusal_calibration": self.refusal,
            "vectors": {f: info.get("count", 0) for f, info in families.items()},
            "run": self.services.totals(),
            "llm_cache": self.services.cache_summary(),
            "cluster": {
                "nodes_checked": self.services.nodes_checked,
                "files_checked": self.services.files_checked,
                "writer_nodes": sorted(self.services.writer_nodes),
            },
            "seconds_per_stage": dict(self.clock.seconds),
            "stage_status": dict(self.clock.status),
        }

    def stopped_summary(self, exc: BudgetReached, current: IndexManifest | None, started: float) -> dict[str, Any]:
        """What a run stopped by its budget did and left; everything finished is on disk for the rerun."""
        stages = list(STAGES)
        stage = self.stop.get("stage", "extract")
        return {
            "status": "stopped",
            "reason": str(exc),
            "input": self.input_uri,
            "output": self.output_uri,
            "generation": current.generation if current is not None else "",
            "index": "unchanged" if current is not None else "not written yet",
            "done": {"stages": stages[: stages.index(stage)], **{k: v for k, v in self.stop.items() if k != "stage"}},
            "left": {"stages": stages[stages.index(stage) :]},
            "resume": "run the same command again (with a larger or no budget): finished work is kept",
            "run": self.services.totals(),
            "llm_cache": self.services.cache_summary(),
            "seconds_per_stage": dict(self.clock.seconds),
            "stage_status": dict(self.clock.status),
            "seconds_total": round(time.perf_counter() - started, 3),
        }


def _unique_first(values: list[str]) -> tuple[list[str], list[int]]:
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        seen.setdefault(v, i)
    return list(seen), sorted(seen.values())


def _latest_per_chunk(extractions: pa.Table, chunks: pa.Table) -> pa.Table:
    """One extraction per current chunk: a successful one if any exists, else the recorded failure."""
    wanted = set(chunks.column("id").to_pylist())
    best: dict[str, int] = {}
    for i, (cid, err) in enumerate(
        zip(extractions.column("chunk_id").to_pylist(), extractions.column("error").to_pylist(), strict=True)
    ):
        if cid not in wanted:
            continue
        prev = best.get(cid)
        if prev is None or (not err and extractions.column("error")[prev].as_py()):
            best[cid] = i
    order = sorted(best.values(), key=lambda i: extractions.column("chunk_id")[i].as_py())
    return extractions.take(order) if order else tables.EXTRACTIONS.empty_table()


def _as_dict(info: Any) -> dict[str, Any]:
    if isinstance(info, dict):
        return info
    if hasattr(info, "model_dump"):
        return info.model_dump(mode="json")
    from dataclasses import asdict, is_dataclass

    return asdict(info) if is_dataclass(info) and not isinstance(info, type) else dict(vars(info))


def preflight(cfg: HxdConfig, input_uri: str, output_uri: str, overwrite: bool = False) -> InputSelection:
    """Check the input (walked: the files to read) and the output (created if missing) before anything else is
    written or started; an :class:`HxdError` says what is wrong. Returns the selected inputs."""
    from hxd2_ray.indexing.output import check_input_outside, open_output
    from hxd2_ray.ingest.sources import select_inputs
    from hxd2_ray.wiring import check_llm_server

    inputs = select_inputs(input_uri, cfg.ingest, cfg.s3, exclude=(output_uri,))
    if overwrite:
        check_input_outside(input_uri, output_uri, cfg.s3)
    check_llm_server(cfg.llm)  # a remote model server that is down: one line, exit 2, before Ray starts
    open_output(output_uri, cfg.s3)
    return inputs


def run_index(
    cfg: HxdConfig,
    input_uri: str,
    output_uri: str,
    overwrite: bool = False,
    options: RunOptions | None = None,
    inputs: InputSelection | None = None,
) -> dict[str, Any]:
    """Check the input and the output (unless ``inputs`` says :func:`preflight` did), take the output's build
    lock, then start Ray and build or change the index. ``overwrite`` empties the output first, but for its LLM
    cache (replies keyed by model, prompt and sampling are never stale) and the run's log folder."""
    from hxd2_ray.indexing.output import build_output
    from jobs.console import LOG_FOLDER
    from jobs.index_run import LLM_CACHE_FOLDER

    if inputs is None:
        inputs = preflight(cfg, input_uri, output_uri, overwrite)
    with build_output(
        output_uri,
        cfg.s3,
        overwrite=overwrite,
        input_uri=input_uri,
        command="index",
        keep_on_overwrite=(LOG_FOLDER, LLM_CACHE_FOLDER),
        log=_say,
    ) as output:
        for path in output.swept:
            _say(f"removed {path}, left by a build that was killed")
        init_ray(cfg)
        return IndexBuild(cfg, input_uri, output_uri, options, output=output, inputs=inputs).run()


def _run_line(summary: dict[str, Any]) -> str:
    run = summary.get("run") or {}
    if not run:
        return "  this run: -"
    cache = f"  LLM cache hits {run['llm_cache_hits']:,}" if (summary.get("llm_cache") or {}).get("enabled") else ""
    return (
        f"  this run: LLM calls {run['llm_calls']:,}, prompt tokens {run['prompt_tokens']:,}, completion tokens "
        f"{run['completion_tokens']:,}, embedding tokens {run['embedding_tokens']:,}, ${run['usd']:.4f}{cache}"
    )


def format_summary(summary: dict[str, Any]) -> str:
    if summary.get("status") == "stopped":
        return "\n".join(
            [
                f"stopped: {summary['reason']}",
                f"  index at {summary['output']}: {summary['index']}",
                f"  done: {summary['done']}",
                f"  left: {summary['left']}",
                _run_line(summary),
                f"  to continue: {summary['resume']}",
            ]
        )
    if summary.get("status") == "estimate":
        from jobs.index_dry_run import format_estimate

        return format_estimate(summary)
    if summary.get("status") == "unchanged":
        return "\n".join(
            [
                f"index at {summary['output']} unchanged (generation {summary['generation']}): {summary['reason']}",
                _run_line(summary),
            ]
        )
    change = summary.get("change") or {}
    what = (
        f"generation {summary['generation']} ({summary.get('kind', 'build')}"
        + (
            f": +{change.get('added', 0)} ~{change.get('updated', 0)} -{change.get('deleted', 0)} documents"
            if summary.get("kind") in ("update", "delete")
            else ""
        )
        + ")"
    )
    lines = [
        f"index written to {summary['output']}, {what} (fingerprint {summary['fingerprint']})",
        f"  documents {summary['documents']:>10,}   chunks {summary['chunks']:>10,}",
        f"  entities  {summary['entities']:>10,}   relations {summary['relations']:>7,}",
        f"  quarantined files {summary['quarantined_files']:,} {summary['quarantine_reasons'] or ''}",
        f"  corpus extraction: LLM calls {summary['llm_calls']:,}  prompt tokens {summary['prompt_tokens']:,}  "
        f"completion tokens {summary['completion_tokens']:,}",
        _run_line(summary),
        f"  malformed records skipped {summary['malformed_records']:,}  failed chunks {summary['failed_chunks']:,}",
        f"  ungrounded (dropped) entities {summary.get('ungrounded_entities', 0):,}  relations "
        f"{summary.get('ungrounded_relations', 0):,}",
        "  seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["seconds_per_stage"].items()),
        f"  synonym edges {summary.get('synonym_edges', 0):,} {summary.get('synonyms') or ''}",
        f"  title mentions {summary.get('title_mentions', 0):,} (chunk, named document) pairs",
    ]
    refusal = summary.get("refusal_calibration") or {}
    if "threshold" in refusal:
        lines.append(
            f"  refusal threshold {refusal['threshold']:.4f} (rule {refusal['rule']}, F1 {refusal['f1']:.3f}; "
            f"with names F1 {refusal['with_names']['f1']:.3f})"
        )
        if refusal.get("notice"):
            lines.append(f"  {refusal['notice']}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hxd2 index",
        description=__doc__.split("\n\n")[0],
        epilog="hxd2 index delete --output INDEX --doc-id ID... | --source PATH: "
        "remove documents from an index (hxd2 index delete --help)",
    )
    parser.add_argument("--config", default=None, help="YAML config (default: built-in defaults)")
    parser.add_argument(
        "--input",
        required=True,
        help="folder, file, glob or s3:// URI of the corpus; when the "
        "output holds an index, the documents to add or update",
    )
    parser.add_argument("--output", required=True, help="index folder or s3:// URI")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="delete what the output holds first (but its LLM cache) and build from scratch",
    )
    add_run_options(parser)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate tokens, time and cost from a sample of the chunks to extract; build nothing",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Ray, Ray Data and vLLM logs here (default: in <output>/_logs/)",
    )
    return parser


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The LLM cache and budget flags of every command that changes an index (build, update, delete)."""
    parser.add_argument("--no-llm-cache", action="store_true", help="call the LLM for every request (llm_cache)")
    parser.add_argument(
        "--llm-cache",
        default=None,
        metavar="DIR_OR_S3",
        help="LLM response cache to use (default: <output>/_llm_cache)",
    )
    parser.add_argument(
        "--budget-tokens",
        type=int,
        default=None,
        metavar="N",
        help="stop cleanly once this run has spent N LLM tokens (prompt + completion); rerun to go on",
    )
    parser.add_argument(
        "--budget-usd",
        type=float,
        default=None,
        metavar="USD",
        help="stop cleanly once this run has cost USD dollars (cost.prices); rerun to go on",
    )


def config_with_run_options(args: argparse.Namespace) -> HxdConfig:
    overrides = list(args.overrides)
    if args.no_llm_cache:
        overrides.append("llm_cache.enabled=false")
    if args.llm_cache:
        overrides.append(f"llm_cache.location={args.llm_cache}")
    return load_config(args.config, overrides)


# Exit status of a run that stopped at its budget: its summary is printed, the work is not finished.
EXIT_STOPPED = 3


def main(argv: list[str] | None = None) -> int:
    from jobs.console import log_path_for, run_job

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "delete":  # hxd2 index delete --output DIR --doc-id ID | --source PATH
        from jobs.index_update import main_delete

        return main_delete(argv[1:])
    if argv and argv[0] == "verify":  # hxd2 index verify --index DIR: the files against the manifest's checksums
        from jobs.index_verify import main as verify_main

        return verify_main(argv[1:])
    args = build_parser().parse_args(argv)
    # A bad input or output is one error line before the console opens its log inside the output.
    try:
        cfg = config_with_run_options(args)
        inputs = preflight(cfg, args.input, args.output, args.overwrite)
    except (HxdError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcome: dict[str, Any] = {}

    def work() -> dict[str, Any]:
        options = RunOptions(budget_tokens=args.budget_tokens, budget_usd=args.budget_usd, dry_run=args.dry_run)
        outcome.update(
            run_index(cfg, args.input, args.output, overwrite=args.overwrite, options=options, inputs=inputs)
        )
        return outcome

    code = run_job(
        work,
        command="index",
        log_path=log_path_for("index", args.output),
        verbose=args.verbose,
        run=args.output,
        as_json=args.json,
        format_text=format_summary,
    )
    return EXIT_STOPPED if code == 0 and outcome.get("status") == "stopped" else code


if __name__ == "__main__":
    sys.exit(main())
