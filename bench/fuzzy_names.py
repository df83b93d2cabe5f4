"""The fuzzy name channel at scale: time per keyword of ``FuzzyNameIndex.search`` by bigrams alone, by trigrams
alone, and with the per-length choice the index makes (the fewer postings counted).

    .venv/bin/python bench/fuzzy_names.py [--names 1000000,10000000] [--keywords 100] [--cutoff 85]

Per size N, ``bench/graph_scale.py``'s word-like entity names (two pseudo-words, "kaberu tosi") are indexed as the
index job does (``FuzzyNameIndex(keys).write``), and the written index is mapped back (``FuzzyNameIndex.open``) as a
query process maps it. Searched: ``--keywords`` names drawn from the index (exact keywords, as the bench's scripted
LLM gives) and the same names with one letter changed (near misses), at ``--cutoff`` with the pipeline's limit of 5.
Each filter runs over every keyword twice; the second pass is timed (the files then in the page cache).

Printed per size: the build's seconds and peak memory, the postings written (bigrams, trigrams) and the index's size
on disk; per keyword set and filter: ms per keyword, the median candidates the filter leaves for rapidfuzz, and
whether the results equal the bigram filter's (they must: both bounds exclude no match).
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.graph_scale import word_names  # noqa: E402
from hxd2_ray.retrieval.fuzzy import FuzzyNameIndex  # noqa: E402

FILTERS = ("bigrams", "trigrams", "cheaper")  # FuzzyNameIndex.gram_filter; "cheaper" is what a query process runs


def _one_letter_changed(name: str, rng: random.Random) -> str:
    chars = list(name)
    at = rng.randrange(len(chars))
    chars[at] = rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != chars[at]])
    return "".join(chars)


def _folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.iterdir()) / 2**20


def measure(n: int, keywords: int, cutoff: float, work: Path) -> dict:
    names = word_names(n).to_pylist()
    started = time.perf_counter()
    built = FuzzyNameIndex(names)
    build_s = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    folder = work / f"names-{n}"
    built.write(folder)
    del built
    index = FuzzyNameIndex.open(folder)
    assert index is not None
    pick = np.random.default_rng(3)
    exact = [names[int(i)] for i in pick.integers(0, n, keywords)]
    rng = random.Random(3)
    near = [_one_letter_changed(name, rng) for name in exact]
    del names
    result: dict = {
        "names": n,
        "build_s": round(build_s, 1),
        "process_peak_mb": round(peak_mb),
        "postings": index.postings(),
        "disk_mb": round(_folder_mb(folder)),
        "searches": {},
    }
    try:
        for label, texts in (("exact", exact), ("one letter changed", near)):
            reference = None
            for gram_filter in FILTERS:
                index.gram_filter = gram_filter
                for text in texts:  # first pass: the pages of the postings this filter reads come into the cache
                    index.search(text, cutoff, 5)
                started = time.perf_counter()
                found = [index.search(text, cutoff, 5) for text in texts]
                ms = (time.perf_counter() - started) / len(texts) * 1000
                candidates = np.median([index.candidate_count(t, cutoff) for t in texts])
                reference = found if reference is None else reference
                result["searches"][f"{label} / {gram_filter}"] = {
                    "ms_per_keyword": round(ms, 2),
                    "median_candidates": float(candidates),
                    "same_results": found == reference,
                }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", default="1000000,10000000", help="name counts, comma-separated")
    parser.add_argument("--keywords", type=int, default=100)
    parser.add_argument("--cutoff", type=float, default=85.0, help="retrieval.fuzzy_score_cutoff (its default: 85)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hxd2-fuzzy-") as tmp:
        for n in (int(x) for x in args.names.split(",")):
            r = measure(n, args.keywords, args.cutoff, Path(tmp))
            print(
                f"{n:,} names: built in {r['build_s']} s (process peak {r['process_peak_mb']:,} MB), postings "
                f"{r['postings']['bigrams']:,} bigrams / {r['postings']['trigrams']:,} trigrams, {r['disk_mb']:,} MB",
                flush=True,
            )
            for what, s in r["searches"].items():
                print(
                    f"  {what}: {s['ms_per_keyword']:.1f} ms a keyword, median {s['median_candidates']:,.0f} "
                    f"candidates, same results as bigrams: {s['same_results']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
