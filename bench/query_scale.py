"""The whole query at scale: an index of N entities with every vector family, the lexical index and the graph's read
structures, opened by fresh query processes as ``hxd2 query`` opens it, answering ``dual_retrieval`` questions.

    .venv/bin/python bench/query_scale.py [--sizes 100000,1000000] [--questions 300] [--processes 4]

Per size N, one synthetic index written through the library's own writers:

* the graph of ``bench/graph_scale.py`` (N entities, 1.5 N relations with power-law endpoints, N/4 chunks in N/40
  documents, synonyms, title mentions), loaded with ``KuzuGraphWriter.bulk_load``, then ``write_query_reads`` as the
  index job's write stage does; each chunk's text is 60 words drawn from a Zipf law over 200,000 pseudo-words (so the
  lexical channel has real postings), and names the keys of two entities;
* every vector family (``entity_name``, ``entity_mix``: N; ``relation_keywords``, ``relation_mix``: one per
  relation; ``chunk``: N/4) through ``write_family`` with the shipped defaults (2 shards, ``index_type: auto``: flat
  up to 200,000 vectors a shard, IVF above), random unit vectors of dim 64;
* the lexical index (``write_lexical``) and the manifest, with the shipped config and the stand-ins
  (``llm.backend=scripted``, ``embedding.backend=hashing``, ``embedding.dim=64``).

Then 1 and ``--processes`` fresh query processes each do what ``hxd2 query`` does: ``open_index`` with every family,
``build_pipeline`` with the hashing embedder and a scripted LLM (its keyword reply names the question's two entity
keys and a theme word), and answer every question in mode ``dual_retrieval`` (keywords, embeddings, the four
families searched, fuzzy names, the lexical channel, the ``ppr`` walk, the token budget: everything but the
generation call) twice: p50 / p99 are of the second pass, the first pass's beside them.

Reported per size: build seconds per part, disk per part, and per run: the time from launching the process to
ready (imports, ``open_index``, ``build_pipeline``), ``open_index`` alone and the bytes it read through read() and
made resident, p50 / p99, and the PSS of the processes while all are alive, in total and above each process's PSS
before opening (the same modules imported, nothing opened).
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

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run from a checkout without installing
sys.path.insert(0, str(BENCH))

from graph_scale import _memory, _tree_bytes, _wait_for, make_graph, writer_pool_bytes  # noqa: E402

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


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def build(root: Path, n: int, seed: int) -> dict:
    from hxd2_ray.graph.kuzu_store import KuzuGraphWriter
    from hxd2_ray.graph.read_structures import READS_DIR
    from hxd2_ray.index_store.manifest import build_manifest, write_manifest
    from hxd2_ray.indexer.query_reads import write_query_reads
    from hxd2_ray.retrieval.lexical import write_lexical
    from hxd2_ray.vectors.faiss_index import write_family

    cfg = config()
    rng = np.random.default_rng(seed)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    docs, chunks, ents, rels, syn, titles = make_graph(n, rng)
    texts = chunk_texts(chunks.num_rows, ents["key"].combine_chunks(), rng)
    chunks = chunks.set_column(chunks.schema.get_field_index("text"), "text", pa.array(texts, pa.string()))
    seconds["data"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with KuzuGraphWriter(root / "graph.kuzu", buffer_pool_bytes=writer_pool_bytes(n)) as writer:
        writer.bulk_load(docs, chunks.drop_columns(["shard"]), ents, rels, syn, titles)
    seconds["kuzu_load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_query_reads(root / "graph.kuzu", root / READS_DIR)
    seconds["read_structures"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    chunk_ids = chunks["id"].to_pylist()
    write_lexical(root, chunk_ids, texts)
    seconds["lexical"] = time.perf_counter() - t0
    del texts
    entity_keys = ents["key"].to_pylist()
    relation_keys = [f"{a}\x1f{b}" for a, b in zip(rels["source_key"].to_pylist(), rels["target_key"].to_pylist())]
    counts = {"documents": docs.num_rows, "chunks": chunks.num_rows, "entities": n, "relations": rels.num_rows}
    del docs, chunks, ents, rels, syn, titles
    infos = {}
    t0 = time.perf_counter()
    for family, keys in (
        ("entity_name", entity_keys),
        ("entity_mix", entity_keys),
        ("relation_keywords", relation_keys),
        ("relation_mix", relation_keys),
        ("chunk", chunk_ids),
    ):
        infos[family] = write_family(root, family, keys, _unit(rng, len(keys)), cfg.vectors, seed=seed).to_dict()
    seconds["vectors"] = time.perf_counter() - t0
    write_manifest(root, build_manifest(cfg, "bench", counts, infos))
    disk = {"graph.kuzu": _tree_bytes(root / "graph.kuzu"), "reads": _tree_bytes(root / READS_DIR)}
    disk.update({f"vectors: {f}": _tree_bytes(root / "vectors" / f) for f in infos})
    disk["lexical"] = _tree_bytes(root / "lexical")
    return {
        "counts": counts,
        "build_s": seconds,
        "disk_mb": {k: v / 2**20 for k, v in disk.items()},
        "index_types": {f: i["index_type"] for f, i in infos.items()},
        "entity_keys": entity_keys,
    }


def questions(entity_keys: list[str], count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed + 11)
    out = []
    for i in range(count):
        a, b = (entity_keys[j] for j in rng.integers(0, len(entity_keys), 2))
        w1, w2 = (word(int(w)) for w in np.minimum(rng.zipf(ZIPF, 2) - 1, WORDS - 1) + 50)
        out.append(
            {
                "question": f"How is {a} related to {b} through {w1} and {w2}? (q{i})",
                "keywords": {"high_level_keywords": [f"theme {w1}"], "low_level_keywords": [a, b]},
            }
        )
    return out


# ----------------------------------------------------------------------------------- one query process


def _io() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        name, _, value = line.partition(":")
        out[name] = int(value)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "RssAnon:", "RssFile:")):
            name, _, value = line.partition(":")
            out[name] = int(value.split()[0]) * 1024
    return out


def query_process(root: Path, questions_file: Path, out_file: Path, go_file: Path, launched: float) -> None:
    """Open the index as ``hxd2 query`` does, answer every question twice, report, then stay alive until
    ``go_file`` exists (the parent measures every process while all are alive)."""
    # The modules a query process imports whatever it opens: "before" is a process that opened nothing.
    import bm25s  # noqa: F401
    import scipy.sparse  # noqa: F401

    from hxd2_ray.graph import kuzu_store  # noqa: F401
    from hxd2_ray.llm.scripted import ScriptedLLM
    from hxd2_ray.retrieval import open_index
    from hxd2_ray.vectors import faiss_index  # noqa: F401
    from hxd2_ray.wiring import build_embedder, build_pipeline

    cfg = config()
    asked = json.loads(questions_file.read_text())
    replies = {q["question"]: json.dumps(q["keywords"]) for q in asked}

    def reply(request):  # the keyword call: the question's keywords; nothing else is asked in dual_retrieval
        question = request.messages[-1]["content"]
        for text, keywords in replies.items():
            if text in question:
                return keywords
        return json.dumps({"high_level_keywords": [], "low_level_keywords": []})

    before = _memory()
    io0 = _io()
    t0 = time.perf_counter()
    index = open_index(root, cfg)
    open_s = time.perf_counter() - t0
    io1 = _io()
    flow = build_pipeline("dual_retrieval", index, ScriptedLLM(reply, record=False), build_embedder(cfg.embedding), cfg)
    ready_s = time.time() - launched
    build_s = time.perf_counter() - t0 - open_s
    phases: list[dict[str, float]] = []  # each question's retrieval phases (QueryPipeline's own timings)
    retrieve = flow.dual.retrieve

    def timed_retrieve(*a, **k):
        result = retrieve(*a, **k)
        phases.append(dict(result.timings_ms))
        return result

    flow.dual.retrieve = timed_retrieve  # type: ignore[method-assign]
    times: list[list[float]] = [[], []]
    chunks = []
    for q in [*asked, *asked]:
        t = time.perf_counter()
        answer = flow.answer(q["question"], mode="dual_retrieval")
        times[len(times[0]) >= len(asked)].append((time.perf_counter() - t) * 1000)
        chunks.append(len(answer.references))
    warm = phases[len(asked) :]
    names = sorted({name for p in warm for name in p})
    report = {
        "pid": os.getpid(),
        "ready_s": ready_s,
        "open_s": open_s,
        "pipeline_s": build_s,
        "open_read_mb": (io1["rchar"] - io0["rchar"]) / 2**20,
        "open_rss_mb": (io1["VmRSS"] - io0["VmRSS"]) / 2**20,
        "ms": times[1],
        "cold_ms": times[0],
        "references_median": float(np.median(chunks)),
        "phases_ms": {name: float(np.median([p.get(name, 0.0) for p in warm])) for name in names},
        "before": before,
    }
    tmp = out_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(report))
    os.replace(tmp, out_file)  # whole when the parent sees it
    _wait_for(go_file)
    flow.close()
    index.close()


def run_processes(root: Path, questions_file: Path, count: int, work: Path) -> dict:
    go = work / f"go-{count}"
    go.unlink(missing_ok=True)
    outs = [work / f"proc-{count}-{i}.json" for i in range(count)]
    for o in outs:
        o.unlink(missing_ok=True)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--query-process", str(root), str(questions_file), str(o), str(go)]
            + [repr(time.time())]
        )
        for o in outs
    ]
    try:
        while not all(o.exists() for o in outs):
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError("a query process failed")
            time.sleep(0.1)
        reports = [json.loads(o.read_text()) for o in outs]
        memory = [_memory(r["pid"]) for r in reports]  # every process alive, every question answered
    finally:
        go.touch()
        for p in procs:
            p.wait(timeout=120)
    ms = np.concatenate([r["ms"] for r in reports])
    cold = np.concatenate([r["cold_ms"] for r in reports])
    return {
        "processes": count,
        "ready_s": max(r["ready_s"] for r in reports),
        "open_s": max(r["open_s"] for r in reports),
        "pipeline_s": max(r["pipeline_s"] for r in reports),
        "open_read_mb": max(r["open_read_mb"] for r in reports),
        "open_rss_mb": max(r["open_rss_mb"] for r in reports),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "cold_p50_ms": float(np.percentile(cold, 50)),
        "cold_p99_ms": float(np.percentile(cold, 99)),
        "references_median": float(np.median([r["references_median"] for r in reports])),
        "phases_ms": reports[0]["phases_ms"],
        "pss_mb": sum(m["pss"] for m in memory),
        "index_pss_mb": sum(m["pss"] - r["before"]["pss"] for m, r in zip(memory, reports)),
    }


def baseline(args: argparse.Namespace, work: Path) -> dict:
    """The same processes over an index of ``--baseline`` entities: what a query process holds whatever the index
    (the interpreter, the libraries, what the first questions load), subtracted from the PSS at each size."""
    root = work / "baseline"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    built = build(root, args.baseline, args.seed)
    qfile = work / "questions-baseline.json"
    qfile.write_text(json.dumps(questions(built.pop("entity_keys"), args.questions, args.seed)))
    runs = {count: run_processes(root, qfile, count, work) for count in sorted({1, args.processes})}
    for count, r in runs.items():
        print(f"[baseline {args.baseline:,}] {count} process(es): PSS {r['pss_mb']:.0f} MB", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return runs


def run_size(n: int, args: argparse.Namespace, work: Path, base: dict) -> dict:
    root = work / f"index-{n}"
    qfile = work / f"questions-{n}.json"
    if args.reuse and (root / "built.json").exists() and qfile.exists():
        built = json.loads((root / "built.json").read_text())
        print(f"[{n:,}] reusing the index in {root}", flush=True)
    else:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        print(f"[{n:,}] building ...", flush=True)
        built = build(root, n, args.seed)
        qfile.write_text(json.dumps(questions(built.pop("entity_keys"), args.questions, args.seed)))
        (root / "built.json").write_text(json.dumps(built))
    print(
        f"[{n:,}] built: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in built["build_s"].items())
        + f"; families {built['index_types']}",
        flush=True,
    )
    runs = {}
    for count in sorted({1, args.processes}):
        runs[count] = r = run_processes(root, qfile, count, work)
        r["index_pss_over_baseline_mb"] = r["pss_mb"] - base[count]["pss_mb"]
        print(
            f"[{n:,}] {count} process(es): ready {r['ready_s']:.2f}s after launch (open_index {r['open_s']:.2f}s, "
            f"read {r['open_read_mb']:.1f} MB, resident +{r['open_rss_mb']:.1f} MB; pipeline {r['pipeline_s']:.2f}s), "
            f"dual_retrieval p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms (first pass {r['cold_p50_ms']:.1f} / "
            f"{r['cold_p99_ms']:.1f} ms), PSS {r['pss_mb']:.0f} MB (above the modules' {r['index_pss_mb']:.0f} MB, "
            f"above the same processes over the baseline index {r['index_pss_over_baseline_mb']:.0f} MB)",
            flush=True,
        )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return {"entities": n, **built, "runs": runs}


def print_table(results: list[dict], processes: int) -> None:
    print()
    print(
        "| entities | ready after launch | open_index | read / made resident by open | dual_retrieval p50 | p99 "
        f"| first pass p50 / p99 | PSS 1 proc | PSS {processes} procs (ratio) | index PSS 1 / {processes} procs "
        f"(ratio) | above the modules, 1 / {processes} | disk | disk per 1M entities |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        one, many = r["runs"][1], r["runs"][processes]
        disk = sum(r["disk_mb"].values())
        print(
            f"| {r['entities']:,} | {one['ready_s']:.2f} s | {one['open_s']:.2f} s "
            f"| {one['open_read_mb']:.1f} / {one['open_rss_mb']:.1f} MB | {one['p50_ms']:.1f} ms "
            f"| {one['p99_ms']:.1f} ms | {one['cold_p50_ms']:.1f} / {one['cold_p99_ms']:.1f} ms "
            f"| {one['pss_mb']:.0f} MB | {many['pss_mb']:.0f} MB (x{many['pss_mb'] / one['pss_mb']:.2f}) "
            f"| {one['index_pss_over_baseline_mb']:.0f} / {many['index_pss_over_baseline_mb']:.0f} MB "
            f"(x{many['index_pss_over_baseline_mb'] / max(one['index_pss_over_baseline_mb'], 1e-9):.2f}) "
            f"| {one['index_pss_mb']:.0f} / {many['index_pss_mb']:.0f} MB "
            f"| {disk:,.0f} MB | {disk / (r['entities'] / 1e6):,.0f} MB |"
        )
    for r in results:
        phases = r["runs"][1]["phases_ms"]
        print(
            f"phases at {r['entities']:,}, 1 process (median ms): "
            + ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
        )
        print(f"disk at {r['entities']:,}: " + ", ".join(f"{k} {v:.0f} MB" for k, v in r["disk_mb"].items()))
        print(f"build at {r['entities']:,}: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["build_s"].items()))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--query-process":
        query_process(*(Path(p) for p in sys.argv[2:6]), launched=float(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="entity counts, comma-separated")
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--baseline", type=int, default=1000, help="entities of the baseline index")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="work folder (default: a temp folder, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the built indexes")
    parser.add_argument("--reuse", action="store_true", help="query the indexes a --keep run left in --work")
    parser.add_argument(
        "--set", action="append", default=[], help="a config override for the build and the query processes"
    )
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    os.environ["QUERY_SCALE_SET"] = json.dumps(args.set)  # read by config(), here and in the query processes
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="hxd2-query-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        base = baseline(args, work)  # built afresh each run (small)
        results = [run_size(int(s), args, work, base) for s in args.sizes.split(",")]
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print_table(results, args.processes)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
