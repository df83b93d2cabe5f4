"""Node, type and relation features for GraphFlow, embedded once per index with the index's own embedder.

* node: the entity's name (a chunk: its text, cut to ``chunk_text_chars``), one vector per node;
* type: the entity type (``movie``, ``person``; chunks are ``passage``), one vector per type;
* relation signature: three blocks ``[out | in | none]``, each the mean vector of the signature's labels in that
  direction (zeros when it has none), so direction is part of the feature whatever the embedder;
* question: embedded when asked (training embeds the whole question set once).

The walk graph and these vectors are cached under ``<cache_dir>/<key>/``, the key being the index's fingerprint,
build time and counts plus the embedder and the feature version, so a rebuilt index or another embedder never
reads a stale entry; a step never embeds anything. Every array is its own ``.npy`` file: the walk graph's
``graph-ptr.npy``, ``graph-target.npy``, ``graph-sig.npy``, ``graph-node_type.npy``, its keys, names and chunk
sources as :class:`~hxd2_ray.graphflow.walk_graph.StringColumn` parts (``graph-keys-data.npy``,
``graph-keys-offsets.npy``, ``graph-keys-order.npy``, ``graph-names-*.npy``, ``graph-chunk_sources-*.npy``), and
the vectors' ``features-node.npy``, ``features-type.npy``, ``features-sig.npy``. A reader memory-maps them
read-only (``np.load(..., mmap_mode="r")``): opening an entry reads no array whole and builds nothing per node, the
pages come from the page cache as they are touched and are shared by every process on the machine, and writing
into one raises. ``graph.json`` holds the small rest (type names, relation signatures, the embedder,
``graph_hash``). Written into a temp folder and renamed, so a cache entry is complete or absent. ``graph_hash`` (the
walk graph's keys, CSR arrays and signatures) is what a trained policy records to refuse another graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from hxd2_ray.graph.resident import ResidentGraph
from hxd2_ray.graphflow.walk_graph import WalkGraph

__all__ = [
    "FEATURE_VERSION",
    "GraphFeatures",
    "build_features",
    "embed_normalized",
    "graph_hash",
    "load_or_build_features",
    "question_features",
]

FEATURE_VERSION = 2  # 2: one memory-mapped .npy per array (1: graph.npz, features.npz)
DIRECTIONS = ("out", "in", "none")
Progress = Callable[[str], None]


def _log(msg: str) -> None:
    print(f"[graphflow] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class GraphFeatures:
    graph: WalkGraph
    node_vectors: np.ndarray  # [n_nodes, dim] float32, unit rows
    type_vectors: np.ndarray  # [n_types, dim]
    sig_vectors: np.ndarray  # [n_signatures, 3 * dim]
    embedder_id: str
    dim: int
    graph_hash: str
    index_fingerprint: str = ""


def embed_normalized(
    embedder: Any, texts: Sequence[str], batch_size: int = 1024, progress: Progress | None = None, what: str = "texts"
) -> np.ndarray:
    """Unit vectors of ``texts`` (float32 [n, dim]), identical texts embedded once, in batches."""
    dim = int(embedder.dim)
    distinct = list(dict.fromkeys(texts))
    out = np.zeros((len(distinct), dim), dtype=np.float32)
    started = time.perf_counter()
    for b in range(0, len(distinct), batch_size):
        out[b : b + batch_size] = np.asarray(embedder.embed(distinct[b : b + batch_size]), dtype=np.float32)
        if progress is not None and len(distinct) > batch_size and (b // batch_size) % 20 == 19:
            done = min(b + batch_size, len(distinct))
            progress(f"embedded {done:,}/{len(distinct):,} {what} ({time.perf_counter() - started:.0f}s)")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    out /= np.where(norms > 0, norms, 1.0)
    row = {t: i for i, t in enumerate(distinct)}
    return out[[row[t] for t in texts]] if len(distinct) != len(texts) else out


def question_features(embedder: Any, texts: Sequence[str], segments: int = 0) -> np.ndarray:
    """The frozen policy's question feature, float32 [n, dim * (1 + segments)]: the whole text's unit vector, then
    one unit vector for each of ``segments`` consecutive runs of its words (as equal as the word count allows; a
    run with no words is a zero vector). The runs keep the order a whole-text vector loses: in MetaQA's "what genres
    are the films written by the screenwriter of X" the last run names the first hop."""
    whole = embed_normalized(embedder, list(texts))
    if segments <= 0:
        return whole
    words = [text.split() for text in texts]
    runs = [[" ".join(part) for part in _runs(ws, segments)] for ws in words]
    flat = [run for per_text in runs for run in per_text]
    nonempty = [i for i, run in enumerate(flat) if run]
    parts = np.zeros((len(flat), whole.shape[1]), dtype=np.float32)
    if nonempty:
        parts[nonempty] = embed_normalized(embedder, [flat[i] for i in nonempty])
    return np.concatenate([whole, parts.reshape(len(texts), segments * whole.shape[1])], axis=1)


def _runs(words: Sequence[str], segments: int) -> list[Sequence[str]]:
    bounds = np.linspace(0, len(words), segments + 1).round().astype(int)
    return [words[bounds[i] : bounds[i + 1]] for i in range(segments)]


def graph_hash(graph: WalkGraph) -> str:
    h = hashlib.sha256()
    h.update("\x1f".join(graph.keys).encode())
    for arr in (graph.ptr, graph.target, graph.sig, graph.node_type):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(json.dumps([graph.signatures, graph.type_names, graph.n_entities]).encode())
    return h.hexdigest()[:16]


def build_features(
    graph: WalkGraph, embedder: Any, node_texts: Sequence[str], progress: Progress | None = _log
) -> GraphFeatures:
    """Embed every node text, type and relation label of ``graph`` (``node_texts`` aligned with its nodes)."""
    if len(node_texts) != graph.n_nodes:
        raise ValueError(f"{len(node_texts)} node texts for {graph.n_nodes} nodes")
    dim = int(embedder.dim)
    say = progress or (lambda _m: None)
    say(
        f"embedding {graph.n_nodes:,} node texts, {len(graph.type_names)} types, {len(graph.signatures):,} "
        f"relation signatures ({getattr(embedder, 'model_id', type(embedder).__name__)})"
    )
    nodes = embed_normalized(embedder, list(node_texts), progress=progress, what="node texts")
    types = embed_normalized(embedder, graph.type_names)
    labels = sorted({label for s in graph.signatures for label, _ in s})
    label_vec = dict(zip(labels, embed_normalized(embedder, labels))) if labels else {}
    sigs = np.zeros((len(graph.signatures), 3 * dim), dtype=np.float32)
    for i, s in enumerate(graph.signatures):
        for d, direction in enumerate(DIRECTIONS):
            mine = [label_vec[label] for label, dr in s if dr == direction]
            if mine:
                sigs[i, d * dim : (d + 1) * dim] = np.mean(mine, axis=0)
    return GraphFeatures(
        graph=graph,
        node_vectors=nodes,
        type_vectors=types,
        sig_vectors=sigs,
        embedder_id=str(getattr(embedder, "model_id", type(embedder).__name__)),
        dim=dim,
        graph_hash=graph_hash(graph),
    )


# ---------------------------------------------------------------------------------------------- per index


def default_cache_dir(configured: str | None) -> Path:
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("HXD2_GRAPHFLOW_CACHE") or Path.home() / ".cache" / "hxd2" / "graphflow")


def cache_key(manifest: Any, embedder: Any, chunk_text_chars: int) -> str:
    ident = {
        "fingerprint": manifest.fingerprint,
        "created_at": manifest.created_at,
        "counts": manifest.counts,
        "embedder": [str(getattr(embedder, "model_id", "")), int(embedder.dim)],
        "chunk_text_chars": chunk_text_chars,
        "version": FEATURE_VERSION,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]


def walk_graph_of_index(index: Any) -> tuple[WalkGraph, list[str]]:
    """The walk graph of an open index and every node's text (entity name; chunk text). Needs the graph held in
    memory; an index opened with ``resident_graph: off`` (or over the size limit) is scanned into memory here."""
    graph = index.graph
    if not isinstance(graph, ResidentGraph):
        _log("the index graph is read through Kùzu; holding a resident copy for GraphFlow")
        graph = ResidentGraph.from_tables(graph, graph.scan_tables())
    arrays = graph.arrays()
    chunk_rows = graph.get_chunks(arrays.chunk_ids) if arrays.chunk_ids else []
    walk = WalkGraph.from_resident(arrays, chunk_rows)
    texts = {r["id"]: r["text"] for r in chunk_rows}
    node_texts = list(walk.names[: walk.n_entities]) + [texts.get(c, c) for c in arrays.chunk_ids]
    return walk, node_texts


def load_or_build_features(
    index: Any,
    embedder: Any,
    *,
    cache_dir: str | None = None,
    chunk_text_chars: int = 1000,
    progress: Progress | None = _log,
) -> GraphFeatures:
    """The features of ``index`` from the cache, built (and cached) on a miss."""
    folder = default_cache_dir(cache_dir) / cache_key(index.manifest, embedder, chunk_text_chars)
    say = progress or (lambda _m: None)
    if (folder / COMPLETE_MARK).exists():
        started = time.perf_counter()
        feats = _read(folder)
        say(f"features read from {folder} in {time.perf_counter() - started:.1f}s")
        return feats
    started = time.perf_counter()
    walk, node_texts = walk_graph_of_index(index)
    say(
        f"walk graph: {walk.n_nodes:,} nodes, {walk.n_entries:,} moves, {len(walk.signatures):,} relation "
        f"signatures in {time.perf_counter() - started:.1f}s"
    )
    node_texts = [t[:chunk_text_chars] for t in node_texts]
    feats = build_features(walk, embedder, node_texts, progress=progress)
    feats = GraphFeatures(**{**feats.__dict__, "index_fingerprint": index.manifest.fingerprint})
    _write(folder, feats)
    say(f"features cached in {folder} ({time.perf_counter() - started:.1f}s)")
    return feats


# a StringColumn's arrays: its strings' UTF-8 bytes, where each one starts
STRING_PARTS: dict[str, type[np.generic]] = {"data": np.uint8, "offsets": np.int64}
# array name in the entry (graph-<name>.npy, features-<name>.npy) -> the dtype it is written with and read back as
GRAPH_ARRAYS: dict[str, type[np.generic]] = {
    "ptr": np.int64,
    "target": np.int32,
    "sig": np.int32,
    "node_type": np.int32,
    **{f"{name}-{part}": dt for name in ("keys", "names", "chunk_sources") for part, dt in STRING_PARTS.items()},
    "keys-order": np.int64,
}
FEATURE_ARRAYS: dict[str, type[np.generic]] = {"node": np.float32, "type": np.float32, "sig": np.float32}
COMPLETE_MARK = "graph.json"  # any file would do: the entry appears whole, by one rename


def _write(folder: Path, feats: GraphFeatures) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        arrays, meta = feats.graph.to_arrays()
        for name, dtype in GRAPH_ARRAYS.items():
            np.save(tmp / f"graph-{name}.npy", np.ascontiguousarray(arrays[name], dtype=dtype))
        vectors = {"node": feats.node_vectors, "type": feats.type_vectors, "sig": feats.sig_vectors}
        for name, dtype in FEATURE_ARRAYS.items():
            np.save(tmp / f"features-{name}.npy", np.ascontiguousarray(vectors[name], dtype=dtype))
        meta.update(
            embedder_id=feats.embedder_id,
            dim=feats.dim,
            graph_hash=feats.graph_hash,
            index_fingerprint=feats.index_fingerprint,
            version=FEATURE_VERSION,
        )
        (tmp / "graph.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / COMPLETE_MARK).exists():  # not another process finishing first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _mapped(path: Path, dtype: type[np.generic]) -> np.ndarray:
    """The array in ``path``, memory-mapped read-only (a plain ndarray view of the map, not an ``np.memmap``)."""
    arr = np.asarray(np.load(path, mmap_mode="r"))
    if arr.dtype != dtype:
        raise ValueError(f"{path} holds {arr.dtype}, expected {np.dtype(dtype)}")
    return arr


def _read(folder: Path) -> GraphFeatures:
    meta = json.loads((folder / "graph.json").read_text(encoding="utf-8"))
    graph_arrays = {name: _mapped(folder / f"graph-{name}.npy", dt) for name, dt in GRAPH_ARRAYS.items()}
    walk = WalkGraph.from_arrays(graph_arrays, meta)  # same dtypes: from_arrays keeps the maps, copies nothing
    vectors = {name: _mapped(folder / f"features-{name}.npy", dt) for name, dt in FEATURE_ARRAYS.items()}
    return GraphFeatures(
        graph=walk,
        node_vectors=vectors["node"],
        type_vectors=vectors["type"],
        sig_vectors=vectors["sig"],
        embedder_id=meta["embedder_id"],
        dim=int(meta["dim"]),
        graph_hash=meta["graph_hash"],
        index_fingerprint=meta.get("index_fingerprint", ""),
    )
