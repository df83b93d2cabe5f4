"""Evaluation job: answer a benchmark with one or more query modes over an index, score, and report.

    python -m jobs.evaluate --benchmark hotpotqa --index DIR --output DIR [--mode dual --mode auto ...]
    hxd2 eval run ...              (same as above)
    hxd2 eval report DIR           rebuild report.md / report.json / PNGs from the shard traces
    hxd2 eval compare DIR1 DIR2    per-question differences between two runs

Questions are cut into deterministic shards by position; each shard of each mode is answered by an actor of
a Ray Data actor pool (``--workers``) and persisted as ``<output>/shards/<mode>/shard-NNNN.parquet``. A rerun
skips the shards whose file exists, so a killed run resumes where it stopped. ``--set section.key=value``
overrides the config, so ablations (budgets, loop-NER, verifier) are separate runs compared with
``hxd2 eval compare``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import posixpath
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.errors import HxdError
from hxd2_ray.stages import staging as st

SUBCOMMANDS = ("run", "report", "compare")


def _log(msg: str) -> None:
    print(f"[hxd2 eval] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- sharding


def make_shards(n_items: int, n_shards: int) -> list[tuple[int, int]]:
    """[start, end) of each shard: contiguous by position, the first ones one larger when n does not divide."""
    n_shards = max(1, min(n_shards, n_items)) if n_items else 0
    bounds, start = [], 0
    for s in range(n_shards):
        size = n_items // n_shards + (1 if s < n_items % n_shards else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


def _items_hash(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def load_traces(fs: Any, root: str, modes: list[str] | None = None) -> list[dict[str, Any]]:
    """All trace rows under ``<root>/shards``, modes in the given order (else by name), rows by position."""
    from hxd2_ray.stages.eval_stage import TRACES

    folder = posixpath.join(root, "shards")
    if modes is None:
        from pyarrow import fs as pafs

        infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        modes = sorted(posixpath.basename(i.path) for i in infos if i.type == pafs.FileType.Directory)
    out: list[dict[str, Any]] = []
    for mode in modes:
        read = st.read_staged(fs, posixpath.join(folder, mode), TRACES)
        rows = sorted(read.table.to_pylist(), key=lambda r: r["position"])
        for r in rows:
            r["scores"] = json.loads(r["scores"] or "{}")
        out.extend(rows)
    return out


def _open_fs(uri: str, cfg: Any) -> tuple[Any, str]:
    from hxd2_ray.ingest.sources import open_output_filesystem

    return open_output_filesystem(uri, cfg.s3)


def _write_report(fs: Any, root: str, traces: list[dict[str, Any]], run: dict[str, Any]) -> dict[str, str]:
    """write_report into ``root`` (directly when local, through a temp folder and uploads on S3)."""
    from pyarrow import fs as pafs

    from hxd2_ray.evaluation.report import write_report

    spec_metrics = run.get("metrics")
    kwargs = dict(title=f"Evaluation: {run['benchmark']}", metrics=spec_metrics,
                  primary_metric=run.get("primary_metric"), skipped_rows=run.get("skipped_rows", []),
                  run_info={k: v for k, v in run.items() if k not in ("skipped_rows", "metrics")})
    if isinstance(fs, pafs.LocalFileSystem):
        return {k: str(p) for k, p in write_report(traces, root, **kwargs).items()}
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_report(traces, tmp, **kwargs)
        out = {}
        for name, p in paths.items():
            target = posixpath.join(root, Path(p).name)
            with fs.open_output_stream(target) as dst:
                dst.write(Path(p).read_bytes())
            out[name] = target
        return out


# ---------------------------------------------------------------------------------------------- run


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    from hxd2_ray.config import load_config
    from hxd2_ray.evaluation.datasets import get_benchmark
    from hxd2_ray.stages.eval_stage import EVAL_MODES, SHARD_STATS, AnswerQuestions, shard_path

    spec = get_benchmark(args.benchmark)  # ValueError listing the valid names
    modes = list(dict.fromkeys(args.modes or ["auto"]))
    if bad := [m for m in modes if m not in EVAL_MODES]:
        raise ValueError(f"unknown mode(s) {bad}; valid: {', '.join(EVAL_MODES)}")
    cfg = load_config(args.config, args.overrides)
    if any(m != "llm_only" for m in modes):
        if not args.index:
            raise HxdError("--index is required for every mode except llm_only")
        from hxd2_ray.retrieval.index import open_index

        open_index(args.index, cfg).close()  # a missing or incompatible index fails here, before Ray starts
    report = spec.load(args.data_root, questions=args.questions, corpus=args.corpus)
    items = report.items[: args.limit] if args.limit is not None else list(report.items)
    if not items:
        raise HxdError(f"benchmark {spec.name!r} has no questions to evaluate")
    fs, root = _open_fs(args.output, cfg)
    n_shards = args.shards or min(len(items), 4 * args.workers)
    bounds = make_shards(len(items), n_shards)
    ids = [it.id for it in items]
    run_path = posixpath.join(root, "run.json")
    previous = st.read_json(fs, run_path)
    # Answers depend on everything but the Ray section (actors, CPUs): a changed setting needs a new output.
    answer_cfg = {k: v for k, v in cfg.model_dump(mode="json").items() if k != "ray"}
    identity = {"benchmark": spec.name, "items_hash": _items_hash(ids), "shards": len(bounds),
                "config_hash": _items_hash([json.dumps(answer_cfg, sort_keys=True, default=str)])}
    if previous and {k: previous.get(k) for k in identity} != identity:
        raise HxdError(f"{args.output} holds a run with another benchmark, question set, shard count or config "
                       f"({ {k: previous.get(k) for k in identity} }); use a new --output")

    from jobs.index import _collect, init_ray

    shard_rows = []
    for s, (a, b) in enumerate(bounds):
        dicts = [{**items[i].to_dict(), "position": i} for i in range(a, b)]
        shard_rows.append({"shard": s, "benchmark": spec.name,
                           "items_json": json.dumps(dicts, ensure_ascii=False, default=str)})
    shards_run: dict[str, list[int]] = {}
    shards_skipped: dict[str, list[int]] = {}
    answered = 0
    answer_seconds = 0.0
    for mode in modes:
        done = set()
        for s in range(len(bounds)):
            path = shard_path(root, mode, s)
            if st.exists(fs, path):
                try:
                    import pyarrow.parquet as pq

                    pq.read_metadata(path, filesystem=fs)
                    done.add(s)
                except (OSError, pa.ArrowInvalid):
                    _log(f"removing unreadable {path}")
                    st.remove_files(fs, [path])
        pending = [r for r in shard_rows if r["shard"] not in done]
        shards_skipped[mode] = sorted(done)
        shards_run[mode] = [r["shard"] for r in pending]
        if not pending:
            _log(f"mode {mode}: every shard answered earlier")
            continue
        init_ray(cfg)
        import ray

        workers = max(1, min(args.workers, len(pending)))
        _log(f"mode {mode}: {len(pending)} of {len(bounds)} shards, {workers} worker(s)")
        t0 = time.perf_counter()
        ds = ray.data.from_arrow([pa.Table.from_pylist([r]) for r in pending])
        stats = _collect(ds.map_batches(
            AnswerQuestions,
            fn_constructor_args=(cfg, args.index or "", mode, fs, root, None, args.concurrency),
            batch_size=1,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=args.cpus_per_worker,
            num_gpus=args.gpus_per_worker,
        ))
        answer_seconds += time.perf_counter() - t0
        if stats.num_rows:
            stats = stats.select(SHARD_STATS.names)
            answered += int(pc.sum(stats.column("questions")).as_py() or 0)

    traces = load_traces(fs, root, modes)
    counts = {m: sum(1 for t in traces if t["mode"] == m) for m in modes}
    run = {**identity, "questions": len(items), "modes": modes, "index": args.index, "config": args.config,
           "overrides": list(args.overrides), "workers": args.workers, "concurrency": args.concurrency,
           "limit": args.limit,
           "metrics": list(spec.metrics), "primary_metric": spec.primary_metric,
           "skipped_rows": [list(s) for s in report.skipped],
           "loader": {"items": len(report.items), "skipped": len(report.skipped), "filtered": dict(report.filtered)}}
    st.write_json_atomic(fs, run_path, run)
    paths = _write_report(fs, root, traces, run)
    from hxd2_ray.evaluation.report import aggregate

    agg = aggregate(traces, list(spec.metrics), spec.primary_metric)
    summary = {
        "benchmark": spec.name, "output": args.output, "questions": len(items), "modes": modes,
        "shards": len(bounds), "shards_run": shards_run, "shards_skipped": shards_skipped,
        "traces": counts, "answered_this_run": answered, "answer_seconds": round(answer_seconds, 3),
        "questions_per_s": round(answered / answer_seconds, 3) if answer_seconds > 0 else None,
        "skipped_rows": len(report.skipped), "primary_metric": spec.primary_metric,
        "per_mode": {m: {"n": v["n"], "errors": v["errors"], "correct": v["correct"], "metrics": v["metrics"],
                         "latency_s": v["latency_s"], "prompt_tokens_mean": v["prompt_tokens_mean"],
                         "completion_tokens_mean": v["completion_tokens_mean"], "paths": v["paths"]}
                     for m, v in agg.items()},
        "report": paths,
    }
    st.write_json_atomic(fs, posixpath.join(root, "summary.json"), summary)
    return summary


def format_summary(s: dict[str, Any]) -> str:
    primary = s["primary_metric"]
    lines = [f"evaluated {s['benchmark']}: {s['questions']} questions x {len(s['modes'])} mode(s), "
             f"{s['shards']} shards -> {s['output']}",
             f"  answered this run {s['answered_this_run']} in {s['answer_seconds']:.1f}s "
             f"({s['questions_per_s'] or 0:.2f} questions/s); skipped malformed rows {s['skipped_rows']}",
             f"  {'mode':<10} {'n':>5} {'errors':>6} {primary:>8} {'p50 s':>7} {'p95 s':>7}"]
    for m, v in s["per_mode"].items():
        score = v["metrics"].get(primary)
        lat = v["latency_s"]
        lines.append(f"  {m:<10} {v['n']:>5} {v['errors']:>6} {'-' if score is None else f'{score:.3f}':>8} "
                     f"{lat['p50'] or 0:>7.3f} {lat['p95'] or 0:>7.3f}")
    lines.append(f"  report: {s['report'].get('markdown')}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- report / compare


def rebuild_report(out: str, config: str | None = None, overrides: list[str] | None = None) -> dict[str, str]:
    from hxd2_ray.config import load_config

    cfg = load_config(config, overrides or [])
    fs, root = _open_fs(out, cfg)
    run = st.read_json(fs, posixpath.join(root, "run.json"))
    if run is None:
        raise HxdError(f"{out} holds no evaluation run (run.json is missing)")
    return _write_report(fs, root, load_traces(fs, root, run.get("modes")), run)


def compare_dirs(a: str, b: str, metric: str | None = None, config: str | None = None):
    from hxd2_ray.config import load_config
    from hxd2_ray.evaluation.report import compare_runs

    cfg = load_config(config, [])
    traces = []
    for d in (a, b):
        fs, root = _open_fs(d, cfg)
        run = st.read_json(fs, posixpath.join(root, "run.json"))
        if run is None:
            raise HxdError(f"{d} holds no evaluation run (run.json is missing)")
        traces.append(load_traces(fs, root, run.get("modes")))
    return compare_runs(traces[0], traces[1], metric=metric)


# ---------------------------------------------------------------------------------------------- CLI


def build_run_parser(prog: str = "hxd2 eval run") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=None, help="YAML config (default: built-in defaults)")
    p.add_argument("--benchmark", required=True, help="benchmark name (see hxd2_ray.evaluation.datasets)")
    p.add_argument("--index", default=None, help="index folder or s3:// URI (not needed for llm_only alone)")
    p.add_argument("--output", required=True, help="run folder or s3:// URI (traces, report)")
    p.add_argument("--limit", type=int, default=None, help="first N questions only")
    p.add_argument("--mode", dest="modes", action="append", default=[],
                   help="llm_only | dual | logic | auto | auto_post (repeatable: a grid; default auto)")
    p.add_argument("--data-root", default=None, help="benchmark data root (default ../shared/data)")
    p.add_argument("--questions", default=None, help="questions file (overrides the benchmark's default)")
    p.add_argument("--corpus", default=None, help="corpus file (overrides the benchmark's default)")
    p.add_argument("--workers", type=int, default=1, help="answering actors (each loads its own LLM)")
    p.add_argument("--concurrency", type=int, default=1,
                   help="questions answered at once per worker; > 1 batches them in vLLM's async engine")
    p.add_argument("--shards", type=int, default=None, help="question shards (default min(n, 4 x workers))")
    p.add_argument("--cpus-per-worker", type=float, default=1.0)
    p.add_argument("--gpus-per-worker", type=float, default=0.0)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value (repeatable)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    return p


def _main_run(argv: list[str]) -> int:
    args = build_run_parser().parse_args(argv)
    if args.workers < 1 or args.concurrency < 1 or (args.shards is not None and args.shards < 1):
        print("error: --workers, --concurrency and --shards must be >= 1", file=sys.stderr)
        return 2
    try:
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            summary = run_eval(args)
    except (HxdError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2, ensure_ascii=False, default=str) if args.json else format_summary(summary))
    return 0


def _main_report(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hxd2 eval report", description="rebuild the report from the shard traces")
    p.add_argument("output")
    p.add_argument("--config", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    args = p.parse_args(argv)
    try:
        paths = rebuild_report(args.output, args.config, args.overrides)
    except (HxdError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(f"{k}: {v}" for k, v in paths.items()))
    return 0


def _main_compare(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hxd2 eval compare", description="per-question differences of two runs")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--metric", default=None)
    p.add_argument("--config", default=None)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        cmp = compare_dirs(args.a, args.b, args.metric, args.config)
    except (HxdError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(cmp.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        print(cmp.to_markdown(Path(args.a).name or "A", Path(args.b).name or "B", limit=args.limit))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return {"run": _main_run, "report": _main_report, "compare": _main_compare}[argv[0]](argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print("usage: hxd2 eval {run,report,compare} ...  (no subcommand: run)\n")
        build_run_parser().print_help()
        return 0
    return _main_run(argv)


if __name__ == "__main__":
    sys.exit(main())
