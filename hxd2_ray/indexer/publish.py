"""The end of a build: write the new generation beside the current one (vector families, synonym edges, graph,
lexical index, corpus tables, the refusal calibration, the files' checksums), its summary, and the switch of
readers to it (one manifest write), over a :class:`~.context.BuildContext`."""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from hxd2_ray.config import embedding_model_id, llm_model_id, synonym_factors
from hxd2_ray.graph.read_structures import READS_DIR
from hxd2_ray.graph_assembly.synonyms import synonym_edges
from hxd2_ray.graph_assembly.title_mentions import title_mention_edges
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.disk_space import WriteSeam, estimate_graph_bytes, isolated_write, write_seam_for
from hxd2_ray.index_store.generations import history, prune, publish, write_state
from hxd2_ray.index_store.manifest import IndexManifest, generation_dir, read_manifest, record_files, write_manifest
from hxd2_ray.index_store.output import BUILDING_PREFIX
from hxd2_ray.indexer.context import STAGES
from hxd2_ray.indexer.query_reads import write_query_reads
from hxd2_ray.retrieval.lexical import write_lexical
from hxd2_ray.retrieval.refusal_calibration import calibrate_build
from hxd2_ray.stages import staging as st
from hxd2_ray.stages.faults import crash_point, disk_fault
from hxd2_ray.wiring import build_embedder

if TYPE_CHECKING:
    from hxd2_ray.errors import BudgetReached
    from hxd2_ray.index_store.generations import CorpusState
    from hxd2_ray.indexer.context import BuildContext


def write(b: BuildContext, state: CorpusState, vectors: pa.Table) -> dict[str, Any]:
    """Write generation ``b.generation`` (vector families, synonym edges, graph, lexical index, corpus tables,
    the refusal calibration, the files' checksums) beside the current one; the switch to it is :func:`commit`'s
    manifest write. Synonym edges and the calibration are computed over the whole new generation, as a build from
    scratch of the same corpus would."""
    from hxd2_ray.vectors.faiss_index import write_family

    local = isinstance(b.fs, pafs.LocalFileSystem)
    # At the output's root, where a killed build's folder is swept by the next run (hxd2_ray.index_store.output).
    build_dir = (
        os.path.join(b.root, f"{BUILDING_PREFIX}{b.generation}-{uuid.uuid4().hex[:8]}")
        if local
        else tempfile.mkdtemp(prefix="hxd2-build-")
    )
    os.makedirs(build_dir, exist_ok=True)
    # A full or read-only disk ends as one error naming the path and the space needed (disk_space).
    b.write_seam = write_seam_for(b.root if local else build_dir, state, vectors)
    try:
        with b.write_seam.writing("the new generation", build_dir):
            started = time.perf_counter()
            families: dict[str, Any] = {}
            name_vectors = None
            for family in tables.VECTOR_FAMILIES:
                part = vectors.filter(pc.equal(vectors.column("family"), family))
                keys = part.column("key").to_pylist()
                flat = pc.list_flatten(part.column("vector")).to_numpy(zero_copy_only=False)
                arr = (
                    np.ascontiguousarray(flat, dtype=np.float32).reshape(len(keys), -1)
                    if keys
                    else np.zeros((0, b.cfg.embedding.dim), np.float32)
                )
                disk_fault("vectors", os.path.join(build_dir, "vectors", family))
                info = write_family(build_dir, family, keys, arr, b.cfg.vectors)
                families[family] = _as_dict(info)
                if family == "entity_name":
                    name_vectors = (keys, arr)
            b.clock.seconds["vectors"] = round(time.perf_counter() - started, 3)
            synonyms = _synonyms(b, build_dir, name_vectors)
            title_mentions = _title_mentions(b, state.documents, state.chunks)
            graph = (
                state.documents,
                state.chunks.drop_columns(["shard"]),
                state.entities,
                state.relations,
                synonyms,
                title_mentions,
            )
            # Kùzu may abort the process on a failed write: refuse first when the room is plainly missing, and load
            # in a child process, which an abort ends alone (disk_space.isolated_write).
            b.write_seam.check_room(build_dir, estimate_graph_bytes(graph), "the graph")
            graph_path = os.path.join(build_dir, "graph.kuzu")
            _load_graph_isolated(b, graph_path, graph)
            disk_fault("graph", os.path.join(build_dir, "graph.kuzu"))
            _graph_reads(b, build_dir)
            crash_point("driver:write")
            # The lexical channel of this generation, from its whole chunk table (an update rebuilds it too).
            started = time.perf_counter()
            write_lexical(build_dir, state.chunks.column("id").to_pylist(), state.chunks.column("text").to_pylist())
            b.clock.seconds["lexical"] = round(time.perf_counter() - started, 3)
            started = time.perf_counter()
            b.refusal = calibrate_build(
                build_dir,
                state.chunks.column("text"),
                make_embedder=lambda: build_embedder(b.cfg.embedding),  # the composition root's backend
                progress=b.log,
                graph_backend=b.cfg.graph.backend,
            )
            b.clock.seconds["refusal_calibration"] = round(time.perf_counter() - started, 3)
            b.files = record_files(build_dir)  # sizes and sha256 for the manifest, before the files move
            write_state(build_dir, state)
            publish(b.fs, b.root, build_dir, b.generation)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    return families


def _load_graph_isolated(b: BuildContext, graph_path: str, graph: tuple[pa.Table, ...]) -> None:
    """Load the generation's graph in a child process (:func:`isolated_write`) with the buffer pool of
    ``graph.build_buffer_pool_mb`` (None: sized to the tables)."""
    from hxd2_ray.graph.kuzu_store import bulk_load_pool_bytes

    started = time.perf_counter()
    configured = b.cfg.graph.build_buffer_pool_mb
    pool = bulk_load_pool_bytes(sum(t.nbytes for t in graph), configured)
    load = functools.partial(_load_graph, graph_path, graph, b.cfg.graph.backend, pool)
    isolated_write(load, "the graph", graph_path, b.write_seam)
    b.clock.seconds["graph_load"] = round(time.perf_counter() - started, 3)
    how = "graph.build_buffer_pool_mb" if configured is not None else "sized to the graph"
    b.log(f"graph loaded in {b.clock.seconds['graph_load']:.1f}s (buffer pool {pool >> 20:,} MB, {how})")


def _load_graph(path: str, graph: tuple[pa.Table, ...], engine: str, buffer_pool_bytes: int = 0) -> None:
    """The generation's graph, in the child process of :func:`isolated_write`, with a buffer pool of
    ``buffer_pool_bytes`` (0: the engine's default)."""
    from hxd2_ray.graph.kuzu_store import load_graph

    disk_fault("graph-load", path)
    documents, chunks, entities, relations, synonyms, title_mentions = graph
    try:
        load_graph(
            path,
            documents,
            chunks,
            entities,
            relations,
            synonyms=synonyms,
            title_mentions=title_mentions,
            engine=engine,
            buffer_pool_bytes=buffer_pool_bytes,
        )
    except RuntimeError as exc:
        if "buffer pool is full" not in str(exc):
            raise
        raise RuntimeError(
            f"{exc} (a buffer pool of {buffer_pool_bytes >> 20:,} MB): set graph.build_buffer_pool_mb higher and run "
            "the same command again (the staged work is kept; only the write stage runs again)"
        ) from None


def _graph_reads(b: BuildContext, build_dir: str) -> None:
    """The generation's graph read structures (hxd2_ray.graph.read_structures), from the graph just loaded: what
    every query process maps instead of building its own copy."""
    started = time.perf_counter()
    write_query_reads(os.path.join(build_dir, "graph.kuzu"), os.path.join(build_dir, READS_DIR), b.cfg.graph.backend)
    b.clock.seconds["graph_reads"] = round(time.perf_counter() - started, 3)
    b.log(f"graph read structures written in {b.clock.seconds['graph_reads']:.1f}s")


def _synonyms(b: BuildContext, build_dir: str, name_vectors: tuple[list[str], Any] | None) -> pa.Table:
    """SYNONYM edges of every entity against the entity_name family just written (hxd2_ray.graph_assembly.synonyms)."""
    from hxd2_ray.vectors.faiss_index import FaissFamilyIndex

    started = time.perf_counter()
    keys, arr = name_vectors if name_vectors is not None else ([], None)
    family = FaissFamilyIndex.open(build_dir, "entity_name")
    try:
        table = synonym_edges(keys, arr if arr is not None else [], family, b.cfg.synonyms, progress=b.log)
    finally:
        family.close()
    b.counters["synonym_edges"] = table.num_rows
    b.clock.seconds["synonyms"] = round(time.perf_counter() - started, 3)
    b.log(f"{table.num_rows:,} synonym edges among {len(keys):,} entities in {b.clock.seconds['synonyms']:.1f}s")
    return table


def _title_mentions(b: BuildContext, documents: pa.Table, chunks: pa.Table) -> pa.Table:
    """NAMES_TITLE edges of every chunk against every document title (hxd2_ray.graph_assembly.title_mentions)."""
    started = time.perf_counter()
    table = title_mention_edges(documents, chunks, b.cfg.title_mentions, progress=b.log)
    b.counters["title_mentions"] = table.num_rows
    b.clock.seconds["title_mentions"] = round(time.perf_counter() - started, 3)
    b.log(
        f"{table.num_rows:,} title mentions in {chunks.num_rows:,} chunks in {b.clock.seconds['title_mentions']:.1f}s"
    )
    return table


def commit(
    b: BuildContext,
    summary: dict[str, Any],
    families: dict[str, Any],
    current: IndexManifest | None,
    kind: str,
    change: dict[str, Any],
) -> None:
    """Switch readers to the written generation (one manifest write), then remove generations past
    ``generations.keep``."""
    manifest_path = posixpath.join(b.root, "manifest.json")
    manifest = IndexManifest.create(
        fingerprint=b.fingerprint,
        prompt_version=b.prompts.version_hash,
        llm_model_id=llm_model_id(b.cfg.llm),
        embedding_model_id=embedding_model_id(b.cfg.embedding),
        embedding_dim=b.cfg.embedding.dim,
        counts={
            k: summary[k]
            for k in ("documents", "chunks", "entities", "relations", "ungrounded_entities", "ungrounded_relations")
        },
        vector_families=families,
        config=b.cfg.model_dump(mode="json"),
        generation=b.generation,
        parent_generation=current.generation if current is not None else "",
        generations=history(current, b.generation, kind, change),
        files=b.files,
        synonyms={**summary["synonyms"], "edges": summary["synonym_edges"]},
        refusal=b.refusal if b.refusal and "error" not in b.refusal else None,
        graph_backend=b.cfg.graph.backend,
    )
    # A failed switch leaves the written generation unread: it goes, to give its space back.
    local = isinstance(b.fs, pafs.LocalFileSystem)
    unread = os.path.join(b.root, generation_dir(b.generation)) if local else None
    seam = b.write_seam or WriteSeam(b.root if local else tempfile.gettempdir(), 0)
    with seam.writing("the manifest", manifest_path, discard=unread):
        disk_fault("manifest", manifest_path)
        st.write_json_atomic(b.fs, posixpath.join(b.root, "index_summary.json"), summary)
        b.check_lock()
        write_manifest(manifest_path, manifest, filesystem=b.fs)
    read_manifest(manifest_path, filesystem=b.fs)  # the index is complete only if this reads back
    removed = prune(b.fs, b.root, manifest, b.cfg.generations.keep)
    if removed:
        b.log(f"removed {', '.join(removed)} (generations.keep={b.cfg.generations.keep})")


def summary(
    b: BuildContext,
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
        "input": b.input_uri,
        "output": b.output_uri,
        "generation": b.generation,
        "change": change or {},
        "fingerprint": b.fingerprint,
        "prompt_version": b.prompts.version_hash,
        "llm_model": llm_model_id(b.cfg.llm),
        "embedding_model": embedding_model_id(b.cfg.embedding),
        "documents": docs.num_rows,
        "chunks": chunks.num_rows,
        "entities": state.entities.num_rows,
        "relations": state.relations.num_rows,
        "quarantined_files": quarantine.num_rows,
        "quarantine_reasons": dict(sorted(Counter(quarantine.column("reason").to_pylist()).items())),
        "duplicate_documents": b.counters["duplicate_documents"],
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
        "endpoint_only_entities": b.counters["endpoint_only_entities"],
        "summarized_descriptions": b.counters["summarized_descriptions"],
        "embedded_texts": b.counters["embedded_texts"],
        "synonym_edges": b.counters["synonym_edges"],
        "synonyms": synonym_factors(b.cfg.synonyms),
        "title_mentions": b.counters.get("title_mentions", 0),
        "refusal_calibration": b.refusal,
        "vectors": {f: info.get("count", 0) for f, info in families.items()},
        "run": b.runner.totals(),
        "llm_cache": b.runner.cache_summary(),
        "cluster": {
            "nodes_checked": b.runner.nodes_checked,
            "files_checked": b.runner.files_checked,
            "writer_nodes": sorted(b.runner.writer_nodes),
        },
        "seconds_per_stage": dict(b.clock.seconds),
        "stage_status": dict(b.clock.status),
    }


def stopped_summary(
    b: BuildContext, exc: BudgetReached, current: IndexManifest | None, started: float
) -> dict[str, Any]:
    """What a run stopped by its budget did and left; everything finished is on disk for the rerun."""
    stages = list(STAGES)
    stage = b.stop.get("stage", "extract")
    return {
        "status": "stopped",
        "reason": str(exc),
        "input": b.input_uri,
        "output": b.output_uri,
        "generation": current.generation if current is not None else "",
        "index": "unchanged" if current is not None else "not written yet",
        "done": {"stages": stages[: stages.index(stage)], **{k: v for k, v in b.stop.items() if k != "stage"}},
        "left": {"stages": stages[stages.index(stage) :]},
        "resume": "run the same command again (with a larger or no budget): finished work is kept",
        "run": b.runner.totals(),
        "llm_cache": b.runner.cache_summary(),
        "seconds_per_stage": dict(b.clock.seconds),
        "stage_status": dict(b.clock.status),
        "seconds_total": round(time.perf_counter() - started, 3),
    }


def _as_dict(info: Any) -> dict[str, Any]:
    if isinstance(info, dict):
        return info
    if hasattr(info, "model_dump"):
        return info.model_dump(mode="json")
    return asdict(info) if is_dataclass(info) and not isinstance(info, type) else dict(vars(info))
