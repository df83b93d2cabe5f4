"""A complete, queryable index straight from a ``subject|relation|object`` triple file (the MetaQA KB): no NER.

The triples become ENTITIES / RELATIONS staging tables (:func:`hxd2_ray.logic.metaqa.triples_to_tables`),
which are bulk-loaded into Kùzu with the project's loader and embedded into the same vector families the
index job writes (:func:`hxd2_ray.graph_assembly.embedding_texts.embedding_inputs`; the ``chunk`` family is written
empty, since a KB has no documents). The result is laid out exactly like ``jobs/index.py``'s output, so
:func:`hxd2_ray.retrieval.index.open_index`, the dual-level ``QueryPipeline`` and the logic-form executor
query it unchanged::

    <output>/graph.kuzu  vectors/<family>/...  index_summary.json  manifest.json

Everything is built into a temporary sibling folder with ``manifest.json`` written last, then renamed into
place, so an interrupted build never leaves a folder that reads as a complete index. Plain Python, no Ray:
one embedder in this process, texts embedded in batches (identical texts once: most relation-keyword texts
repeat) in length order to keep padding low.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow.compute as pc

from hxd2_ray.config import HxdConfig, embedding_model_id, llm_model_id, synonym_factors, vector_factors
from hxd2_ray.errors import HxdError
from hxd2_ray.graph.read_structures import READS_DIR
from hxd2_ray.graph_assembly.embedding_texts import embedding_inputs
from hxd2_ray.graph_assembly.synonyms import synonym_edges
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.disk_space import WriteSeam, estimate_graph_bytes, isolated_write
from hxd2_ray.index_store.manifest import IndexManifest, read_manifest, record_files, write_manifest
from hxd2_ray.indexer.query_reads import write_query_reads
from hxd2_ray.logic.metaqa import empty_chunks, empty_documents, read_triples, triples_to_tables
from hxd2_ray.progress import NO_BOARD, NO_COUNTER, BoardCounter, StageBoard, StageCounter
from hxd2_ray.retrieval.refusal_calibration import calibrate_build
from hxd2_ray.wiring import build_embedder

log = logging.getLogger(__name__)

__all__ = ["KB_PROMPT_VERSION", "build_kb_index", "embed_texts", "kb_fingerprint"]

# No extraction prompt shapes a KB index; the manifest records this instead of a prompt-set hash.
KB_PROMPT_VERSION = "kb-triples-no-ner"
# Texts per embedder call. Large on purpose: FlagModel.encode runs the first (longest) sub-batch of every call
# twice (a batch-size probe), which costs +50% on calls of 2 sub-batches and ~6% on 2048 texts.
DEFAULT_EMBED_CALL_SIZE = 2048

Progress = Callable[[str], None]


def _log(msg: str) -> None:
    print(f"[hxd2 index-kb] {msg}", file=sys.stderr, flush=True)


def file_sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def kb_fingerprint(cfg: HxdConfig, triples_sha256: str, limit_entities: int | None) -> str:
    """Hash of what shapes a KB index: the triple file's content, the subset, name normalisation, the
    embedding model and dimension, and the vector layout."""
    factors = {
        "kind": "kb-triples",
        "triples_sha256": triples_sha256,
        "limit_entities": limit_entities,
        "extraction": cfg.extraction.model_dump(mode="json", include={"max_entity_name_chars"}),
        "embedding": [embedding_model_id(cfg.embedding), cfg.embedding.dim],
        "vectors": vector_factors(cfg.vectors),
        "synonyms": synonym_factors(cfg.synonyms),
    }
    blob = json.dumps(factors, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def embed_texts(
    embedder: Any,
    texts: list[str],
    *,
    batch_size: int,
    log_every: int = 20,
    progress: Progress | None = _log,
    max_retries: int = 2,
    counter: StageCounter = NO_COUNTER,
) -> np.ndarray:
    """Embed ``texts`` (assumed distinct) in batches, shortest first; rows come back in input order.

    A progress line every ``log_every`` batches (and at the end); a batch that fails is retried
    ``max_retries`` times, then the build fails with the embedder's error.
    """
    dim = int(embedder.dim)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    order = np.argsort(np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts)), kind="stable")
    batch_size = max(1, int(batch_size))
    n_batches = (len(texts) + batch_size - 1) // batch_size
    started = time.perf_counter()
    for b in range(n_batches):
        idx = order[b * batch_size : (b + 1) * batch_size]
        batch = [texts[i] for i in idx]
        for attempt in range(max_retries + 1):
            try:
                vectors = np.asarray(embedder.embed(batch), dtype=np.float32)
                if vectors.shape != (len(batch), dim):
                    raise ValueError(f"embedder returned {vectors.shape}, expected ({len(batch)}, {dim})")
                break
            except Exception as exc:
                if attempt == max_retries:
                    raise HxdError(
                        f"embedding batch {b + 1}/{n_batches} failed after {max_retries + 1} "
                        f"attempts: {type(exc).__name__}: {exc}"
                    ) from exc
                log.warning(
                    "embedding batch %d/%d failed (%s: %s); trying again (%d/%d)",
                    b + 1,
                    n_batches,
                    type(exc).__name__,
                    exc,
                    attempt + 1,
                    max_retries,
                )
        out[idx] = vectors
        counter.add(done=len(batch))
        done = b + 1
        if progress is not None and (done % max(1, log_every) == 0 or done == n_batches):
            n = min(done * batch_size, len(texts))
            elapsed = time.perf_counter() - started
            rate = n / elapsed if elapsed > 0 else float("inf")
            eta = (len(texts) - n) / rate if rate > 0 else 0.0
            progress(
                f"embedded {n:,}/{len(texts):,} texts (batch {done}/{n_batches}, {rate:,.0f} texts/s, "
                f"{elapsed:,.0f}s elapsed, ~{eta:,.0f}s left)"
            )
    return out


def _check_output(output: Path, overwrite: bool) -> None:
    if output.is_file():
        raise HxdError(f"{output} is a file, not an index folder")
    if not output.is_dir() or overwrite:
        return
    if (output / "manifest.json").exists():
        raise HxdError(
            f"{output} already holds an index (manifest.json present); pass --overwrite to replace it "
            "or choose another --output"
        )
    if any(output.iterdir()):
        raise HxdError(
            f"{output} exists and is not empty (no manifest.json: a partial or unrelated folder); "
            "pass --overwrite to replace it or choose another --output"
        )


def _swap_into_place(build_dir: Path, output: Path) -> None:
    """Rename the finished build to ``output``; an old folder there (overwrite, or empty) goes last."""
    old: Path | None = None
    if output.exists():
        old = output.with_name(f".{output.name}.replaced-{uuid.uuid4().hex[:8]}")
        os.replace(output, old)
    try:
        os.replace(build_dir, output)
    except BaseException:
        if old is not None:
            os.replace(old, output)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def build_kb_index(
    cfg: HxdConfig,
    triples_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    limit_entities: int | None = None,
    overwrite: bool = False,
    progress: Progress | None = _log,
    batch_size: int = DEFAULT_EMBED_CALL_SIZE,
    log_every: int = 2,
    embedder: Any = None,
    board: StageBoard = NO_BOARD,
) -> dict[str, Any]:
    """Build a queryable index from a triple file at the local folder ``output_dir``; returns the summary
    (also written as ``index_summary.json``).

    Lines that are not ``subject|relation|object`` are skipped and counted (``malformed_lines``).
    ``limit_entities``: a closed subgraph of at most this many entities (see :func:`read_triples`).
    Refuses an ``output_dir`` that holds anything (an index or not) unless ``overwrite``.
    ``batch_size``: texts per embedder call (the embedder splits it into ``embedding.batch_size`` model
    batches); a progress line every ``log_every`` calls. ``embedder``: an already-built embedder (default
    ``wiring.build_embedder(cfg.embedding)``). ``board``: the stages (read, embed, graph, vectors) as they run.
    """
    from hxd2_ray.graph.kuzu_store import bulk_load_pool_bytes, load_graph
    from hxd2_ray.vectors.faiss_index import FaissFamilyIndex, write_family

    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    triples_path = Path(triples_path)
    if "://" in os.fspath(output_dir):
        raise HxdError("index-kb writes a local folder; copy it to object storage afterwards")
    output = Path(output_dir).expanduser().absolute()
    if not triples_path.is_file():
        raise HxdError(f"no triple file at {triples_path}")
    _check_output(output, overwrite)
    if embedder is None:
        embedder = build_embedder(cfg.embedding)
    if int(embedder.dim) != cfg.embedding.dim:
        raise HxdError(f"the embedder's dimension {embedder.dim} differs from embedding.dim {cfg.embedding.dim}")

    # ------------------------------------------------------------------ triples -> tables
    t0 = time.perf_counter()
    board.begin("read", unit="triples")
    digest = file_sha256(triples_path)
    malformed: list[str] = []
    triples = read_triples(triples_path, limit_entities=limit_entities, cfg=cfg.extraction, malformed=malformed)
    entities, relations = triples_to_tables(triples, cfg=cfg.extraction)
    seconds["read"] = round(time.perf_counter() - t0, 3)
    board.add("read", done=len(triples), malformed=len(malformed))
    board.end("read", f"{entities.num_rows:,} entities, {relations.num_rows:,} edges")
    say(
        f"read {len(triples):,} triples ({len(malformed):,} malformed lines skipped) -> "
        f"{entities.num_rows:,} entities, {relations.num_rows:,} edges in {seconds['read']:.1f}s"
    )
    if entities.num_rows == 0:
        raise HxdError(f"no usable triple in {triples_path} ({len(malformed)} malformed lines); no index written")
    edge_facts = int(pc.sum(relations.column("mention_count")).as_py() or 0)

    # ------------------------------------------------------------------ embed (distinct texts once)
    t0 = time.perf_counter()
    inputs = embedding_inputs(entities, relations, empty_chunks())
    all_texts = inputs.column("text").to_pylist()
    position: dict[str, int] = {}
    row_of = np.fromiter(
        (position.setdefault(t, len(position)) for t in all_texts), dtype=np.int64, count=len(all_texts)
    )
    distinct = list(position)
    del position
    say(
        f"embedding {len(distinct):,} distinct texts for {len(all_texts):,} vectors "
        f"({embedding_model_id(cfg.embedding)}, dim {cfg.embedding.dim})"
    )
    board.begin("embed", total=len(distinct), unit="texts")
    vectors = embed_texts(
        embedder,
        distinct,
        batch_size=batch_size,
        log_every=log_every,
        progress=progress,
        counter=BoardCounter(board, "embed"),
    )
    seconds["embed"] = round(time.perf_counter() - t0, 3)
    board.end("embed", f"for {len(all_texts):,} vectors")

    # ------------------------------------------------------------------ write into a temp folder
    t0 = time.perf_counter()
    output.parent.mkdir(parents=True, exist_ok=True)
    build_dir = Path(tempfile.mkdtemp(prefix=f".{output.name}.building-", dir=output.parent))
    # A full or read-only disk ends as one error naming the path and the space needed, as in a build (disk_space).
    seam = WriteSeam(
        str(output.parent),
        int(vectors.nbytes) + estimate_graph_bytes((entities, relations)),
        rerun=f"run the same command again (nothing was written to {output})",
    )
    try:
        board.begin("vectors", total=len(tables.VECTOR_FAMILIES), unit="families")
        families: dict[str, dict[str, Any]] = {}
        fam_col = inputs.column("family")
        name_vectors: tuple[list[str], np.ndarray] = ([], np.zeros((0, cfg.embedding.dim), np.float32))
        for family in tables.VECTOR_FAMILIES:
            mask = pc.equal(fam_col, family)
            keys = inputs.column("key").filter(mask).to_pylist()
            rows = row_of[np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)]
            arr = vectors[rows] if keys else np.zeros((0, cfg.embedding.dim), np.float32)
            info = write_family(build_dir, family, keys, arr, cfg.vectors)
            families[family] = info.to_dict()
            if family == "entity_name":
                name_vectors = (keys, arr)
            say(f"vector family {family}: {info.count:,} vectors ({info.index_type}, {info.num_shards} shards)")
            board.add("vectors", done=1)
        board.end("vectors")
        seconds["vectors"] = round(time.perf_counter() - t0, 3)

        t0 = time.perf_counter()
        name_family = FaissFamilyIndex.open(build_dir, "entity_name")
        try:
            synonyms = synonym_edges(*name_vectors, name_family, cfg.synonyms, progress=progress)
        finally:
            name_family.close()
        seconds["synonyms"] = round(time.perf_counter() - t0, 3)
        say(f"{synonyms.num_rows:,} synonym edges in {seconds['synonyms']:.1f}s")

        t0 = time.perf_counter()
        board.begin("graph")
        # Kùzu may abort the process on a failed write: refuse first when the room is plainly missing, and load
        # in a child process, which an abort ends alone.
        graph = (empty_documents(), empty_chunks(), entities, relations, synonyms)
        seam.check_room(str(build_dir), estimate_graph_bytes(graph), "the graph")
        graph_path = str(build_dir / "graph.kuzu")
        pool = bulk_load_pool_bytes(sum(t.nbytes for t in graph), cfg.graph.build_buffer_pool_mb)
        load = functools.partial(
            load_graph, graph_path, *graph[:4], synonyms=synonyms, engine=cfg.graph.backend, buffer_pool_bytes=pool
        )
        counts = isolated_write(load, "the graph", graph_path, seam)
        board.end("graph", f"{counts['entities']:,} entities, {counts['relations']:,} edges")
        # What every query process maps instead of building its own copy (hxd2_ray.graph.read_structures).
        write_query_reads(build_dir / "graph.kuzu", build_dir / READS_DIR, cfg.graph.backend)
        seconds["graph"] = round(time.perf_counter() - t0, 3)
        say(f"graph loaded: {counts['entities']:,} entities, {counts['relations']:,} edges in {seconds['graph']:.1f}s")
        # A KB has no chunks: its questions are made from the edge descriptions ("S --rel--> O").
        refusal = calibrate_build(
            build_dir,
            relations.column("description"),
            embedder=embedder,
            progress=progress,
            graph_backend=cfg.graph.backend,
        )

        fingerprint = kb_fingerprint(cfg, digest, limit_entities)
        summary: dict[str, Any] = {
            "kind": "kb-triples",
            "input": str(triples_path),
            "output": str(output),
            "fingerprint": fingerprint,
            "triples_sha256": digest,
            "prompt_version": KB_PROMPT_VERSION,
            "llm_model": llm_model_id(cfg.llm),
            "embedding_model": embedding_model_id(cfg.embedding),
            "embedding_dim": cfg.embedding.dim,
            "limit_entities": limit_entities,
            "triples": len(triples),
            "malformed_lines": len(malformed),
            "malformed_examples": malformed[:5],
            "edge_facts": edge_facts,
            "dropped_triples": len(triples) - edge_facts,  # self-loops and names that normalise to nothing
            "documents": counts["documents"],
            "chunks": counts["chunks"],
            "entities": counts["entities"],
            "relations": counts["relations"],
            "embedded_texts": len(distinct),
            "vectors": {f: info.get("count", 0) for f, info in families.items()},
            "synonym_edges": synonyms.num_rows,
            "synonyms": synonym_factors(cfg.synonyms),
            "refusal_calibration": refusal,
            "seconds_per_stage": seconds,
        }
        summary["seconds_total"] = round(time.perf_counter() - started, 3)
        (build_dir / "index_summary.json").write_text(
            json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        manifest = IndexManifest.create(
            fingerprint=fingerprint,
            prompt_version=KB_PROMPT_VERSION,
            llm_model_id=llm_model_id(cfg.llm),
            embedding_model_id=embedding_model_id(cfg.embedding),
            embedding_dim=cfg.embedding.dim,
            counts={k: summary[k] for k in ("documents", "chunks", "entities", "relations")},
            vector_families=families,
            config=cfg.model_dump(mode="json"),
            files=record_files(build_dir),
            synonyms={**synonym_factors(cfg.synonyms), "edges": synonyms.num_rows},
            refusal=refusal if refusal and "error" not in refusal else None,
            graph_backend=cfg.graph.backend,
        )
        write_manifest(build_dir, manifest)  # last file of the build
        read_manifest(build_dir)
        _check_output(output, overwrite)  # nothing appeared there while we were building
        _swap_into_place(build_dir, output)
    except (OSError, RuntimeError) as exc:
        error = seam.translated(exc, "the index", str(build_dir))
        if error is None:
            raise
        raise error from exc
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    say(f"index written to {output} in {summary['seconds_total']:.1f}s")
    return summary
