"""Incremental index maintenance against a full rebuild: LLM calls and wall time per changed fraction.

    .venv/bin/python bench/index_incremental.py [--chunks 10000] [--fractions 0.01,0.05,0.2,0.5]
                                                [--json-out FILE] [--plot FILE]

A deterministic synthetic corpus (``bench/index_throughput.py``'s generator: paragraphs naming people,
organisations, places and projects drawn Zipf-like from one vocabulary, one paragraph per chunk, ten chunks per
document) is indexed from scratch with the scripted LLM and the hashing embedder on a local Ray (2 CPUs, started
once before any run, so its start-up is in no figure). That full build is the reference. Then, for each changed
fraction f, from a copy of that index:

* **append**: f x documents new documents (same vocabulary, another seed, so they name the corpus' entities) are
  added with ``hxd2 index --input NEW --output INDEX``;
* **delete**: f x documents documents (evenly spread) are removed with ``hxd2 index delete --doc-id ...``.

Each change's LLM calls (what the backend was asked in that run: extraction, gleaning, judge and summaries; none
served by the LLM cache) and wall time are divided by the full build's, measured in the same process. Targets: at
1% appended and 1% deleted, <= 5% of the calls and <= 20% of the wall time. The load average of the machine is
printed beside every run. A plot of both ratios against the fraction is written (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.index_throughput import make_config, write_corpus  # noqa: E402

CHUNK_SIZE = 768
CHUNKS_PER_DOC = 10


def _llm_calls(summary: dict[str, Any]) -> int:
    return int((summary.get("run") or {}).get("llm_calls", 0))


def _timed(fn: Any) -> tuple[dict[str, Any], float, float]:
    load = os.getloadavg()[0]
    started = time.perf_counter()
    summary = fn()
    return summary, time.perf_counter() - started, load


def _new_documents(folder: Path, n_docs: int, seed: int) -> None:
    write_corpus(folder, n_docs * CHUNKS_PER_DOC, seed=seed, chunk_size=CHUNK_SIZE, chunks_per_doc=CHUNKS_PER_DOC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--fractions", default="0.01,0.05,0.2,0.5")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", default=None, help="where the corpora and indexes go (default: a temp folder)")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--plot", default=str(REPO / "bench" / "figures" / "index_incremental.png"))
    args = parser.parse_args(argv)
    fractions = [float(f) for f in args.fractions.split(",")]

    from hxd2_ray.index_store.generations import read_state
    from hxd2_ray.index_store.manifest import read_manifest
    from hxd2_ray.ingest.sources import resolve_filesystem
    from jobs.index import init_ray, run_index
    from jobs.index_update import run_delete

    work = Path(args.workdir or tempfile.mkdtemp(prefix="hxd2-incremental-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = make_config(
        str(REPO / "configs" / "local.yaml"),
        llm={"backend": "scripted"},
        embedding={"backend": "hashing", "dim": 64},
        overrides=[],
    )
    init_ray(cfg)

    corpus = work / "corpus"
    info = write_corpus(corpus, args.chunks, seed=args.seed, chunk_size=CHUNK_SIZE, chunks_per_doc=CHUNKS_PER_DOC)
    base = work / "base"
    print(f"corpus: {args.chunks:,} chunks, {info['documents']:,} documents in {info['files']} files", flush=True)
    full, full_s, full_load = _timed(lambda: run_index(cfg, str(corpus), str(base)))
    full_calls = _llm_calls(full)
    print(
        f"full build: {full_s:.1f} s, {full_calls:,} LLM calls, {full['entities']:,} entities, "
        f"{full['relations']:,} relations (load {full_load:.1f})",
        flush=True,
    )
    fs, root = resolve_filesystem(str(base), cfg.s3)
    doc_ids = sorted(read_state(fs, root, read_manifest(str(base))).sources.column("source_id").to_pylist())

    rows: list[dict[str, Any]] = []
    for f in fractions:
        n = max(1, round(f * len(doc_ids)))
        # append
        target = work / f"append-{f}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target)
        new = work / f"new-{f}"
        shutil.rmtree(new, ignore_errors=True)
        _new_documents(new, n, seed=args.seed + 1000 + int(f * 1000))
        changed, secs, load = _timed(lambda t=target, d=new: run_index(cfg, str(d), str(t)))
        rows.append(
            {
                "change": "append",
                "fraction": f,
                "documents": n,
                "seconds": secs,
                "llm_calls": _llm_calls(changed),
                "calls_ratio": _llm_calls(changed) / full_calls if full_calls else 0.0,
                "time_ratio": secs / full_s,
                "load": load,
                "stages": changed["seconds_per_stage"],
                "change_detail": {k: v for k, v in changed["change"].items() if k != "document_ids"},
            }
        )
        print(
            f"append {f:>5.0%} ({n} docs): {secs:.1f} s ({secs / full_s:.1%} of the build), "
            f"{_llm_calls(changed):,} LLM calls ({rows[-1]['calls_ratio']:.2%}) (load {load:.1f}) "
            f"{changed['seconds_per_stage']}",
            flush=True,
        )
        shutil.rmtree(target, ignore_errors=True)
        # delete
        target = work / f"delete-{f}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target)
        step = len(doc_ids) / n
        doomed = [doc_ids[int(i * step)] for i in range(n)]
        changed, secs, load = _timed(lambda t=target, d=doomed: run_delete(cfg, str(t), d, []))
        rows.append(
            {
                "change": "delete",
                "fraction": f,
                "documents": n,
                "seconds": secs,
                "llm_calls": _llm_calls(changed),
                "calls_ratio": _llm_calls(changed) / full_calls if full_calls else 0.0,
                "time_ratio": secs / full_s,
                "load": load,
                "stages": changed["seconds_per_stage"],
                "change_detail": {k: v for k, v in changed["change"].items() if k != "document_ids"},
            }
        )
        print(
            f"delete {f:>5.0%} ({n} docs): {secs:.1f} s ({secs / full_s:.1%} of the build), "
            f"{_llm_calls(changed):,} LLM calls ({rows[-1]['calls_ratio']:.2%}) (load {load:.1f}) "
            f"{changed['seconds_per_stage']}",
            flush=True,
        )
        shutil.rmtree(target, ignore_errors=True)

    report = {
        "chunks": args.chunks,
        "documents": len(doc_ids),
        "full_seconds": full_s,
        "full_llm_calls": full_calls,
        "full_stages": full["seconds_per_stage"],
        "full_load": full_load,
        "rows": rows,
    }
    print("\n| change | fraction | documents | LLM calls | calls / full | seconds | time / full | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['change']} | {r['fraction']:.0%} | {r['documents']:,} | {r['llm_calls']:,} | "
            f"{r['calls_ratio']:.2%} | {r['seconds']:.1f} | {r['time_ratio']:.1%} | {r['load']:.1f} |"
        )
    print(f"(full build: {full_s:.1f} s, {full_calls:,} LLM calls)")
    for change in ("append", "delete"):
        one = next((r for r in rows if r["change"] == change and r["fraction"] == 0.01), None)
        if one:
            ok = one["calls_ratio"] <= 0.05 and one["time_ratio"] <= 0.20
            print(
                f"target at 1% {change}: calls {one['calls_ratio']:.2%} <= 5%, time {one['time_ratio']:.1%} <= 20%: "
                f"{'met' if ok else 'NOT met'}"
            )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    if args.plot:
        plot(report, Path(args.plot))
        print(f"plot: {args.plot}")
    return 0


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in (
        (axes[0], "calls_ratio", "LLM calls / full rebuild"),
        (axes[1], "time_ratio", "wall time / full rebuild"),
    ):
        for change, marker in (("append", "o"), ("delete", "s")):
            pts = [(r["fraction"] * 100, r[key] * 100) for r in report["rows"] if r["change"] == change]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=change)
        ax.plot([0, 50], [0, 50], ls=":", color="grey", label="proportional")
        ax.set_xlabel("documents changed (%)")
        ax.set_ylabel(f"{title} (%)")
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Incremental maintenance, {report['chunks']:,}-chunk corpus (scripted LLM; full build "
        f"{report['full_seconds']:.0f} s, {report['full_llm_calls']:,} calls)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
