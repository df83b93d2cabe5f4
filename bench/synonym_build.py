"""Index-time cost of SYNONYM edges: kNN of every entity name against the entity_name family, at scale.

    .venv/bin/python bench/synonym_build.py [--sizes 100000,1000000] [--dim 384] [--k 10] [--threshold 0.85]

Per size N: N random unit name vectors (MiniLM's 384 dimensions by default), of which --planted (5%) are
near-copies of another name (cosine ~0.95: "Lilu" / "Lilu (mythology)"), written as the index job writes the
family (2 shards; flat up to --ivf-from, IVF from there on, as configs/local.yaml's ``vectors.index_type: auto``
does at 200k vectors per shard), then :func:`hxd2_ray.graph_assembly.synonyms.synonym_edges` over all N, as the write
stage runs it. Reported: family write seconds, synonym seconds, entities/s, edges found, and the share of planted
pairs found (IVF probes a few lists, so it can miss some) with the load average beside them.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.config import SynonymConfig, VectorsConfig
from hxd2_ray.graph_assembly.synonyms import synonym_edges


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def run(n: int, args: argparse.Namespace, work: Path) -> dict:
    from hxd2_ray.vectors.faiss_index import FaissFamilyIndex, write_family

    rng = np.random.default_rng(args.seed)
    vectors = unit(rng.standard_normal((n, args.dim), dtype=np.float32))
    planted = int(n * args.planted)
    originals = rng.choice(n, planted, replace=False)
    copies = rng.choice(np.setdiff1d(np.arange(n), originals), planted, replace=False)
    # A near-copy: the original plus a little noise (cosine about 0.95 at this noise level).
    vectors[copies] = unit(vectors[originals] + 0.33 * unit(rng.standard_normal((planted, args.dim), dtype=np.float32)))
    keys = [f"entity {i:08d}" for i in range(n)]
    index_type = "ivf" if n >= args.ivf_from else "flat"
    cfg = VectorsConfig(num_shards=2, index_type=index_type, ivf_nprobe=args.nprobe)
    root = work / f"n{n}"
    t0 = time.perf_counter()
    write_family(root, "entity_name", keys, vectors, cfg)
    write_s = time.perf_counter() - t0
    family = FaissFamilyIndex.open(root, "entity_name")
    try:
        t0 = time.perf_counter()
        edges = synonym_edges(
            keys,
            vectors,
            family,
            SynonymConfig(k=args.k, threshold=args.threshold),
            progress=lambda m: print(f"  {m}", flush=True),
        )
        syn_s = time.perf_counter() - t0
    finally:
        family.close()
        shutil.rmtree(root, ignore_errors=True)
    found = {(s, t) for s, t in zip(edges.column("source_key").to_pylist(), edges.column("target_key").to_pylist())}
    want = {tuple(sorted((keys[a], keys[b]))) for a, b in zip(originals, copies)}
    return {
        "n": n,
        "index": index_type,
        "write_s": write_s,
        "synonym_s": syn_s,
        "edges": edges.num_rows,
        "planted_found": len(found & want) / max(1, len(want)),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threshold", type=float, default=0.85)
    ap.add_argument("--planted", type=float, default=0.05, help="share of names that are near-copies of another")
    ap.add_argument("--ivf-from", type=int, default=400_000, help="IVF shards from this many names (2 shards)")
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hxd2-synonym-bench-"))
    print(
        f"dim={args.dim} k={args.k} threshold={args.threshold} cpus={os.cpu_count()} "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'entities':>10} {'index':>5} {'write s':>8} {'synonyms s':>10} {'entities/s':>10} {'edges':>9} "
        f"{'planted found':>13} {'load':>5}"
    )
    try:
        for n in (int(s) for s in args.sizes.split(",") if s):
            r = run(n, args, work)
            print(
                f"{r['n']:>10,} {r['index']:>5} {r['write_s']:>8.1f} {r['synonym_s']:>10.1f} "
                f"{r['n'] / r['synonym_s']:>10,.0f} {r['edges']:>9,} {r['planted_found']:>13.3f} "
                f"{r['load']:>5.1f}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
