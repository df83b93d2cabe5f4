"""The synthetic index of ``bench/query_scale.py``: the graph of ``bench/graph_scale.py`` with chunk texts, its read
structures, the lexical index and every vector family (embedding-like vectors, each family's recall@10 against exact
search), written through the library's own writers, the graph and the lexical index each in a process of its own
(``--build-graph`` / ``--build-lexical``, run by :func:`build`), so the build's peak is one part's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute
import pyarrow.feather

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run from a checkout without installing
sys.path.insert(0, str(BENCH))

from graph_scale import _tree_bytes, make_graph, writer_pool_bytes  # noqa: E402

STAND_INS = ("llm.backend=scripted", "embedding.backend=hashing", "embedding.dim=64")
DIM = 64
WORDS = 200_000  # pseudo-words of the chunk texts
WORDS_PER_CHUNK = 60
ZIPF = 1.3


def config():
    from hxd2_ray.config.loading import load_shipped_config

    return load_shipped_config(STAND_INS + tuple(json.loads(os.environ.get("QUERY_SCALE_SET", "[]"))))


def word(i: int) -> str:
    return f"w{i:05d}x"


def chunk_texts(n_chunks: int, keys: pa.Array, rng: np.random.Generator) -> list[str]:
    """60 Zipf-drawn pseudo-words per chunk, and the keys of two entities."""
    vocab = [word(i) for i in range(WORDS)]
    draws = np.minimum(rng.zipf(ZIPF, (n_chunks, WORDS_PER_CHUNK)) - 1, WORDS - 1)
    named = rng.integers(0, len(keys), (n_chunks, 2))
    names = keys.to_pylist()
    return [
        f"{names[a]} " + " ".join(vocab[w] for w in row) + f" {names[b]}"
        for row, (a, b) in zip(draws.tolist(), named.tolist())
    ]


def embedding_like(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit vectors of dim 64 shaped like text embeddings: 200 clusters in a 32-dimensional latent space, projected,
    plus noise (isotropic random vectors leave a product quantizer nothing to learn, which no embedder does)."""
    latent, clusters = 32, 200
    shape = np.random.default_rng(7)  # one latent space for every family and size; rng draws the points
    proj = shape.standard_normal((latent, DIM)).astype(np.float32)
    centers = shape.standard_normal((clusters, latent)).astype(np.float32) * 2
    out = np.empty((n, DIM), np.float32)
    for lo in range(0, n, 500_000):  # bounded temporaries
        m = min(500_000, n - lo)
        z = centers[rng.integers(0, clusters, m)] + rng.standard_normal((m, latent), dtype=np.float32)
        block = z @ proj + 0.5 * rng.standard_normal((m, DIM), dtype=np.float32)
        out[lo : lo + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """Rows of the ``k`` largest inner products of each query, by brute force (blocks of 1M rows)."""
    best_s = np.full((len(queries), 0), -np.inf, np.float32)
    best_i = np.zeros((len(queries), 0), np.int64)
    for lo in range(0, len(vectors), 1_000_000):
        scores = queries @ vectors[lo : lo + 1_000_000].T
        top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        best_s = np.concatenate([best_s, np.take_along_axis(scores, top, 1)], axis=1)
        best_i = np.concatenate([best_i, top + lo], axis=1)
        keep = np.argsort(-best_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    return best_i


def family_recall(root: Path, family: str, keys: list[str], vectors: np.ndarray, rng: np.random.Generator) -> float:
    """recall@10 of the written family (its stored settings) against exact search, 100 held-out queries."""
    from hxd2_ray.vectors.faiss_index import FaissFamilyIndex

    queries = embedding_like(rng, 100)
    want = exact_top(vectors, queries)
    with FaissFamilyIndex.open(root, family) as index:
        got = index.search(queries, 10)
    return sum(len({k for k, _ in g} & {keys[i] for i in w}) for g, w in zip(got, want)) / (10 * len(queries))


def build_graph(root: Path, data: Path, n: int, seed: int) -> None:
    """The graph, its read structures and the bench's keys and texts (``data``), in a process of its own: its
    tables and Kùzu's buffer pool are gone when it exits, so the build's peak is the Kùzu load's alone."""
    from hxd2_ray.graph.kuzu_store import KuzuGraphWriter
    from hxd2_ray.graph.read_structures import READS_DIR
    from hxd2_ray.indexer.query_reads import write_query_reads

    rng = np.random.default_rng(seed)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    docs, chunks, ents, rels, syn, titles = make_graph(n, rng, names=os.environ.get("QUERY_SCALE_NAMES", "words"))
    texts = pa.array(chunk_texts(chunks.num_rows, ents["key"].combine_chunks(), rng), pa.string())
    chunks = chunks.set_column(chunks.schema.get_field_index("text"), "text", texts)
    data.mkdir(parents=True, exist_ok=True)
    pa.feather.write_feather(pa.table({"id": chunks["id"], "text": texts}), data / "chunks.arrow")
    pa.feather.write_feather(pa.table({"key": ents["key"]}), data / "entities.arrow")
    relation_keys = pa.compute.binary_join_element_wise(rels["source_key"], rels["target_key"], "\x1f")
    pa.feather.write_feather(pa.table({"key": relation_keys}), data / "relations.arrow")
    counts = {"documents": docs.num_rows, "chunks": chunks.num_rows, "entities": n, "relations": rels.num_rows}
    del texts, relation_keys
    seconds["data"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with KuzuGraphWriter(root / "graph.kuzu", buffer_pool_bytes=writer_pool_bytes(n)) as writer:
        writer.bulk_load(docs, chunks.drop_columns(["shard"]), ents, rels, syn, titles)
    seconds["kuzu_load"] = time.perf_counter() - t0
    del docs, chunks, ents, rels, syn, titles
    t0 = time.perf_counter()
    write_query_reads(root / "graph.kuzu", root / READS_DIR)
    seconds["read_structures"] = time.perf_counter() - t0
    (data / "graph.json").write_text(json.dumps({"seconds": seconds, "counts": counts, "peak_mb": _peak_mb()}))


def build_lexical(root: Path, data: Path) -> None:
    """The lexical index, in a process of its own (its token lists are the largest Python objects of the build)."""
    from hxd2_ray.retrieval.lexical import write_lexical

    t0 = time.perf_counter()
    table = pa.feather.read_table(data / "chunks.arrow")
    write_lexical(root, table["id"].to_pylist(), table["text"].to_pylist())
    (data / "lexical.json").write_text(json.dumps({"seconds": time.perf_counter() - t0, "peak_mb": _peak_mb()}))


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _step(step: str, root: Path, data: Path, *args: str) -> dict:
    subprocess.run([sys.executable, __file__, f"--{step}", str(root), str(data), *args], check=True)
    return json.loads((data / f"{step.removeprefix('build-')}.json").read_text())


def build(root: Path, n: int, seed: int) -> dict:
    from hxd2_ray.graph.read_structures import READS_DIR
    from hxd2_ray.index_store.manifest import build_manifest, write_manifest
    from hxd2_ray.vectors.faiss_index import write_family

    cfg = config()
    data = root.parent / f"{root.name}-data"
    graph = _step("build-graph", root, data, str(n), str(seed))
    lexical = _step("build-lexical", root, data)
    seconds = {**graph["seconds"], "lexical": lexical["seconds"]}
    peaks = {"graph": graph["peak_mb"], "lexical": lexical["peak_mb"]}
    counts = graph["counts"]
    rng = np.random.default_rng(seed + 1)
    infos, recall, family_s = {}, {}, {}
    for family, table in (
        ("entity_name", "entities"),
        ("entity_mix", "entities"),
        ("relation_keywords", "relations"),
        ("relation_mix", "relations"),
        ("chunk", "chunks"),
    ):
        column = "id" if table == "chunks" else "key"
        keys = pa.feather.read_table(data / f"{table}.arrow", columns=[column])[column].to_pylist()
        vectors = embedding_like(rng, len(keys))
        t0 = time.perf_counter()
        infos[family] = write_family(root, family, keys, vectors, cfg.vectors, seed=seed).to_dict()
        family_s[family] = time.perf_counter() - t0
        recall[family] = family_recall(root, family, keys, vectors, rng)
        del keys, vectors
        print(
            f"[{n:,}] {family}: {infos[family]['index_type']} {infos[family]['params']} in {family_s[family]:.1f}s, "
            f"recall@10 {recall[family]:.3f}",
            flush=True,
        )
    seconds["vectors"] = sum(family_s.values())
    peaks["vectors (the bench process)"] = _peak_mb()
    entity_keys = pa.feather.read_table(data / "entities.arrow")["key"].to_pylist()
    shutil.rmtree(data, ignore_errors=True)
    write_manifest(root, build_manifest(cfg, "bench", counts, infos))
    disk = {"graph.kuzu": _tree_bytes(root / "graph.kuzu"), "reads": _tree_bytes(root / READS_DIR)}
    disk.update({f"vectors: {f}": _tree_bytes(root / "vectors" / f) for f in infos})
    disk["lexical"] = _tree_bytes(root / "lexical")
    return {
        "counts": counts,
        "build_s": seconds,
        "family_s": family_s,
        "peak_mb": peaks,
        "disk_mb": {k: v / 2**20 for k, v in disk.items()},
        "index_types": {f: i["index_type"] for f, i in infos.items()},
        "vector_params": {f: i["params"] for f, i in infos.items()},
        "recall_at_10": recall,
        "entity_keys": entity_keys,
    }


if __name__ == "__main__":
    if sys.argv[1] == "--build-graph":
        build_graph(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "--build-lexical":
        build_lexical(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        raise SystemExit(f"usage: {sys.argv[0]} --build-graph ROOT DATA N SEED | --build-lexical ROOT DATA")
