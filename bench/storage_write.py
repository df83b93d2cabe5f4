"""Storage write throughput: Kùzu bulk load and Faiss family writes, in entities per second.

    .venv/bin/python bench/storage_write.py [--sizes 10000,100000,300000] [--ivf-size 200000] [--dim 384]

Synthetic but realistically shaped data per N entities: N/40 documents, N/4 chunks of ~768 chars,
~200-char descriptions, 2 source chunks per entity (so ~2N MENTIONS), 1.5N relations, and two
N x dim vector families (entity_name, entity_mix) written with the default VectorsConfig (auto ->
flat at these sizes). "combined" = graph load + both entity families, the figure the index job pays
(target >= 50,000 entities/s). Data generation is not timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.config import VectorsConfig
from hxd2_ray.graph.kuzu_store import KuzuGraphStore, load_graph
from hxd2_ray.index_store import tables
from hxd2_ray.types import vector_id
from hxd2_ray.vectors.faiss_index import write_family

FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "


def make_tables(n: int, seed: int = 0) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    n_docs, n_chunks, n_rels = max(1, n // 40), max(1, n // 4), int(n * 1.5)
    doc_ids = [f"doc{i:08d}" for i in range(n_docs)]
    docs = pa.table(
        {
            "id": doc_ids,
            "source_id": doc_ids,
            "source_path": [f"/corpus/{d}.md" for d in doc_ids],
            "title": [f"Title {i}" for i in range(n_docs)],
            "n_chars": np.full(n_docs, 7680, np.int64),
        },
        schema=tables.DOCUMENTS,
    )
    chunk_ids = [f"chunk{i:09d}" for i in range(n_chunks)]
    chunk_text = (FILLER * 8)[:768]
    owner = rng.integers(0, n_docs, n_chunks)
    chunks = pa.table(
        {
            "id": chunk_ids,
            "doc_id": [doc_ids[d] for d in owner],
            "order": np.arange(n_chunks, dtype=np.int64) % 10,
            "start": (np.arange(n_chunks, dtype=np.int64) % 10) * 736,
            "text": [chunk_text] * n_chunks,
            "header_path": ["Intro > Part"] * n_chunks,
            "language": ["en"] * n_chunks,
            "shard": np.zeros(n_chunks, np.int64),
        },
        schema=tables.CHUNKS,
    )
    keys = [f"entity {i:09d}" for i in range(n)]
    srcs = rng.integers(0, n_chunks, (n, 2))
    desc = (FILLER * 3)[:200]
    ents = pa.table(
        {
            "key": keys,
            "name": [k.title() for k in keys],
            "type": ["concept"] * n,
            "description": [desc] * n,
            "source_chunk_ids": [[chunk_ids[a], chunk_ids[b]] for a, b in srcs],
            "mention_count": np.full(n, 2, np.int64),
            "name_truncated": np.zeros(n, bool),
        },
        schema=tables.ENTITIES,
    )
    a = rng.integers(0, n, n_rels)
    b = (a + 1 + rng.integers(0, n - 1, n_rels)) % n if n > 1 else a
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    rels = pa.table(
        {
            "source_key": [keys[i] for i in lo],
            "target_key": [keys[i] for i in hi],
            "description": [desc[:120]] * n_rels,
            "keywords": [["alpha", "beta"]] * n_rels,
            "weight": rng.random(n_rels) * 10,
            "source_chunk_ids": [[chunk_ids[0]]] * n_rels,
            "mention_count": np.ones(n_rels, np.int64),
        },
        schema=tables.RELATIONS,
    )
    return docs, chunks, ents, rels


def make_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)


def bench_size(n: int, dim: int, work: Path) -> dict:
    docs, chunks, ents, rels = make_tables(n)
    keys = ents["key"].to_pylist()
    v_name, v_mix = make_vectors(n, dim, 1), make_vectors(n, dim, 2)
    cfg = VectorsConfig()

    t0 = time.perf_counter()
    counts = load_graph(work / f"graph-{n}.kz", docs, chunks, ents, rels)
    t_graph = time.perf_counter() - t0
    with KuzuGraphStore(work / f"graph-{n}.kz") as store:  # sanity: what was loaded is there
        assert store.counts() == counts, (store.counts(), counts)

    t0 = time.perf_counter()
    info_name = write_family(work / f"vec-{n}", "entity_name", keys, v_name, cfg)
    t_name = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_family(work / f"vec-{n}", "entity_mix", keys, v_mix, cfg)
    t_mix = time.perf_counter() - t0
    # The same two families when the job passes EMBEDDINGS.vector_id instead of re-hashing the keys.
    ids = np.fromiter((vector_id(k) for k in keys), dtype=np.int64, count=n)
    t0 = time.perf_counter()
    write_family(work / f"vec-{n}", "entity_name", keys, v_name, cfg, ids=ids)
    write_family(work / f"vec-{n}", "entity_mix", keys, v_mix, cfg, ids=ids)
    t_ids = time.perf_counter() - t0
    shutil.rmtree(work / f"vec-{n}", ignore_errors=True)
    (work / f"graph-{n}.kz").unlink(missing_ok=True)
    return {
        "n": n,
        "counts": counts,
        "graph_s": t_graph,
        "name_s": t_name,
        "mix_s": t_mix,
        "ids_s": t_ids,
        "kind": info_name.index_type,
    }


def bench_family(n: int, dim: int, kind: str, work: Path) -> tuple[float, dict]:
    keys = [f"entity {i:09d}" for i in range(n)]
    vecs = make_vectors(n, dim, 3)
    t0 = time.perf_counter()
    info = write_family(work / f"fam-{kind}-{n}", "chunk", keys, vecs, VectorsConfig(index_type=kind))
    dt = time.perf_counter() - t0
    shutil.rmtree(work / f"fam-{kind}-{n}", ignore_errors=True)
    return dt, info.params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,300000", help="entity counts, comma-separated")
    ap.add_argument("--flat-size", type=int, default=100_000)
    ap.add_argument("--ivf-size", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    work = Path(tempfile.mkdtemp(prefix="hxd2-bench-"))
    started = time.perf_counter()
    try:
        print(f"dim={args.dim}  cpus={os.cpu_count()}  load average at start {os.getloadavg()[0]:.2f}")
        print(f"default VectorsConfig: {VectorsConfig().model_dump()}")
        print()
        print("Faiss single-family write (keys hashed, normalised, sharded, built, written):")
        print(f"{'kind':>6} {'vectors':>9} {'seconds':>8} {'vectors/s':>11}  params")
        for kind, n in (("flat", args.flat_size), ("ivf", args.ivf_size)):
            dt, params = bench_family(n, args.dim, kind, work)
            print(f"{kind:>6} {n:>9,} {dt:>8.2f} {n / dt:>11,.0f}  {params}")
        print()
        print("Kùzu bulk load (documents+chunks+entities+relations+mentions+part_of) and entity vector families:")
        head = (
            f"{'entities':>9} {'rels':>9} {'mentions':>9} {'kuzu s':>7} {'kuzu ent/s':>11} "
            f"{'faiss s':>8} {'faiss ent/s':>12} {'index':>6} {'combined ent/s':>15} {'(ids given)':>12}"
        )
        print(head)
        print("-" * len(head))
        for n in sizes:
            r = bench_size(n, args.dim, work)
            faiss_s = r["name_s"] + r["mix_s"]
            total = r["graph_s"] + faiss_s
            print(
                f"{n:>9,} {r['counts']['relations']:>9,} {r['counts']['mentions']:>9,} {r['graph_s']:>7.2f} "
                f"{n / r['graph_s']:>11,.0f} {faiss_s:>8.2f} {n / faiss_s:>12,.0f} {r['kind']:>6} "
                f"{n / total:>15,.0f} {n / (r['graph_s'] + r['ids_s']):>12,.0f}"
            )
        print()
        print("combined = Kùzu + Faiss writing entities/s (graph load + entity_name + entity_mix, run one after the")
        print("other); target >= 50,000. (ids given): the same with write_family(..., ids=EMBEDDINGS.vector_id).")
        print(f"total wall time {time.perf_counter() - started:.1f}s, load average at end {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
