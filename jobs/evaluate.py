"""Evaluation job: answer a benchmark with one or more query modes over an index, score, and report.

    python -m jobs.evaluate --benchmark hotpotqa --index DIR --output DIR [--mode dual --mode auto ...]
    hxd2 eval run ...              (same as above)
    hxd2 eval grid --index base=DIR --index gleaning2=DIR2 --axis retrieval.chunk_budget_tokens=2000,8000 ...
                                   one run per cell (index variant x axis values) and a table like the paper's
    hxd2 eval report DIR           rebuild report.md / report.json / PNGs from the shard traces
    hxd2 eval compare DIR1 DIR2    per-question differences between two runs
    hxd2 eval judge DIR_A [DIR_B] --mode-a M --mode-b M   pairwise LLM-as-judge of two runs or two modes

Questions are cut into deterministic shards by position; each shard of each mode is answered by an actor of
a Ray Data actor pool (``--workers``) and persisted as ``<output>/shards/<mode>/shard-NNNN.parquet``. A rerun
skips the shards whose file exists, so a killed run resumes where it stopped. ``--set section.key=value``
overrides the config; ``hxd2 eval grid`` runs a whole ablation (index variants such as loop-NER settings, query-time
axes such as context budgets, and modes) and writes one comparison table.
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
from jobs.cli import run_and_report

SUBCOMMANDS = ("run", "grid", "report", "compare", "judge", "corpus")
# Errors a user can fix (bad names, paths, values): one line and exit status 2, not a traceback.
_EXPECTED = (HxdError, ValueError, FileNotFoundError)


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
        raise HxdError(f"benchmark {spec.name!r} has no questions to evaluate" + "".join(
            f" ({len(report.skipped)} rows skipped; {where}: {why})" for where, why in report.skipped[:1]))
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
    _write_questions(fs, root, items)
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


GRID_DEFAULT_MODES = ("llm_only", "dual", "logic", "auto")


def run_grid(args: argparse.Namespace) -> dict[str, Any]:
    """Every cell of the grid as an ordinary (resumable) run under ``<output>/cells/``, then the comparison table.

    Every cell's config is checked and every index manifest read before the first answer, so a typo in the last
    axis value fails at once rather than after hours of the earlier cells.
    """
    from hxd2_ray.config import embedding_model_id, load_config
    from hxd2_ray.evaluation.datasets import get_benchmark
    from hxd2_ray.evaluation.grid import (
        describe_extraction,
        grid_rows,
        parse_axis,
        parse_index_variant,
        plan_cells,
        write_grid,
    )
    from hxd2_ray.indexing.manifest import check_compatible, read_manifest
    from hxd2_ray.ingest.sources import resolve_filesystem
    from hxd2_ray.stages.eval_stage import EVAL_MODES

    spec = get_benchmark(args.benchmark)  # ValueError listing the valid names
    modes = list(dict.fromkeys(args.modes or GRID_DEFAULT_MODES))
    if bad := [m for m in modes if m not in EVAL_MODES]:
        raise ValueError(f"unknown mode(s) {bad}; valid: {', '.join(EVAL_MODES)}")
    axes = [parse_axis(a) for a in args.axes]
    cells = plan_cells([parse_index_variant(x) for x in args.indexes], axes, modes)
    cfg = load_config(args.config, args.overrides)
    manifests: dict[str, Any] = {}
    for cell in cells:
        cell_cfg = load_config(args.config, [*args.overrides, *cell.overrides])  # bad keys/values list valid ones
        ix = cell.index
        if ix is None:
            continue
        try:
            if ix.label not in manifests:
                fs_ix, path = resolve_filesystem(ix.location, cfg.s3)
                manifests[ix.label] = read_manifest(path, filesystem=fs_ix)
            # An axis may change the query-side embedding: each cell must still be able to open its index.
            check_compatible(manifests[ix.label], embedding_model_id(cell_cfg.embedding), cell_cfg.embedding.dim)
        except (HxdError, OSError, ValueError) as exc:
            raise HxdError(f"index {ix.label} (cell {cell.name}): {exc}") from None
    index_info = {label: describe_extraction(m.config) for label, m in manifests.items()}
    fs, root = _open_fs(args.output, cfg)
    base = args.output.rstrip("/")
    summaries: dict[str, dict[str, Any]] = {}
    cell_reports = []
    for i, cell in enumerate(cells, 1):
        _log(f"grid cell {i}/{len(cells)}: {cell.name} ({', '.join(cell.modes)})")
        cell_args = argparse.Namespace(**{
            **vars(args), "modes": list(cell.modes), "index": cell.index.location if cell.index else None,
            "output": f"{base}/cells/{cell.name}", "overrides": [*args.overrides, *cell.overrides]})
        summary = run_eval(cell_args)
        summaries[cell.name] = summary
        cell_reports.append({"cell": cell.name, "output": summary["output"],
                             "answered_this_run": summary["answered_this_run"],
                             "answer_seconds": summary["answer_seconds"]})
    questions = next(iter(summaries.values()))["questions"]
    paths = _publish(fs, root, lambda folder: write_grid(
        folder, benchmark=spec.name, questions=questions, cells=cells, summaries=summaries, index_info=index_info,
        axes=axes, metrics=list(spec.metrics), primary_metric=spec.primary_metric))
    rows = grid_rows(cells, summaries, index_info)
    return {"benchmark": spec.name, "output": args.output, "questions": questions, "cells": cell_reports,
            "primary_metric": spec.primary_metric, "rows": rows, "report": paths}


def format_grid(s: dict[str, Any]) -> str:
    from hxd2_ray.evaluation.grid import row_label

    primary = s["primary_metric"]
    width = max([len(row_label(r)) for r in s["rows"]] + [10])
    lines = [f"grid over {s['benchmark']}: {len(s['cells'])} cell(s), {s['questions']} questions each "
             f"-> {s['output']}", f"  {'setup':<{width}} {primary:>8} {'n':>5} {'errors':>6}"]
    for r in s["rows"]:
        score = r["metrics"].get(primary)
        lines.append(f"  {row_label(r):<{width}} {'-' if score is None else f'{score:.3f}':>8} {r['n']:>5} "
                     f"{r['errors']:>6}")
    lines.append(f"  table: {s['report'].get('markdown')}")
    return "\n".join(lines)


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


# ---------------------------------------------------------------------------------------------- judge


QUESTIONS_FILE = "questions.json"


def _write_questions(fs: Any, root: str, items: list[Any]) -> None:
    """The evaluated questions (text, gold answers, options) beside the traces, for ``hxd2 eval judge``."""
    st.write_json_atomic(fs, posixpath.join(root, QUESTIONS_FILE), [
        {"id": it.id, "position": i, "question": it.question, "answers": list(it.answers),
         "choices": [list(c) for c in it.choices], "task": it.task} for i, it in enumerate(items)])


def load_questions(fs: Any, root: str, run: dict[str, Any], data_root: str | None = None,
                   questions: str | None = None, corpus: str | None = None) -> dict[str, dict[str, Any]]:
    """id -> question dict of a run: its questions.json, else the benchmark reloaded (runs written before
    questions.json existed; --data-root/--questions/--corpus as given to ``hxd2 eval run``)."""
    saved = st.read_json(fs, posixpath.join(root, QUESTIONS_FILE))
    if saved is not None and questions is None:
        return {str(q["id"]): q for q in saved}
    from hxd2_ray.evaluation.datasets import get_benchmark

    spec = get_benchmark(run["benchmark"])
    try:
        items = spec.load(data_root, questions=questions, corpus=corpus).items
    except (OSError, ValueError) as exc:
        raise HxdError(f"{root} has no {QUESTIONS_FILE} and benchmark {spec.name!r} could not be reloaded "
                       f"({exc}); pass --data-root / --questions as given to hxd2 eval run") from exc
    if run.get("limit") is not None:
        items = items[: run["limit"]]
    if run.get("items_hash") and _items_hash([it.id for it in items]) != run["items_hash"]:
        _log(f"warning: the reloaded questions of {spec.name} differ from the run's; pairing by id")
    return {it.id: {"id": it.id, "question": it.question, "answers": list(it.answers),
                    "choices": [list(c) for c in it.choices]} for it in items}


def _judge_modes(run_a: dict[str, Any], run_b: dict[str, Any], mode_a: str | None, mode_b: str | None,
                 one_run: bool) -> tuple[str, str]:
    modes_a, modes_b = list(run_a.get("modes") or []), list(run_b.get("modes") or [])
    if one_run:
        if mode_a is None and mode_b is None and len(modes_a) == 2:
            mode_a, mode_b = modes_a
        if mode_a is None or mode_b is None or mode_a == mode_b:
            raise HxdError(f"judging two modes of one run needs --mode-a and --mode-b, two different ones of "
                           f"{modes_a}")
    else:
        if mode_a is None and len(modes_a) == 1:
            mode_a = modes_a[0]
        if mode_b is None:
            mode_b = modes_b[0] if len(modes_b) == 1 else (mode_a if mode_a in modes_b else None)
        if mode_a is None or mode_b is None:
            raise HxdError(f"pick the modes to judge with --mode-a (run A has {modes_a}) and --mode-b "
                           f"(run B has {modes_b})")
    for mode, modes, which in ((mode_a, modes_a, "A"), (mode_b, modes_b, "B")):
        if mode not in modes:
            raise HxdError(f"run {which} has no mode {mode!r}; it has {modes}")
    return mode_a, mode_b


def _publish(fs: Any, root: str, write: Any) -> dict[str, str]:
    """``write(folder) -> {name: Path}`` into ``root``: directly when local, else through a temp folder."""
    from pyarrow import fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        return {k: str(p) for k, p in write(root).items()}
    with tempfile.TemporaryDirectory() as tmp:
        out = {}
        for name, p in write(tmp).items():
            target = posixpath.join(root, Path(p).name)
            fs.create_dir(root, recursive=True)
            with fs.open_output_stream(target) as dst:
                dst.write(Path(p).read_bytes())
            out[name] = target
        return out


def judge_runs(args: argparse.Namespace, llm: Any = None) -> dict[str, Any]:
    """Pairwise LLM-as-judge of mode A of run A against mode B of run B (or of two modes of one run)."""
    from hxd2_ray.config import load_config
    from hxd2_ray.evaluation.judge import (PairwiseJudge, load_judge_prompts, load_judge_prompts_file,
                                           pair_items, write_judge_report)

    cfg = load_config(args.config, args.overrides)
    one_run = args.b is None
    sides = []
    for d in (args.a, args.a if one_run else args.b):
        fs, root = _open_fs(d, cfg)
        run = st.read_json(fs, posixpath.join(root, "run.json"))
        if run is None:
            raise HxdError(f"{d} holds no evaluation run (run.json is missing)")
        sides.append((d, fs, root, run))
    (dir_a, fs_a, root_a, run_a), (dir_b, fs_b, root_b, run_b) = sides
    mode_a, mode_b = _judge_modes(run_a, run_b, args.mode_a, args.mode_b, one_run)
    questions = load_questions(fs_a, root_a, run_a, args.data_root, args.questions, args.corpus)
    if not one_run:  # questions of B that A lacks (the pairing needs both, so this only helps odd cases)
        with contextlib.suppress(HxdError):
            for qid, q in load_questions(fs_b, root_b, run_b, args.data_root, args.questions, args.corpus).items():
                questions.setdefault(qid, q)
    items, pairing = pair_items(load_traces(fs_a, root_a, [mode_a]), load_traces(fs_b, root_b, [mode_b]),
                                questions, limit=args.limit, use_reference=not args.no_reference)
    if not items:
        raise HxdError(f"no question answered by both {dir_a}:{mode_a} and {dir_b}:{mode_b} ({pairing})")
    name_a, name_b = (posixpath.basename(r.rstrip("/")) or r for r in (root_a, root_b))
    label_a, label_b = (mode_a, mode_b) if one_run else (f"{name_a}/{mode_a}", f"{name_b}/{mode_b}")
    prompts = load_judge_prompts_file(args.prompts) if args.prompts else load_judge_prompts(args.prompt_version)
    own_llm = llm is None
    if own_llm:
        from hxd2_ray.wiring import build_llm

        llm = build_llm(cfg.llm)
    try:
        judge = PairwiseJudge(llm, criteria=args.criteria or ["overall"], prompts=prompts, language=args.language,
                              batch_size=args.batch_size, max_tokens=args.max_tokens,
                              max_answer_chars=args.max_answer_chars, seed=args.seed)
        _log(f"judging {len(items)} pairs x {len(judge.criteria)} criteria x 2 orders: {label_a} vs {label_b}")
        t0 = time.perf_counter()
        result = judge.judge(items)
        seconds = time.perf_counter() - t0
    finally:
        if own_llm and hasattr(llm, "close"):
            llm.close()
    result.info.update({"run_a": dir_a, "run_b": dir_b, "mode_a": mode_a, "mode_b": mode_b,
                        "pairing": pairing, "seconds": round(seconds, 3)})
    if args.output:
        fs_out, root_out = _open_fs(args.output, cfg)
    else:
        suffix = f"{mode_a}-vs-{mode_b}" if one_run else f"{mode_a}-vs-{name_b}-{mode_b}"
        fs_out, root_out = fs_a, posixpath.join(root_a, f"judge-{suffix}")
    paths = _publish(fs_out, root_out, lambda folder: write_judge_report(result, folder, label_a, label_b))
    return {"label_a": label_a, "label_b": label_b, "pairing": pairing, "info": result.info,
            "totals": result.totals, "report": paths}


def build_judge_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hxd2 eval judge",
        description="pairwise LLM-as-judge of two runs (or two modes of one run), each pair judged in both orders")
    p.add_argument("a", help="run folder A")
    p.add_argument("b", nargs="?", default=None, help="run folder B (default: A, judging --mode-a vs --mode-b)")
    p.add_argument("--config", default=None, help="YAML config; its llm section is the judge model")
    p.add_argument("--mode-a", default=None, help="mode of run A (default: its only mode)")
    p.add_argument("--mode-b", default=None, help="mode of run B (default: its only mode, else --mode-a)")
    p.add_argument("--limit", type=int, default=None, help="first N paired questions only")
    p.add_argument("--output", default=None,
                   help="folder for judge.json / judge.md / judge.png (default: <A>/judge-<modes>)")
    p.add_argument("--criterion", dest="criteria", action="append", default=[], metavar="NAME[=TEXT]",
                   help="overall (default) | correctness | comprehensiveness | faithfulness, or NAME=custom text "
                        "(repeatable: each criterion is judged separately)")
    p.add_argument("--language", default="auto", help="prompt language: auto (per question) | en | zh")
    p.add_argument("--no-reference", action="store_true", help="do not show the gold answer to the judge")
    p.add_argument("--batch-size", type=int, default=256, help="judge requests per LLM batch")
    p.add_argument("--max-tokens", type=int, default=128, help="completion cap of one verdict")
    p.add_argument("--max-answer-chars", type=int, default=2000, help="longer answers are cut")
    p.add_argument("--prompt-version", default="v1", help="packaged judge prompt set")
    p.add_argument("--prompts", default=None, help="judge prompt YAML file (overrides --prompt-version)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--data-root", default=None, help="benchmark data root, for runs without questions.json")
    p.add_argument("--questions", default=None, help="questions file, for runs without questions.json")
    p.add_argument("--corpus", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    return p


def _main_judge(argv: list[str]) -> int:
    from hxd2_ray.evaluation.judge import format_totals

    args = build_judge_parser().parse_args(argv)
    if args.batch_size < 1 or args.max_tokens < 1 or (args.limit is not None and args.limit < 1):
        print("error: --batch-size, --max-tokens and --limit must be >= 1", file=sys.stderr)
        return 2
    def text(summary: dict[str, Any]) -> str:
        totals = format_totals(summary["totals"], summary["label_a"], summary["label_b"])
        return (f"judged {summary['pairing']['judged']} pairs ({summary['info']['judge_model']}, prompts "
                f"{summary['info']['prompt_version']})\n{totals}\n  report: {summary['report'].get('markdown')}")

    return run_and_report(lambda: judge_runs(args), as_json=args.json, format_text=text, errors=_EXPECTED)


# ---------------------------------------------------------------------------------------------- CLI


def build_run_parser(prog: str = "hxd2 eval run", grid: bool = False) -> argparse.ArgumentParser:
    """The options of ``eval run``; with ``grid``, those of ``eval grid`` (named index variants and axes)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=None, help="YAML config (default: built-in defaults)")
    p.add_argument("--benchmark", required=True, help="benchmark name (see hxd2_ray.evaluation.datasets)")
    if grid:
        p.add_argument("--index", dest="indexes", action="append", default=[], metavar="LABEL=PATH",
                       help="an index variant, e.g. a loop-NER setting (repeatable; folder or s3:// URI)")
        p.add_argument("--axis", dest="axes", action="append", default=[], metavar="SECTION.KEY=V1,V2",
                       help="a query-time setting to vary, e.g. retrieval.chunk_budget_tokens=2000,8000 (repeatable)")
        p.add_argument("--output", required=True, help="grid folder or s3:// URI (cells/, grid.md, grid.json)")
    else:
        p.add_argument("--index", default=None, help="index folder or s3:// URI (not needed for llm_only alone)")
        p.add_argument("--output", required=True, help="run folder or s3:// URI (traces, report)")
    p.add_argument("--limit", type=int, default=None, help="first N questions only")
    p.add_argument("--mode", dest="modes", action="append", default=[],
                   help="llm_only | dual | logic | auto | auto_post | chunk_vector | dual_retrieval "
                        f"(repeatable; default {' '.join(GRID_DEFAULT_MODES) if grid else 'auto'})")
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
    return run_and_report(lambda: run_eval(args), as_json=args.json, format_text=format_summary, errors=_EXPECTED)


def _main_grid(argv: list[str]) -> int:
    args = build_run_parser("hxd2 eval grid", grid=True).parse_args(argv)
    if args.workers < 1 or args.concurrency < 1 or (args.shards is not None and args.shards < 1):
        print("error: --workers, --concurrency and --shards must be >= 1", file=sys.stderr)
        return 2
    return run_and_report(lambda: run_grid(args), as_json=args.json, format_text=format_grid, errors=_EXPECTED)


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


def _main_corpus(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="hxd2 eval corpus",
        description="write a benchmark's corpus as JSONL {id, title, text}: the input of `hxd2 index` (each "
                    "passage keeps its own id, which references and recall@k use)")
    p.add_argument("--benchmark", required=True)
    p.add_argument("--output", required=True, help="JSONL file to write")
    p.add_argument("--data-root", default=None, help="benchmark data root (default ../shared/data)")
    p.add_argument("--corpus", default=None, help="corpus file (overrides the benchmark's default)")
    args = p.parse_args(argv)
    from hxd2_ray.evaluation.datasets import get_benchmark, write_corpus_jsonl

    try:
        skipped: list[tuple[str, str]] = []
        records = get_benchmark(args.benchmark).load_corpus(args.data_root, corpus=args.corpus, skipped=skipped)
        n = write_corpus_jsonl(records, args.output)
    except (HxdError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} passages to {args.output}" + (f" ({len(skipped)} skipped)" if skipped else ""))
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
        commands = {"run": _main_run, "grid": _main_grid, "report": _main_report, "compare": _main_compare,
                    "judge": _main_judge, "corpus": _main_corpus}
        return commands[argv[0]](argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print("usage: hxd2 eval {run,grid,report,compare,judge,corpus} ...  (no subcommand: run)\n")
        build_run_parser().print_help()
        return 0
    return _main_run(argv)


if __name__ == "__main__":
    sys.exit(main())
