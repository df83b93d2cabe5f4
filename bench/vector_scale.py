"""Vectors at scale: flat against IVF-PQ families of N synthetic vectors, shards memory-mapped or read whole.

    .venv/bin/python bench/vector_scale.py [--n 200000] [--dim 384] [--queries 200] [--nprobe 8,16,64]
        [--ivfpq-m 48,96,192] [--refine 0,4]

Prints, in one run, for each kind (flat, ivfpq with the default ``vectors.*`` settings): build time (plan, train,
add, write through ``write_family``), disk size, open time and the process's memory after opening and searching
(anonymous RSS: what the process owns; file RSS: page-cache pages it maps, shared with every process mapping the
same files) with the shards memory-mapped and read whole, single-query search p50 (``FaissFamilyIndex.search``,
k=10), and recall@10 of IVF-PQ against flat at several ``nprobe``, for each ``ivfpq_m`` with and without re-scoring
the best ``k * refine`` candidates against the full vectors (``vectors.ivfpq_refine``). Each open is measured in a
fresh process (so one open's freed memory does not hide the next one's). The vectors are embedding-like: clustered
in a 32-dimensional latent space projected to ``dim``, plus noise (isotropic noise in every dimension leaves a
product quantizer nothing to learn and is not what text embeddings look like). Data generation is not timed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.config import VectorsConfig
from hxd2_ray.vectors.base import family_dir
from hxd2_ray.vectors.faiss_index import FaissFamilyIndex, write_family

FAMILY = "chunk"


def embedding_like(n: int, dim: int, count_queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    latent, clusters = 32, 200
    proj = rng.standard_normal((latent, dim)).astype(np.float32)
    centers = rng.standard_normal((clusters, latent)).astype(np.float32) * 2

    def draw(count: int) -> np.ndarray:
        out = np.empty((count, dim), np.float32)
        for lo in range(0, count, 50_000):  # bounded temporaries
            m = min(50_000, count - lo)
            z = centers[rng.integers(0, clusters, m)] + rng.standard_normal((m, latent)).astype(np.float32)
            out[lo : lo + m] = z @ proj + 0.5 * rng.standard_normal((m, dim)).astype(np.float32)
        return out

    return draw(n), draw(count_queries)


def _memory() -> dict[str, int]:
    """RssAnon and RssFile of this process, in MiB."""
    out = {}
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(("RssAnon", "RssFile")):
                name, value = line.split(":")
                out[name] = int(value.split()[0]) // 1024
    return out


def child(root: str, queries_path: str, mmap: bool, nprobes: list[int], is_ivf: bool) -> dict:
    """One open in this fresh process: open time, memory after open and after the searches, search p50, hits."""
    q = np.load(queries_path)
    before = _memory()
    started = time.perf_counter()
    index = FaissFamilyIndex.open(root, FAMILY, mmap=mmap)
    open_s = time.perf_counter() - started
    opened = _memory()
    latencies, hits = [], {}
    for nprobe in nprobes if is_ivf else [0]:
        if is_ivf:
            import faiss  # the bench sets the search knob the family records, to sweep it

            for shard in getattr(index, "_shards"):
                faiss.extract_index_ivf(shard).nprobe = nprobe
        rows = []
        for row in q:
            t = time.perf_counter()
            rows.append([key for key, _ in index.search(row, 10)[0]])
            latencies.append((nprobe, time.perf_counter() - t))
        hits[str(nprobe)] = rows
    searched = _memory()
    p50 = {
        str(p): round(float(np.median([s for n, s in latencies if n == p])) * 1000, 2)
        for p in (nprobes if is_ivf else [0])
    }
    index.close()
    from hxd2_ray.vectors.faiss_index import _read_shard  # the shards alone, without the id map and keys

    started = time.perf_counter()
    shards = [_read_shard(path, mmap) for path in sorted(family_dir(root, FAMILY).glob("shard-*.faiss"))]
    shards_s = time.perf_counter() - started
    del shards
    return {
        "open_ms": round(open_s * 1000, 2),
        "shards_ms": round(shards_s * 1000, 2),
        "anon_mib_open": opened["RssAnon"] - before["RssAnon"],
        "anon_mib_searched": searched["RssAnon"] - before["RssAnon"],
        "file_mib_searched": searched["RssFile"] - before["RssFile"],
        "p50_ms": p50,
        "hits": hits,
    }


def _run_child(root: Path, queries: Path, mmap: bool, nprobes: list[int], is_ivf: bool) -> dict:
    args = [sys.executable, __file__, "--child", str(root), str(queries), "1" if mmap else "0", "1" if is_ivf else "0"]
    args += ["--nprobe", ",".join(map(str, nprobes))]
    proc = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def recall(got: list[list[str]], want: list[list[str]], k: int = 10) -> float:
    return sum(len(set(g[:k]) & set(w[:k])) for g, w in zip(got, want)) / (k * len(want))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000, help="vectors in the family (default 200,000)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--nprobe", default="8,16,64", help="IVF-PQ lists searched, swept (the family records 16)")
    ap.add_argument("--ivfpq-m", default="48,96,192", help="IVF-PQ bytes a vector (vectors.ivfpq_m), swept")
    ap.add_argument("--refine", default="0,4", help="vectors.ivfpq_refine values, swept (0: the codes' scores)")
    ap.add_argument("--work", default=None, help="folder for the families (default: a temp folder)")
    ap.add_argument("--child", nargs=4, metavar=("ROOT", "QUERIES", "MMAP", "IVF"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    nprobes = [int(p) for p in args.nprobe.split(",")]
    if args.child:
        root, queries, mmap, is_ivf = args.child
        print(json.dumps(child(root, queries, mmap == "1", nprobes, is_ivf == "1")))
        return

    work = Path(args.work or tempfile.mkdtemp(prefix="vector-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    x, q = embedding_like(args.n, args.dim, args.queries)
    np.save(work / "queries.npy", q)
    keys = [f"k{i}" for i in range(args.n)]
    print(f"{args.n:,} vectors of dim {args.dim}, {args.queries} queries, k=10, work folder {work}")
    results = {}
    variants = {"flat": VectorsConfig(index_type="flat")}
    for m in args.ivfpq_m.split(","):
        for refine in args.refine.split(","):
            cfg = VectorsConfig(index_type="ivfpq", ivfpq_m=int(m), ivfpq_refine=int(refine))
            variants[f"ivfpq m={m} refine={refine}"] = cfg
    for label, cfg in variants.items():
        kind = label.replace(" ", "-").replace("=", "")
        started = time.perf_counter()
        info = write_family(work / kind, FAMILY, keys, x, cfg)
        build_s = time.perf_counter() - started
        disk = sum(f.stat().st_size for f in family_dir(work / kind, FAMILY).iterdir())
        is_ivf = info.index_type == "ivfpq"
        opened = {
            mode: _run_child(work / kind, work / "queries.npy", mode == "mmap", nprobes, is_ivf)
            for mode in ("mmap", "read")
        }
        assert opened["mmap"]["hits"] == opened["read"]["hits"], "a mapped family answered differently"
        results[label] = opened["mmap"]["hits"]
        params = {
            k: v for k, v in info.params.items() if k in ("nlist", "nprobe", "m", "nbits", "refine", "train_size")
        }
        print(f"\n{label} ({info.index_type}, {info.num_shards} shards{', ' + str(params) if params else ''})")
        print(f"  build {build_s:.1f} s ({args.n / build_s:,.0f} vectors/s); disk {disk / 2**20:,.1f} MiB")
        for mode in ("mmap", "read"):
            r = opened[mode]
            p50 = ", ".join(f"{v} ms" + (f" (nprobe {p})" if is_ivf else "") for p, v in r["p50_ms"].items())
            print(
                f"  {mode:4}: open {r['open_ms']:8.1f} ms (shards {r['shards_ms']:8.1f} ms); own memory after open "
                f"{r['anon_mib_open']:5} MiB, after {args.queries} searches {r['anon_mib_searched']:5} MiB, plus "
                f"{r['file_mib_searched']:5} MiB of mapped page cache; search p50 {p50}"
            )
    want = results["flat"]["0"]
    for label, hits in results.items():
        if label != "flat":
            print(
                f"\nrecall@10 of {label} against flat: "
                + ", ".join(f"nprobe {p}: {recall(g, want):.3f}" for p, g in hits.items())
            )


if __name__ == "__main__":
    main()
