"""The whole query at scale: an index of N entities with every vector family, the lexical index and the graph's read
structures, opened by fresh query processes as ``hxd2 query`` opens it, answering ``dual_retrieval`` questions.

    .venv/bin/python bench/query_scale.py [--sizes 100000,1000000] [--questions 300] [--processes 4]

Per size N, one synthetic index written through the library's own writers (``bench/query_scale_index.py``):

* the graph of ``bench/graph_scale.py`` (N entities named by two pseudo-words, ``--names words``, or
  ``e000123456`` keys, ``--names keys``; 1.5 N relations with power-law endpoints, N/4 chunks in N/40 documents,
  synonyms, title mentions), loaded with ``KuzuGraphWriter.bulk_load``, then ``write_query_reads`` as the index
  job's write stage does; each chunk's text is 60 words drawn from a Zipf law over 200,000 pseudo-words (so the
  lexical channel has real postings), and names two entities; built in a process of its own (its tables and Kùzu's
  buffer pool are gone before the next part);
* the lexical index (``write_lexical``), in a process of its own;
* every vector family (``entity_name``, ``entity_mix``: N; ``relation_keywords``, ``relation_mix``: one per
  relation; ``chunk``: N/4) through ``write_family`` with the shipped defaults (2 shards, ``index_type: auto``: flat
  up to 200,000 vectors a shard, IVF-Flat up to 1M, IVF-PQ with re-scoring above), embedding-like unit vectors of
  dim 64 (clustered in a latent space), and each family's recall@10 against exact search on 100 held-out vectors;
* the manifest, with the shipped config and the stand-ins (``llm.backend=scripted``, ``embedding.backend=hashing``,
  ``embedding.dim=64``).

Then 1 and ``--processes`` fresh query processes each do what ``hxd2 query`` does: ``open_index`` with every family,
``build_pipeline`` with the hashing embedder and a scripted LLM (its keyword reply names the question's two entity
keys and a theme word), and answer every question in mode ``dual_retrieval`` (keywords, embeddings, the four
families searched, fuzzy names, the lexical channel, the ``ppr`` walk, the token budget: everything but the
generation call) twice: p50 / p99 are of the second pass, the first pass's beside them. Then the same questions
twice in mode ``auto`` (intent, the refusal gate's retrieval, a plan, its graph reads, the verifier), timed up to the
generation call.

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

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run from a checkout without installing
sys.path.insert(0, str(BENCH))

from graph_scale import _memory, _wait_for  # noqa: E402
from query_scale_index import WORDS, ZIPF, build, config, word  # noqa: E402


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
    auto = auto_mode(index, cfg, asked, replies) if os.environ.get("QUERY_SCALE_AUTO", "1") == "1" else {}
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
        **auto,
    }
    tmp = out_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(report))
    os.replace(tmp, out_file)  # whole when the parent sees it
    _wait_for(go_file)
    flow.close()
    index.close()


def auto_mode(index, cfg, asked: list[dict], replies: dict[str, str]) -> dict:
    """Mode ``auto`` over the same questions, twice, with the built-in scripted LLM (intent, the refusal gate's
    retrieval, a one-step plan that retrieves the question's first entity, the pre-check verifier) except for the
    keywords (the question's) and the plan (its entity key): the time from the question to the generation call
    (the first ``logic_answer`` or ``answer`` request), the whole answer (the scripted generation takes ~0), and
    which path answered."""
    from hxd2_ray.llm.scripted import ScriptedLLM
    from hxd2_ray.wiring import build_embedder, build_pipeline

    builtin = ScriptedLLM(record=False)
    generation_at: list[float] = []

    def reply(request):
        question = request.messages[-1]["content"]
        if request.tag == "keywords":
            return next((kw for text, kw in replies.items() if text in question), None) or builtin_reply(request)
        if request.tag in ("logic_plan", "logic_repair"):
            key = next((q["keywords"]["low_level_keywords"][0] for q in asked if q["question"] in question), None)
            if key is not None:
                found = {"op": "retrieval", "alias": "found", "args": {"s": key, "p": None, "o": None}}
                output = {"op": "output", "args": {"aliases": ["$found"]}}
                return json.dumps(
                    {"steps": [{"step": "Find.", "action": found}, {"step": "Answer.", "action": output}]}
                )
        if request.tag in ("logic_answer", "answer") and len(generation_at) == len(started):
            generation_at.append(time.perf_counter())
        return builtin_reply(request)

    def builtin_reply(request):
        return builtin.complete([request])[0].text

    flow = build_pipeline("auto", index, ScriptedLLM(reply, record=False), build_embedder(cfg.embedding), cfg)
    started: list[float] = []
    whole: list[float] = []
    paths: dict[str, int] = {}
    for q in [*asked, *asked]:
        started.append(time.perf_counter())
        answer = flow.answer(q["question"], mode="auto")
        whole.append(time.perf_counter())
        if len(generation_at) < len(started):  # refused, or answered without generating
            generation_at.append(whole[-1])
        if len(started) > len(asked):
            paths[answer.path] = paths.get(answer.path, 0) + 1
    flow.close()
    second = slice(len(asked), None)
    return {
        "auto_to_generation_ms": [(g - s) * 1000 for g, s in zip(generation_at[second], started[second])],
        "auto_cold_to_generation_ms": [(g - s) * 1000 for g, s in zip(generation_at[: len(asked)], started)],
        "auto_whole_ms": [(w - s) * 1000 for w, s in zip(whole[second], started[second])],
        "auto_paths": paths,
    }


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
        **auto_figures(reports),
        "pss_mb": sum(m["pss"] for m in memory),
        "index_pss_mb": sum(m["pss"] - r["before"]["pss"] for m, r in zip(memory, reports)),
    }


def auto_figures(reports: list[dict]) -> dict:
    if "auto_to_generation_ms" not in reports[0]:
        return {}
    gen = np.concatenate([r["auto_to_generation_ms"] for r in reports])
    cold = np.concatenate([r["auto_cold_to_generation_ms"] for r in reports])
    whole = np.concatenate([r["auto_whole_ms"] for r in reports])
    paths: dict[str, int] = {}
    for r in reports:
        for path, count in r["auto_paths"].items():
            paths[path] = paths.get(path, 0) + count
    return {
        "auto_p50_ms": float(np.percentile(gen, 50)),
        "auto_p99_ms": float(np.percentile(gen, 99)),
        "auto_cold_p50_ms": float(np.percentile(cold, 50)),
        "auto_cold_p99_ms": float(np.percentile(cold, 99)),
        "auto_whole_p50_ms": float(np.percentile(whole, 50)),
        "auto_paths": paths,
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
            f"above the same processes over the baseline index {r['index_pss_over_baseline_mb']:.0f} MB)"
            + (
                f"; auto to the generation call p50 {r['auto_p50_ms']:.1f} ms p99 {r['auto_p99_ms']:.1f} ms (first "
                f"pass {r['auto_cold_p50_ms']:.1f} / {r['auto_cold_p99_ms']:.1f} ms), paths {r['auto_paths']}"
                if "auto_p50_ms" in r
                else ""
            ),
            flush=True,
        )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return {"entities": n, **built, "runs": runs}


def _knobs(params: dict) -> dict:
    return {k: v for k, v in params.items() if k in ("nlist", "nprobe", "m", "refine")}


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
    print()
    print(f"| entities | auto to the generation call p50 / p99, 1 proc | first pass | {processes} procs | paths |")
    print("|---:|---:|---:|---:|---|")
    for r in results:
        one, many = r["runs"][1], r["runs"][processes]
        if "auto_p50_ms" in one:
            print(
                f"| {r['entities']:,} | {one['auto_p50_ms']:.1f} / {one['auto_p99_ms']:.1f} ms "
                f"| {one['auto_cold_p50_ms']:.1f} / {one['auto_cold_p99_ms']:.1f} ms "
                f"| {many['auto_p50_ms']:.1f} / {many['auto_p99_ms']:.1f} ms | {one['auto_paths']} |"
            )
    for r in results:
        print(
            f"vectors at {r['entities']:,}: "
            + ", ".join(
                f"{f} {r['index_types'][f]} {_knobs(p)} recall@10 {r['recall_at_10'][f]:.3f}"
                for f, p in r["vector_params"].items()
            )
        )
        print(f"build peaks at {r['entities']:,} (MB): " + ", ".join(f"{k} {v:,.0f}" for k, v in r["peak_mb"].items()))
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
    parser.add_argument(
        "--names",
        choices=("words", "keys"),
        default="words",
        help="entity names: two pseudo-words (default) or e000123456 keys (a worst case for the fuzzy matcher)",
    )
    args = parser.parse_args()
    os.environ["QUERY_SCALE_SET"] = json.dumps(args.set)  # read by config(), here and in the query processes
    os.environ["QUERY_SCALE_NAMES"] = args.names  # read by the graph's build process
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
