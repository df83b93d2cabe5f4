"""The driver memory of an update's re-merge (``graph_assembly.incremental.remerge``) as the corpus grows.

    .venv/bin/python bench/update_remerge.py [--chunks 10000,100000] [--added 0.01] [--names 3000] [--seed 7]

Per size N: N synthetic chunk extractions (two to four entity mentions and up to three relations each, names drawn
Zipf-like from a fixed vocabulary, as ``bench/index_throughput.py``'s corpus has them, so every change touches the
hubs), merged whole as a build would; then ``--added`` of N more chunks join and their keys are merged again, as an
update does. Printed per size: the chunks whose extractions the re-merge read (the hubs' provenance: nearly all),
the keys it merged again, its seconds and the peak RSS it added above what the process held before it (sampled
every 10 ms); for reference, the peak that turning every extraction row into Python dicts at once adds, which is
what the re-merge held before it read the rows a batch at a time with only the columns each pass needs.

Each measurement runs in a fresh process (``multiprocessing`` spawn), so one does not reuse another's freed pages.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "lambda", "zeta", "rho", "tau"]


def corpus(n: int, first: int, names: list[str], rng: random.Random) -> list[Any]:
    from hxd2_ray.types import EntityMention, Extraction, RelationMention

    weights = [1.0 / (i + 1) for i in range(len(names))]
    out = []
    for i in range(first, first + n):
        cid = f"c{i:08d}"
        picked = rng.choices(names, weights, k=rng.randint(2, 4))
        described = " ".join(rng.choices(WORDS, k=8))
        ents = tuple(EntityMention(name, "concept", f"{name}: {described}", cid) for name in picked)
        rels = tuple(
            RelationMention(a, b, f"{a} and {b}: {described}", (rng.choice(WORDS),), 1.0, cid)
            for a, b in zip(picked, picked[1:], strict=False)
            if a != b
        )
        out.append(Extraction(cid, ents, rels))
    return out


def _peak_during(fn: Any) -> tuple[Any, float, float]:
    import psutil

    proc = psutil.Process()
    base, peak, done = proc.memory_info().rss, [0], [False]

    def watch() -> None:
        while not done[0]:
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - started
    done[0] = True
    watcher.join()
    return result, max(peak[0], proc.memory_info().rss) - base, seconds


def measure(n: int, added_share: float, n_names: int, seed: int, what: str) -> dict[str, Any]:
    """One measurement in this process: ``what`` is "remerge" or "dicts" (the reference)."""
    from hxd2_ray.config import ExtractionConfig
    from hxd2_ray.extraction.merge import merge_extractions
    from hxd2_ray.graph_assembly.incremental import ExtractionIndex, remerge
    from hxd2_ray.index_store import tables
    from hxd2_ray.stages.columns import extractions_to_table
    from hxd2_ray.stages.merge_stage import entities_to_table, relations_to_table

    rng = random.Random(seed)
    names = [f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()} {i}" for i in range(n_names)]
    cfg = ExtractionConfig()

    def count_tokens(text: str) -> int:
        return len(text.split())

    old = corpus(n, 0, names, rng)
    new = corpus(max(1, round(added_share * n)), n, names, rng)
    ents, rels = merge_extractions(old, cfg, count_tokens)
    old_e = entities_to_table(ents).select(tables.ENTITIES.names).cast(tables.ENTITIES)
    old_r = relations_to_table(rels).select(tables.RELATIONS.names).cast(tables.RELATIONS)
    extractions = extractions_to_table(old + new)
    added = {e.chunk_id for e in new}
    del old, new, ents, rels
    if what == "remerge":
        got, grew, seconds = _peak_during(
            lambda: remerge(old_e, old_r, set(), added, ExtractionIndex(extractions), cfg, count_tokens)
        )
        read = got.stats["entities_recomputed"], got.stats["relations_recomputed"], got.chunks_read
        return {
            "entities": read[0],
            "relations": read[1],
            "chunks_read": read[2],
            "mb": grew / 2**20,
            "s": seconds,
        }
    index = ExtractionIndex(extractions)
    rows = sorted(index.chunk_ids())  # the hubs' provenance is nearly the whole corpus: every row, as before
    _, grew, seconds = _peak_during(lambda: extractions.filter(pa_is_in(extractions, rows)).to_pylist())
    return {"mb": grew / 2**20, "s": seconds}


def pa_is_in(table: Any, ids: list[str]) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.is_in(table.column("chunk_id"), value_set=pa.array(ids, pa.string()))


def _child(args: tuple[int, float, int, int, str], out: Any) -> None:
    out.put(measure(*args))


def in_fresh_process(*args: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(args, out))
    proc.start()
    while proc.is_alive() or not out.empty():
        try:
            result: dict[str, Any] = out.get(timeout=1.0)
        except queue.Empty:
            continue
        proc.join()
        return result
    raise RuntimeError(f"the measurement process ended with exit code {proc.exitcode} (its traceback is above)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", default="10000,100000", help="sizes, comma-separated")
    parser.add_argument("--added", type=float, default=0.01, help="chunks added by the update, as a share")
    parser.add_argument("--names", type=int, default=3000, help="the name vocabulary (entities saturate at it)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print(
        f"{'chunks':>9} {'added':>6} {'read':>8} {'entities':>8} {'relations':>9} {'s':>6} {'re-merge MB':>11} "
        f"{'all rows as dicts MB':>20}"
    )
    for n in (int(x) for x in args.chunks.split(",")):
        got = in_fresh_process(n, args.added, args.names, args.seed, "remerge")
        ref = in_fresh_process(n, args.added, args.names, args.seed, "dicts")
        print(
            f"{n:>9,} {max(1, round(args.added * n)):>6,} {got['chunks_read']:>8,} {got['entities']:>8,} "
            f"{got['relations']:>9,} {got['s']:>6.1f} {got['mb']:>11,.0f} {ref['mb']:>20,.0f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
