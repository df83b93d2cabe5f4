"""The lexical index's build: time and peak memory, bm25s' own ``index`` against the array build the index job uses.

    .venv/bin/python bench/lexical_build.py [--chunks 250000,1000000]

Per size, the chunk texts of ``bench/query_scale.py`` (``bench/query_scale_index.py``: 60 words drawn from a Zipf
law over 200,000 pseudo-words, plus two entity keys; 4 chunks per 16 entities) are written to a file, then each
build runs in a fresh process that reads them and builds:

* ``bm25s index()``: what ``LexicalIndex.build`` did before: every chunk's tokens as a Python list, the vocabulary
  numbered in sorted order, ``bm25s.BM25.index`` over the id lists;
* ``array build``: ``LexicalIndex.build`` (``hxd2_ray.retrieval.bm25_matrix``): ids as they are read, the matrix
  over flat arrays.

Printed per size and build: seconds (reading the texts excluded) and the process's peak resident set above what it
held after reading the texts (``ru_maxrss``), and whether the two score matrices are equal (they must be).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_texts(path: Path, chunks: int, seed: int = 0) -> None:
    from query_scale_index import chunk_texts

    keys = pa.array([f"e{i:09d}" for i in range(chunks * 4)])
    texts = chunk_texts(chunks, keys, np.random.default_rng(seed))
    pa.feather.write_feather(pa.table({"id": [f"chunk{i:09d}" for i in range(chunks)], "text": texts}), path)


def build(kind: str, texts_file: Path, out: Path) -> dict:
    """One build in this (fresh) process; the matrix's arrays saved to ``out`` for the comparison."""
    table = pa.feather.read_table(texts_file)
    ids, texts = table["id"].to_pylist(), table["text"].to_pylist()
    del table
    base_mb = _peak_mb()
    started = time.perf_counter()
    if kind == "bm25s":
        import bm25s

        from hxd2_ray.retrieval.lexical import lexical_tokens

        tokens = [lexical_tokens(t or "") or [""] for t in texts]
        vocab = {token: i for i, token in enumerate(sorted({t for doc in tokens for t in doc}))}
        bm25 = bm25s.BM25()
        bm25.index(([[vocab[t] for t in doc] for doc in tokens], vocab), show_progress=False)
        scores = bm25.scores
    else:
        from hxd2_ray.retrieval.lexical import LexicalIndex

        scores = LexicalIndex.build(ids, texts).bm25.scores
    seconds = time.perf_counter() - started
    peak = _peak_mb()
    np.savez(out, data=scores["data"], indices=scores["indices"], indptr=scores["indptr"])
    return {"seconds": seconds, "peak_above_texts_mb": peak - base_mb, "peak_mb": peak}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--build":
        print(json.dumps(build(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="250000,1000000", help="sizes, comma-separated")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hxd2-lexical-build-"))
    rows = []
    for n in (int(s) for s in args.chunks.split(",")):
        texts_file = work / f"texts-{n}.arrow"
        write_texts(texts_file, n)
        result = {}
        for kind in ("bm25s", "array"):
            out = work / f"{kind}-{n}.npz"
            proc = subprocess.run(
                [sys.executable, __file__, "--build", kind, str(texts_file), str(out)],
                check=True,
                capture_output=True,
                text=True,
            )
            result[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"[{n:,} chunks] {kind}: {result[kind]}", flush=True)
        with np.load(work / f"bm25s-{n}.npz") as a, np.load(work / f"array-{n}.npz") as b:
            equal = all(np.array_equal(a[k], b[k]) for k in ("data", "indices", "indptr"))
        rows.append((n, result, equal))
        for f in work.glob(f"*-{n}.*"):
            f.unlink()
    print("\n| chunks | bm25s index() s | peak MB | array build s | peak MB | memory ratio | same matrix |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for n, r, equal in rows:
        old, new = r["bm25s"], r["array"]
        print(
            f"| {n:,} | {old['seconds']:.1f} | {old['peak_above_texts_mb']:,.0f} | {new['seconds']:.1f} "
            f"| {new['peak_above_texts_mb']:,.0f} | {old['peak_above_texts_mb'] / new['peak_above_texts_mb']:.1f}x "
            f"| {'yes' if equal else 'NO'} |"
        )


if __name__ == "__main__":
    main()
