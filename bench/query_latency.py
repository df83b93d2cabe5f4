"""Retrieval latency (no generation): p50/p95 of QueryPipeline.retrieve on synthetic graphs.

    .venv/bin/python bench/query_latency.py [--sizes 10000,100000,1000000] [--dim 64] [--queries 100]

Per size N: N entities with pseudo-word names (fuzzy matching sees realistic, varied strings), N/40
documents, N/4 chunks, 1.5N relations with hub entities (10% of relation endpoints come from the top 1%),
built through the library (load_graph + write_family, IVF from --ivf-from entities on, flat below) and opened
with open_index as the CLI does. Vectors are random; a stand-in embedder maps the benchmark's keywords and
questions near the vectors of the entities and relations they name, so every channel finds real matches and
the graph expansion does real work. Keywords come from a ScriptedLLM (no model), tokens are counted with its
word estimate. Each question has two low-level keywords (one misspelt, for the fuzzy channel) and one
high-level keyword, plus the raw-question channel; the default RetrievalConfig applies.

Reported: build, open and start seconds (start: QueryPipeline construction, which loads the graph store's
node columns), p50/p95/mean of retrieve(), and the median of each phase. --graph-detail adds, per size, the
median milliseconds and calls per question of each graph-store read inside the "graph" phase.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.config import HashingEmbeddingConfig, HxdConfig, RetrievalConfig, VectorsConfig
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.graph.kuzu_store import load_graph
from hxd2_ray.graph.read_structures import READS_DIR
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.manifest import build_manifest, write_manifest
from hxd2_ray.indexer.query_reads import write_query_reads
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.retrieval import QueryPipeline, open_index
from hxd2_ray.retrieval.index import DUAL_LEVEL_FAMILIES

MODEL_ID = "bench-random"
SYLLABLES = (
    "ka ro mi su te na lo vi de pa ra zu ne ko li ma bi to se ga fe ju wo xi ha yo qu ce dra bel tor mun sik vel"
).split()
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
PHASES = ("keywords", "embed", "vector_search", "fuzzy", "graph", "walk", "budget")
# --graph modes: how the graph is read and how chunks are ranked (the default RetrievalConfig otherwise).
MODES = {
    "kuzu": {"resident_graph": "off"},  # a Kùzu statement per key, chunks by mentions (the code default)
    "resident": {"resident_graph": "on"},  # held in memory, chunks by mentions
    "ppr": {"resident_graph": "on", "chunk_ranking": "ppr", "question_names": True},  # configs/local.yaml's ranking
}
GRAPH_READS = ("get_relations", "neighbors", "get_entities", "chunks_for_entities", "get_chunks")


class GraphTimer:
    """Wraps the graph-store reads of an open index: per question, milliseconds and calls of each."""

    def __init__(self, graph):
        self.current: dict[str, list[float]] = {}
        self.per_question: list[dict[str, list[float]]] = []
        for name in GRAPH_READS:
            method = getattr(graph, name)

            def timed(*a, _method=method, _name=name, **k):
                t0 = time.perf_counter()
                try:
                    return _method(*a, **k)
                finally:
                    slot = self.current.setdefault(_name, [0.0, 0])
                    slot[0] += (time.perf_counter() - t0) * 1000
                    slot[1] += 1

            setattr(graph, name, timed)  # instance attribute: shadows the method for this index only
        rows = getattr(graph, "_rows", None)  # KuzuGraphStore: every statement it executes goes through _rows
        if rows is not None:

            def counted(*a, **k):
                slot = self.current.setdefault("statements", [0.0, 0])
                slot[1] += 1
                return rows(*a, **k)

            graph._rows = counted  # noqa: SLF001 - counts the store's statements, which all go through _rows

    def next_question(self, keep: bool) -> None:
        if keep:
            self.per_question.append(self.current)
        self.current = {}

    def summary(self) -> dict[str, tuple[float, float]]:
        """Read -> (median ms, median calls) per question; "statements": (0, median Kùzu statements)."""
        return {
            name: (
                statistics.median(q.get(name, [0.0, 0])[0] for q in self.per_question),
                statistics.median(q.get(name, [0.0, 0])[1] for q in self.per_question),
            )
            for name in (*GRAPH_READS, "statements")
        }


def pseudo_names(n: int, rng: np.random.Generator) -> list[str]:
    """n distinct names of 1-3 capitalised pseudo-words (2-4 syllables each)."""
    out: dict[str, None] = {}
    while len(out) < n:
        m = (n - len(out)) * 2
        n_words = rng.integers(1, 4, m)
        for w in n_words:
            words = []
            for _ in range(w):
                sy = rng.integers(0, len(SYLLABLES), rng.integers(2, 5))
                words.append("".join(SYLLABLES[i] for i in sy).capitalize())
            out.setdefault(" ".join(words), None)
            if len(out) == n:
                break
    return list(out)


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


class PlantedEmbedder:
    """Embedder stand-in: registered texts map to a given direction (+ noise), others to a seeded random one."""

    def __init__(self, dim: int, noise: float = 0.3):
        self.dim = dim
        self.model_id = MODEL_ID
        self.noise = noise
        self.known: dict[str, np.ndarray] = {}

    def _random(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)

    def embed(self, texts):
        rows = []
        for t in texts:
            noise = unit(self._random(t)) * self.noise
            base = self.known.get(t)
            rows.append(unit((base if base is not None else unit(self._random("base" + t))) + noise))
        return np.stack(rows) if rows else np.zeros((0, self.dim), np.float32)


def make_corpus(n: int, dim: int, rng: np.random.Generator):
    names = pseudo_names(n, rng)
    keys = [normalize_name(x) for x in names]
    n_docs, n_chunks, n_rels = max(1, n // 40), max(1, n // 4), int(n * 1.5)
    doc_ids = [f"doc{i:08d}" for i in range(n_docs)]
    docs = pa.table(
        {
            "id": doc_ids,
            "source_id": [f"{d}.md" for d in doc_ids],
            "source_path": [f"/corpus/{d}.md" for d in doc_ids],
            "title": [f"Title {i}" for i in range(n_docs)],
            "n_chars": np.full(n_docs, 4000, np.int64),
        },
        schema=tables.DOCUMENTS,
    )
    chunk_ids = [f"chunk{i:09d}" for i in range(n_chunks)]
    owner = rng.integers(0, n_docs, n_chunks)
    chunks = pa.table(
        {
            "id": chunk_ids,
            "doc_id": [doc_ids[d] for d in owner],
            "order": np.arange(n_chunks, dtype=np.int64) % 10,
            "start": np.zeros(n_chunks, np.int64),
            "text": [(FILLER * 5)[:400]] * n_chunks,
            "header_path": [""] * n_chunks,
            "language": ["en"] * n_chunks,
            "shard": np.zeros(n_chunks, np.int64),
        },
        schema=tables.CHUNKS,
    )
    srcs = rng.integers(0, n_chunks, (n, 2))
    desc = (FILLER * 2)[:150]
    ents = pa.table(
        {
            "key": keys,
            "name": names,
            "type": ["concept"] * n,
            "description": [desc] * n,
            "source_chunk_ids": [[chunk_ids[a], chunk_ids[b]] for a, b in srcs],
            "mention_count": np.full(n, 2, np.int64),
            "name_truncated": np.zeros(n, bool),
        },
        schema=tables.ENTITIES,
    )
    # Hubs: a tenth of the endpoints come from the top 1% of entities.
    hubs = max(1, n // 100)
    a = np.where(rng.random(n_rels) < 0.1, rng.integers(0, hubs, n_rels), rng.integers(0, n, n_rels))
    b = rng.integers(0, n, n_rels)
    pairs = sorted({(min(keys[i], keys[j]), max(keys[i], keys[j])) for i, j in zip(a, b) if i != j})
    rels = pa.table(
        {
            "source_key": [p[0] for p in pairs],
            "target_key": [p[1] for p in pairs],
            "description": [desc[:100]] * len(pairs),
            "keywords": [["relation"]] * len(pairs),
            "weight": rng.random(len(pairs)) * 10,
            "source_chunk_ids": [[chunk_ids[0]]] * len(pairs),
            "mention_count": np.ones(len(pairs), np.int64),
        },
        schema=tables.RELATIONS,
    )
    vectors = {
        "entity_name": unit(rng.standard_normal((n, dim), dtype=np.float32)),
        "relation_mix": unit(rng.standard_normal((len(pairs), dim), dtype=np.float32)),
        "chunk": unit(rng.standard_normal((n_chunks, dim), dtype=np.float32)),
    }
    vectors["entity_mix"] = unit(vectors["entity_name"] + 0.8 * unit(rng.standard_normal((n, dim), dtype=np.float32)))
    family_keys = {
        "entity_name": keys,
        "entity_mix": keys,
        "chunk": chunk_ids,
        "relation_mix": [f"{s}\x1f{t}" for s, t in pairs],
    }
    return (docs, chunks, ents, rels), names, pairs, vectors, family_keys


def misspell(name: str, rng: np.random.Generator) -> str:
    i = int(rng.integers(1, len(name)))
    return name[:i] + name[i + 1 :] if rng.random() < 0.5 else name[:i] + "e" + name[i:]


def build(root: Path, n: int, dim: int, ivf: bool, seed: int):
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    graph_tables, names, pairs, vectors, family_keys = make_corpus(n, dim, rng)
    t_data = time.perf_counter() - t0
    cfg = HxdConfig(
        embedding=HashingEmbeddingConfig(dim=dim, model_id=MODEL_ID),
        vectors=VectorsConfig(num_shards=2, index_type="ivf" if ivf else "flat"),
    )
    from hxd2_ray.vectors.faiss_index import write_family

    t0 = time.perf_counter()
    docs, chunks, ents, rels = graph_tables
    counts = load_graph(root / "graph.kuzu", docs, chunks.drop_columns(["shard"]), ents, rels)
    write_query_reads(root / "graph.kuzu", root / READS_DIR)  # as the index job's write stage does
    t_graph = time.perf_counter() - t0
    t0 = time.perf_counter()
    infos = {f: write_family(root, f, family_keys[f], vectors[f], cfg.vectors).to_dict() for f in DUAL_LEVEL_FAMILIES}
    t_vec = time.perf_counter() - t0
    write_manifest(root, build_manifest(cfg, "bench", counts, infos))
    return (
        cfg,
        counts,
        names,
        pairs,
        vectors,
        {"data_s": t_data, "graph_s": t_graph, "vectors_s": t_vec, "index_type": infos["entity_name"]["index_type"]},
    )


def make_questions(names, pairs, vectors, embedder: PlantedEmbedder, count: int, seed: int):
    rng = np.random.default_rng(seed + 1)
    name_of_key = {normalize_name(x): x for x in names}
    questions = {}
    for qi in range(count):
        a, b = rng.integers(0, len(names), 2)
        r = int(rng.integers(0, len(pairs)))
        low = [names[a], misspell(names[b], rng)]
        high = [f"theme {qi}"]
        embedder.known[low[0]] = vectors["entity_name"][a]
        embedder.known[low[1]] = vectors["entity_name"][b]
        embedder.known[high[0]] = vectors["relation_mix"][r]
        s, t = pairs[r]
        question = f"How is {low[0]} related to {low[1]} and {name_of_key[s]} with {name_of_key[t]}? (q{qi})"
        embedder.known[question] = unit(
            vectors["entity_name"][a] + vectors["entity_name"][b] + vectors["relation_mix"][r]
        )
        questions[question] = json.dumps({"high_level_keywords": high, "low_level_keywords": low})
    return questions


def run_size(n: int, args, work: Path) -> dict:
    root = work / f"index-{n}"
    cfg, counts, names, pairs, vectors, build_s = build(root, n, args.dim, n >= args.ivf_from, args.seed)
    gc.collect()
    embedder = PlantedEmbedder(args.dim)
    questions = make_questions(names, pairs, vectors, embedder, args.queries + args.warmup, args.seed)
    del names, pairs, vectors
    gc.collect()

    def keywords(req):
        question = req.messages[-1]["content"].split(":", 1)[1].strip()
        return questions[question]

    rows = [
        measure(root, cfg, mode, questions, keywords, embedder, args) | {"n": n, "counts": counts, **build_s}
        for mode in args.graph.split(",")
    ]
    shutil.rmtree(root, ignore_errors=True)
    return rows


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(root: Path, cfg: HxdConfig, mode: str, questions: dict, keywords, embedder, args) -> dict:
    """Open the index with the graph read through Kùzu (``kuzu``) or held in memory (``resident``), then time
    the questions; the same questions in the same order for both."""
    cfg = cfg.model_copy(update={"retrieval": RetrievalConfig(**MODES[mode])})
    gc.collect()
    rss0 = rss_mb()
    t0 = time.perf_counter()
    index = open_index(root, cfg, families=DUAL_LEVEL_FAMILIES)
    open_s = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        pipeline = QueryPipeline(index, ScriptedLLM(keywords, record=False), embedder, cfg.retrieval)
        start_s = time.perf_counter() - t0
        held_mb = rss_mb() - rss0
        timer = GraphTimer(index.graph) if args.graph_detail else None
        totals, phases, sizes = [], {p: [] for p in PHASES}, []
        for i, question in enumerate(questions):
            started = time.perf_counter()
            result = pipeline.retrieve(question)
            elapsed = (time.perf_counter() - started) * 1000
            if timer is not None:
                timer.next_question(keep=i >= args.warmup)
            if i < args.warmup:
                continue
            totals.append(elapsed)
            for p in PHASES:
                phases[p].append(result.timings_ms.get(p, 0.0))
            sizes.append((len(result.entities), len(result.relations), len(result.chunks)))
    finally:
        index.close()
    q = np.percentile(totals, [50, 95])
    return {
        "graph": mode,
        "open_s": open_s,
        "start_s": start_s,
        "rss_mb": held_mb,
        "p50": float(q[0]),
        "p95": float(q[1]),
        "mean": statistics.fmean(totals),
        "phases": {p: statistics.median(v) for p, v in phases.items()},
        "rows": tuple(int(np.median([s[i] for s in sizes])) for i in range(3)),
        "graph_reads": timer.summary() if timer is not None else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="entity counts, comma-separated (e.g. add 1000000)")
    ap.add_argument("--dim", type=int, default=64, help="vector dimension (MiniLM: 384)")
    ap.add_argument("--queries", type=int, default=100, help="timed questions per size")
    ap.add_argument("--warmup", type=int, default=5, help="untimed questions first")
    ap.add_argument("--ivf-from", type=int, default=1_000_000, help="sizes from here on use IVF families")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--graph-detail",
        action="store_true",
        help="also time each graph-store read of the graph phase (median ms and calls per question)",
    )
    ap.add_argument(
        "--graph",
        default="kuzu,resident,ppr",
        help="modes to compare, comma-separated: kuzu (a statement per key), resident (memory), "
        "ppr (memory, chunks by personalized PageRank; the walk phase is the walk alone)",
    )
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="hxd2-query-bench-"))
    results = []
    try:
        print(f"dim={args.dim} queries={args.queries} cpus={os.cpu_count()} load average {os.getloadavg()[0]:.2f}")
        head = (
            f"{'entities':>9} {'relations':>9} {'chunks':>8} {'index':>5} {'build s':>8} {'graph':>8} "
            f"{'open s':>7} {'start s':>7} {'RSS MB':>7} "
            f"{'p50 ms':>7} {'p95 ms':>7} {'mean':>6} | " + " ".join(f"{p[:8]:>8}" for p in PHASES) + " | rows e/r/c"
        )
        print(head)
        print("-" * len(head))
        for n in sizes:
            for r in run_size(n, args, work):
                results.append(r)
                build_total = r["graph_s"] + r["vectors_s"]
                print(
                    f"{n:>9,} {r['counts']['relations']:>9,} {r['counts']['chunks']:>8,} {r['index_type']:>5} "
                    f"{build_total:>8.1f} {r['graph']:>8} {r['open_s']:>7.1f} {r['start_s']:>7.2f} "
                    f"{r['rss_mb']:>7.0f} {r['p50']:>7.1f} {r['p95']:>7.1f} {r['mean']:>6.1f} | "
                    + " ".join(f"{r['phases'][p]:>8.2f}" for p in PHASES)
                    + f" | {'/'.join(map(str, r['rows']))}",
                    flush=True,
                )
            same = {r["graph"]: r for r in results if r["n"] == n}
            if {"kuzu", "resident"} <= same.keys():
                mem, kz = same["resident"], same["kuzu"]
                print(
                    f"{'':>9} resident / kuzu at {n:,} entities: p50 x{mem['p50'] / kz['p50']:.2f},"
                    f" graph phase x{mem['phases']['graph'] / kz['phases']['graph']:.3f}",
                    flush=True,
                )
            if {"ppr", "resident"} <= same.keys():
                ratio = same["ppr"]["p50"] / same["resident"]["p50"]
                print(
                    f"{'':>9} ppr / resident at {n:,} entities: p50 x{ratio:.2f}"
                    f" (walk {same['ppr']['phases']['walk']:.2f} ms)",
                    flush=True,
                )
        print(
            "\nphase columns: median ms per question (walk: inside graph); build s = Kùzu load + vector families;"
            " open s = manifest, graph (held in memory: resident), families and the fuzzy name index; start s ="
            " QueryPipeline construction (graph node columns; ppr: the walk graph); RSS MB = memory the open index"
            " and pipeline added."
        )
        if args.graph_detail:
            print("\ngraph phase by read (median ms / median calls per question; statements: Kùzu executions):")
            for r in results:
                reads = dict(r["graph_reads"])
                statements = reads.pop("statements")[1]
                print(
                    f"{r['n']:>9,} {r['graph']:>8}  "
                    + "  ".join(f"{name} {ms:.2f}/{calls:g}" for name, (ms, calls) in reads.items())
                    + f"  statements {statements:g}"
                )
        if args.json:
            print(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
