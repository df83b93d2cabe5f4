"""The ``ppr`` ranking at scale: read structures written at index time, memory-mapped by every query process.

    .venv/bin/python bench/graph_scale.py [--sizes 100000,1000000,10000000] [--questions 1000] [--processes 4]

Per size N, one synthetic graph of a realistic shape, written through the index job's own write path
(``KuzuGraphWriter.bulk_load``, then ``write_query_reads`` as the write stage does):

* N entities (descriptions of 80 characters); N/4 chunks of 400 characters in N/40 documents;
* ~2.5 MENTIONS per chunk and 1.5 RELATED edges per entity, both with power-law endpoint popularity (the i-th
  most popular entity drawn with weight ``(i + 1) ** -0.8``, so degrees follow a power law with a tail exponent
  near 2.25 and hubs reach the hundreds of thousands at 10M), hub ids shuffled;
* SYNONYM edges for 2% of the entities, and title mentions in 10% of the chunks (a popular document named).

Then 1,000 questions' seed sets (4 entity keys, two of them among the 1% most connected, and 20 chunk ids, as
the pipeline's matched entities and dense hits give them) are ranked by the ``ppr`` walk with the default
configuration (radius 3, at most 2,000 nodes, fanout cap 512): keys looked up, the walk, the best 10 chunk ids.
Each process answers the set twice: p50 / p99 are of the second pass (the pages a walk reads are in memory, as in a
serving process), the first pass's are printed beside them.

Reported, in one run: build seconds (data, Kùzu load, read structures), disk per family (the Kùzu file and each
read-structure file group), open seconds (the Kùzu store and the mapped read structures), ppr p50 / p99 over the
questions, and the resident set and PSS of 1 and of 4 query processes over the same index, each answering every
question (measured from /proc while all are alive; "index" is the PSS above the process's own before opening).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.graph.schema import TITLE_MENTIONS
from hxd2_ray.index_store import tables

FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
TEXT = (FILLER * 5)[:400]
POWER = 0.8  # endpoint popularity exponent (module docstring)


def popular(n: int, size: int, rng: np.random.Generator, power: float = POWER) -> np.ndarray:
    """``size`` draws from 0..n-1 with weight (rank + 1) ** -power; ranks are shuffled ids (hubs anywhere)."""
    cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -power)
    ranks = np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1]), n - 1)
    return rng.permutation(n)[ranks] if n > 1 else ranks


def _strings(prefix: str, ids: np.ndarray, width: int) -> pa.Array:
    return pa.array([f"{prefix}{i:0{width}d}" for i in ids.tolist()], pa.string())


CONSONANTS, VOWELS = "bcdfghjklmnprstvwz", "aeiou"
NAME_WORDS = 5_000  # distinct words of the word-like names: two of them make a name, 25M names at most


def word_names(n: int) -> pa.Array:
    """``n`` distinct names of two pseudo-words ("kaberu tosi"), as entity names read: words of 2 or 3 syllables
    (90 of them) drawn once with a fixed seed, the first word cycling fastest, so a word starts 1/5,000 of the
    names. Unlike ``e000123456`` keys (one length, ten digits: every name shares most of its bigrams with every
    other), their bigrams are as varied as real names'."""
    if n > NAME_WORDS**2:
        raise ValueError(f"word_names gives at most {NAME_WORDS**2:,} names")
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    pick = np.random.default_rng(12345)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < NAME_WORDS:
        word = "".join(syllables[i] for i in pick.integers(0, len(syllables), pick.integers(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return pa.array([f"{words[i % NAME_WORDS]} {words[i // NAME_WORDS]}" for i in range(n)], pa.string())


def make_graph(n: int, rng: np.random.Generator, names: str = "keys") -> tuple[pa.Table, ...]:
    """(documents, chunks, entities, relations, synonyms, title_mentions) in the staging schemas; entity keys (and
    names) ``e000000123`` (``names="keys"``) or two pseudo-words (``names="words"``, :func:`word_names`)."""
    n_docs, n_chunks, n_rels = max(1, n // 40), max(1, n // 4), int(n * 1.5)
    doc_ids = _strings("doc", np.arange(n_docs), 8)
    docs = pa.table(
        {
            "id": doc_ids,
            "source_id": _strings("src", np.arange(n_docs), 8),
            "source_path": _strings("corpus/doc", np.arange(n_docs), 8),
            "title": _strings("Title ", np.arange(n_docs), 8),
            "n_chars": np.full(n_docs, 4000, np.int64),
        },
        schema=tables.DOCUMENTS,
    )
    chunk_ids = _strings("chunk", np.arange(n_chunks), 9)
    chunks = pa.table(
        {
            "id": chunk_ids,
            "doc_id": doc_ids.take(pa.array(np.sort(rng.integers(0, n_docs, n_chunks)))),
            "order": np.arange(n_chunks, dtype=np.int64) % 10,
            "start": np.zeros(n_chunks, np.int64),
            "text": pa.array([TEXT] * n_chunks, pa.string()),
            "header_path": pa.array([""] * n_chunks, pa.string()),
            "language": pa.array(["en"] * n_chunks, pa.string()),
            "shard": np.zeros(n_chunks, np.int64),
        },
        schema=tables.CHUNKS,
    )
    keys = _strings("e", np.arange(n), 9) if names == "keys" else word_names(n)
    # ~2.5 mentions per chunk: each chunk names 2 or 3 entities, popular ones more often.
    per_chunk = rng.integers(2, 4, n_chunks)
    men_chunk = np.repeat(np.arange(n_chunks, dtype=np.int64), per_chunk)
    men_entity = popular(n, len(men_chunk), rng)
    order = np.lexsort((men_chunk, men_entity))
    men_chunk, men_entity = men_chunk[order], men_entity[order]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(men_entity, minlength=n), out=offsets[1:])
    source_chunks = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), chunk_ids.take(pa.array(men_chunk)))
    desc = (FILLER * 2)[:80]  # entity descriptions of 80 characters, relation ones of 50
    ents = pa.table(
        {
            "key": keys,
            "name": keys,
            "type": pa.array(["concept"] * n, pa.string()),
            "description": pa.array([desc] * n, pa.string()),
            "source_chunk_ids": source_chunks,
            "mention_count": np.diff(offsets),
            "name_truncated": np.zeros(n, bool),
        },
        schema=tables.ENTITIES,
    )
    a, b = popular(n, n_rels, rng), popular(n, n_rels, rng)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    pair = np.unique((lo * n + hi)[lo != hi])
    lo, hi = pair // n, pair % n
    m = len(pair)
    rels = pa.table(
        {
            "source_key": keys.take(pa.array(lo)),
            "target_key": keys.take(pa.array(hi)),
            "description": pa.array([desc[:50]] * m, pa.string()),
            "keywords": pa.array([["relation"]] * m, pa.list_(pa.string())),
            "weight": rng.random(m) * 10,
            "source_chunk_ids": pa.ListArray.from_arrays(
                pa.array(np.arange(m + 1, dtype=np.int32)), chunk_ids.take(pa.array(rng.integers(0, n_chunks, m)))
            ),
            "mention_count": np.ones(m, np.int64),
        },
        schema=tables.RELATIONS,
    )
    n_syn = max(1, n // 50)
    sa, sb = rng.integers(0, n, n_syn), rng.integers(0, n, n_syn)
    syn_pair = np.unique((np.minimum(sa, sb) * n + np.maximum(sa, sb))[sa != sb])
    synonyms = pa.table(
        {
            "source_key": keys.take(pa.array(syn_pair // n)),
            "target_key": keys.take(pa.array(syn_pair % n)),
            "score": 0.85 + 0.1 * rng.random(len(syn_pair)),
        },
        schema=tables.SYNONYMS,
    )
    naming = np.sort(rng.choice(n_chunks, max(1, n_chunks // 10), replace=False))
    titles = pa.table(
        {
            "chunk_id": chunk_ids.take(pa.array(naming)),
            "doc_id": doc_ids.take(pa.array(popular(n_docs, len(naming), rng))),
        },
        schema=TITLE_MENTIONS,
    )
    return docs, chunks, ents, rels, synonyms, titles


def _tree_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def writer_pool_bytes(n: int) -> int:
    return min(8 << 30, max(1 << 30, n * 800))


def build(root: Path, n: int, seed: int) -> dict:
    from hxd2_ray.graph.kuzu_store import KuzuGraphWriter
    from hxd2_ray.graph.read_structures import READS_DIR
    from hxd2_ray.indexer.query_reads import write_query_reads

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    docs, chunks, ents, rels, syn, titles = make_graph(n, rng)
    out = {"data_s": time.perf_counter() - t0, "relations": rels.num_rows, "chunks": chunks.num_rows}
    t0 = time.perf_counter()
    # Kùzu's default buffer pool is 80% of the machine's memory, on top of the tables being loaded: bounded here
    # so the 10M case fits in 24 GB.
    with KuzuGraphWriter(root / "graph.kuzu", buffer_pool_bytes=writer_pool_bytes(n)) as writer:
        writer.bulk_load(docs, chunks.drop_columns(["shard"]), ents, rels, syn, titles)
    out["kuzu_load_s"] = time.perf_counter() - t0
    del docs, chunks, ents, rels, syn, titles
    t0 = time.perf_counter()
    write_query_reads(root / "graph.kuzu", root / READS_DIR)  # the write stage's own step
    out["reads_s"] = time.perf_counter() - t0
    out["disk_mb"] = {"graph.kuzu": _tree_bytes(root / "graph.kuzu") / 2**20}
    groups: dict[str, int] = {}
    for p in (root / READS_DIR).iterdir():
        group = (
            "walk matrix"
            if p.name.startswith("walk_")
            else "key lookups"
            if "_hash" in p.name
            else ("columns (Arrow)" if p.suffix == ".arrow" else "adjacency (npy)")
        )
        groups[group] = groups.get(group, 0) + p.stat().st_size
    out["disk_mb"].update({f"reads: {g}": b / 2**20 for g, b in sorted(groups.items())})
    return out


def seed_sets(root: Path, count: int, seed: int) -> list[dict]:
    """Per question: 4 entity keys (two among the 1% most connected) and 20 chunk ids."""
    from hxd2_ray.graph.read_structures import READS_DIR, open_graph_reads

    reads = open_graph_reads(root / READS_DIR)
    rng = np.random.default_rng(seed + 7)
    degree = np.asarray(reads.arrays["degree"])
    top = np.argsort(-degree)[: max(1, len(degree) // 100)]
    keys, chunk_ids = reads.entity_lookup.column, reads.chunk_lookup.column
    out = []
    for _ in range(count):
        ents = np.concatenate([rng.choice(top, 2), rng.integers(0, len(degree), 2)])
        chunks = rng.integers(0, reads.chunks.num_rows, 20)
        out.append(
            {
                "entities": keys.take(pa.array(ents)).to_pylist(),
                "chunks": chunk_ids.take(pa.array(chunks)).to_pylist(),
            }
        )
    return out


# ----------------------------------------------------------------------------------- one query process


def _memory(pid: int | str = "self") -> dict[str, float]:
    """Resident set and proportional set size (MB) from /proc/<pid>/smaps_rollup."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            out[name.lower()] = int(rest.split()[0]) / 1024
    return out


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.05)


def query_process(root: Path, seeds_file: Path, out_file: Path, go_file: Path) -> None:
    """Open the index, rank every seed set, report, then stay alive until ``go_file`` exists (so the parent can
    measure every process while all are alive)."""
    import scipy.sparse  # noqa: F401 - the walk's own import, part of the process, not of the index

    from hxd2_ray.graph.kuzu_store import KuzuGraphStore
    from hxd2_ray.graph.read_structures import READS_DIR
    from hxd2_ray.graph.resident import LazyStore, open_resident
    from hxd2_ray.retrieval.ppr import EdgeWeights, graph_for

    questions = json.loads(seeds_file.read_text())
    before = _memory()
    t0 = time.perf_counter()
    # As the query side opens an index (hxd2_ray.retrieval.index): the Kùzu store only when a read needs it.
    store = LazyStore(lambda: KuzuGraphStore(root / "graph.kuzu", read_only=True))
    graph = open_resident(store, "auto", 1, reads_dir=root / READS_DIR)
    walk = graph_for(graph, EdgeWeights())
    t_open = time.perf_counter() - t0
    assert walk is not None, "no walk matrix: the read structures were not mapped"
    times: list[list[float]] = [[], []]  # the first pass (pages touched for the first time), then warm
    nodes = []
    for q in [*questions, *questions]:
        t = time.perf_counter()
        ent = [o for o in graph.entity_offsets(q["entities"]) if o is not None]
        chk = [walk.n_entities + o for o in graph.chunk_offsets(q["chunks"]) if o is not None]
        seeds = ent + chk
        weights = [0.5 / max(len(ent), 1)] * len(ent) + [0.5 / max(len(chk), 1)] * len(chk)
        result = walk.personalized_pagerank(seeds, weights)
        is_chunk = walk.is_chunk(result.nodes)
        mass = result.scores[is_chunk]
        best = np.argsort(-mass, kind="stable")[:10]
        top = graph.chunk_ids_at((result.nodes[is_chunk][best] - walk.n_entities).tolist())
        times[len(times[0]) >= len(questions)].append((time.perf_counter() - t) * 1000)
        nodes.append(len(result.nodes))
        assert top, "the walk reached no chunk"
    report = {
        "pid": os.getpid(),
        "open_s": t_open,
        "ms": times[1],
        "cold_ms": times[0],
        "walk_nodes_median": float(np.median(nodes)),
        "before": before,
    }
    out_file.write_text(json.dumps(report))
    _wait_for(go_file.with_suffix(".queried"))
    t0 = time.perf_counter()
    counts = graph.counts()  # a read of the store of record: the Kùzu open a process pays once it needs one
    report["store_open_s"] = time.perf_counter() - t0
    assert counts["entities"] == walk.n_entities
    out_file.with_suffix(".kuzu").write_text(json.dumps(report))
    _wait_for(go_file)
    graph.close()


def run_processes(root: Path, seeds_file: Path, count: int, work: Path) -> dict:
    go = work / f"go-{count}"
    go.unlink(missing_ok=True)
    go.with_suffix(".queried").unlink(missing_ok=True)
    outs = [work / f"proc-{count}-{i}.json" for i in range(count)]
    for o in outs:
        o.unlink(missing_ok=True)
        o.with_suffix(".kuzu").unlink(missing_ok=True)
    procs = [
        subprocess.Popen([sys.executable, __file__, "--query-process", str(root), str(seeds_file), str(o), str(go)])
        for o in outs
    ]

    def measure(files: list[Path]) -> list[dict[str, float]]:
        while not all(f.exists() for f in files):
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError("a query process failed")
            time.sleep(0.1)
        return [_memory(json.loads(f.read_text())["pid"]) for f in files]  # every process alive

    try:
        memory = measure(outs)  # every question answered, the Kùzu file not opened
        go.with_suffix(".queried").touch()
        kuzu_memory = measure([o.with_suffix(".kuzu") for o in outs])
        reports = [json.loads(o.with_suffix(".kuzu").read_text()) for o in outs]
    finally:
        go.touch()
        go.with_suffix(".queried").touch()
        for p in procs:
            p.wait(timeout=120)
    ms = np.concatenate([r["ms"] for r in reports])
    cold = np.concatenate([r["cold_ms"] for r in reports])
    return {
        "processes": count,
        "open_s": max(r["open_s"] for r in reports),
        "store_open_s": max(r["store_open_s"] for r in reports),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "cold_p50_ms": float(np.percentile(cold, 50)),
        "cold_p99_ms": float(np.percentile(cold, 99)),
        "walk_nodes_median": float(np.median([r["walk_nodes_median"] for r in reports])),
        "rss_mb": sum(m["rss"] for m in memory),
        "pss_mb": sum(m["pss"] for m in memory),
        "index_pss_mb": sum(m["pss"] - r["before"]["pss"] for m, r in zip(memory, reports)),
        "pss_with_kuzu_mb": sum(m["pss"] for m in kuzu_memory),
    }


def run_size(n: int, args: argparse.Namespace, work: Path) -> dict:
    root = work / f"graph-{n}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    print(f"[{n:,}] building ...", flush=True)
    built = build(root, n, args.seed)
    print(
        f"[{n:,}] built: data {built['data_s']:.1f}s, Kùzu load {built['kuzu_load_s']:.1f}s, "
        f"read structures {built['reads_s']:.1f}s",
        flush=True,
    )
    seeds_file = work / f"seeds-{n}.json"
    seeds_file.write_text(json.dumps(seed_sets(root, args.questions, args.seed)))
    runs = {}
    for count in sorted({1, args.processes}):
        runs[count] = run_processes(root, seeds_file, count, work)
        r = runs[count]
        print(
            f"[{n:,}] {count} process(es): open {r['open_s']:.2f}s (Kùzu {r['store_open_s']:.2f}s), "
            f"ppr p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms (first pass {r['cold_p50_ms']:.1f} / "
            f"{r['cold_p99_ms']:.1f} ms), RSS {r['rss_mb']:.0f} MB, "
            f"PSS {r['pss_mb']:.0f} MB (index {r['index_pss_mb']:.0f} MB; {r['pss_with_kuzu_mb']:.0f} MB once Kùzu "
            "is open too)",
            flush=True,
        )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return {"entities": n, **built, "runs": runs}


def print_table(results: list[dict], processes: int) -> None:
    print()
    print(
        "| entities | relations | chunks | read structures built | open | ppr p50 | ppr p99 | first pass p50 / p99 "
        f"| PSS 1 proc | PSS {processes} procs (ratio) | index PSS 1 / {processes} procs | disk: graph.kuzu "
        "| disk: read structures |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        one, many = r["runs"][1], r["runs"][processes]
        reads_mb = sum(v for k, v in r["disk_mb"].items() if k.startswith("reads"))
        print(
            f"| {r['entities']:,} | {r['relations']:,} | {r['chunks']:,} | {r['reads_s']:.1f} s "
            f"| {one['open_s']:.2f} s | {one['p50_ms']:.1f} ms | {one['p99_ms']:.1f} ms "
            f"| {one['cold_p50_ms']:.1f} / {one['cold_p99_ms']:.1f} ms | {one['pss_mb']:.0f} MB "
            f"| {many['pss_mb']:.0f} MB (x{many['pss_mb'] / one['pss_mb']:.2f}) "
            f"| {one['index_pss_mb']:.0f} / {many['index_pss_mb']:.0f} MB "
            f"| {r['disk_mb']['graph.kuzu']:.0f} MB | {reads_mb:.0f} MB |"
        )
    for r in results:
        print(f"disk at {r['entities']:,}: " + ", ".join(f"{k} {v:.0f} MB" for k, v in r["disk_mb"].items()))
    if len(results) > 1:
        small, large = results[-2], results[-1]
        ratio = large["runs"][1]["p50_ms"] / small["runs"][1]["p50_ms"]
        print(f"p50 at {large['entities']:,} / p50 at {small['entities']:,}: x{ratio:.2f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--query-process":
        query_process(*(Path(p) for p in sys.argv[2:6]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="entity counts, comma-separated")
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="work folder (default: a temp folder, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the built graphs")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="hxd2-graph-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = [run_size(int(s), args, work) for s in args.sizes.split(",")]
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print_table(results, args.processes)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
