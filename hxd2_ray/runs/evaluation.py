"""Evaluation runs as library functions: a typed request in, a summary out, every file under the run's folder.

:func:`run_evaluation` cuts the questions into deterministic shards by position, answers the shards of every mode
that have no trace file yet, and writes ``run.json``, ``questions.json``, ``summary.json`` and the report;
:func:`run_grid` runs every cell of an ablation as an ordinary run and writes the comparison table. Answering is
delegated to a :class:`ShardRunner` — Ray Data's actor pool in ``jobs/evaluate.py``, or the in-process one of
:mod:`hxd2_ray.stages.eval_stage` — so this module holds no Ray.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hxd2_ray.config import HxdConfig, embedding_model_id, load_config
from hxd2_ray.errors import HxdError, IndexNotFoundError
from hxd2_ray.evaluation.datasets import get_benchmark
from hxd2_ray.evaluation.grid import (
    describe_extraction,
    grid_rows,
    parse_axis,
    parse_index_variant,
    plan_cells,
    write_grid,
)
from hxd2_ray.evaluation.report import aggregate, compare_runs, write_report
from hxd2_ray.index_store.cluster_storage import ReportedFile, check_reported_files
from hxd2_ray.index_store.manifest import check_compatible, read_manifest
from hxd2_ray.index_store.output import open_output
from hxd2_ray.ingest.sources import resolve_filesystem
from hxd2_ray.retrieval.index import open_index
from hxd2_ray.retrieval.query_config import load_query_config
from hxd2_ray.runs.refusal_rates import GATED_MODES, off_topic_refusals
from hxd2_ray.runs.requests import EvalGridRequest, EvalRunRequest
from hxd2_ray.stages import staging as st
from hxd2_ray.stages.eval_traces import SHARD_STATS, load_traces, shard_path

QUESTIONS_FILE = "questions.json"


@dataclass(frozen=True)
class ShardJob:
    """The shards of one mode still to answer, and how."""

    cfg: HxdConfig
    index: str  # "" for llm_only
    mode: str
    fs: Any  # pyarrow FileSystem of the run folder
    root: str
    rows: list[dict[str, Any]]  # {"shard", "benchmark", "items_json"}
    workers: int
    concurrency: int
    cpus_per_worker: float
    gpus_per_worker: float
    questions: int = 0  # in the pending shards
    label: str = ""  # what progress lines call this run (a grid's cell)


class ShardRunner(Protocol):
    def __call__(self, job: ShardJob) -> pa.Table:
        """Answer every shard of ``job`` (each writes its own trace file) and return their SHARD_STATS rows."""
        ...


Log = Callable[[str], None]


def make_shards(n_items: int, n_shards: int) -> list[tuple[int, int]]:
    """[start, end) of each shard: contiguous by position, the first ones one larger when n does not divide."""
    n_shards = max(1, min(n_shards, n_items)) if n_items else 0
    bounds, start = [], 0
    for s in range(n_shards):
        size = n_items // n_shards + (1 if s < n_items % n_shards else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


def items_hash(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def open_run_folder(uri: str, cfg: HxdConfig) -> tuple[Any, str]:
    return open_output(uri, cfg.s3)


def run_config(req: EvalRunRequest | EvalGridRequest, index: str | None) -> HxdConfig:
    """The request's config, else the one the index was built with (its manifest), else the defaults."""
    if req.config is None and index:
        return load_query_config(index, None, req.overrides)
    return load_config(req.config, req.overrides)


# ------------------------------------------------------------------------------------------------ run


def run_evaluation(
    req: EvalRunRequest,
    answer_shards: ShardRunner,
    log: Log = lambda _: None,
    cfg: HxdConfig | None = None,
    label: str = "",
) -> dict[str, Any]:
    """Answer, score and report one benchmark; a rerun answers only the shards that have no trace file.

    ``cfg``: the config already resolved from the request (a grid resolves each cell's); None resolves it here.
    ``label``: what progress lines call this run (a grid names its cells).
    """
    spec = get_benchmark(req.benchmark)  # ValueError listing the valid names
    modes = list(req.modes)
    if any(m != "llm_only" for m in modes) and not req.index:
        raise HxdError("--index is required for every mode except llm_only")
    cfg = cfg or run_config(req, req.index)
    if req.index and any(m != "llm_only" for m in modes):
        open_index(req.index, cfg).close()  # a missing or incompatible index fails here, before any answering
    report = spec.load(req.data_root, questions=req.questions, corpus=req.corpus)
    items = report.items[: req.limit] if req.limit is not None else list(report.items)
    if not items:
        raise HxdError(
            f"benchmark {spec.name!r} has no questions to evaluate"
            + "".join(f" ({len(report.skipped)} rows skipped; {where}: {why})" for where, why in report.skipped[:1])
        )
    fs, root = open_run_folder(req.output, cfg)
    n_shards = req.shards or min(len(items), 4 * req.workers)
    bounds = make_shards(len(items), n_shards)
    ids = [it.id for it in items]
    run_path = posixpath.join(root, "run.json")
    previous = st.read_json(fs, run_path)
    # Answers depend on everything but the Ray section (actors, CPUs): a changed setting needs a new output.
    answer_cfg = {k: v for k, v in cfg.model_dump(mode="json").items() if k != "ray"}
    identity = {
        "benchmark": spec.name,
        "items_hash": items_hash(ids),
        "shards": len(bounds),
        "config_hash": items_hash([json.dumps(answer_cfg, sort_keys=True, default=str)]),
    }
    if previous and {k: previous.get(k) for k in identity} != identity:
        raise HxdError(
            f"{req.output} holds a run with another benchmark, question set, shard count or config "
            f"({ {k: previous.get(k) for k in identity} }); use a new --output"
        )

    shard_rows: list[dict[str, Any]] = []
    for s, (a, b) in enumerate(bounds):
        dicts = [{**items[i].to_dict(), "position": i} for i in range(a, b)]
        shard_rows.append(
            {"shard": s, "benchmark": spec.name, "items_json": json.dumps(dicts, ensure_ascii=False, default=str)}
        )
    shards_run: dict[str, list[int]] = {}
    shards_skipped: dict[str, list[int]] = {}
    answered = 0
    answer_seconds = 0.0
    for mode in modes:
        done = _finished_shards(fs, root, mode, len(bounds), log)
        pending = [r for r in shard_rows if r["shard"] not in done]
        shards_skipped[mode] = sorted(done)
        shards_run[mode] = [r["shard"] for r in pending]
        if not pending:
            log(f"mode {mode}: every shard answered earlier")
            continue
        workers = max(1, min(req.workers, len(pending)))
        log(f"mode {mode}: {len(pending)} of {len(bounds)} shards, {workers} worker(s)")
        t0 = time.perf_counter()
        n_questions = sum(bounds[r["shard"]][1] - bounds[r["shard"]][0] for r in pending)
        stats = answer_shards(
            ShardJob(
                cfg=cfg,
                index=req.index or "",
                mode=mode,
                fs=fs,
                root=root,
                rows=pending,
                workers=workers,
                concurrency=req.concurrency,
                cpus_per_worker=req.cpus_per_worker,
                gpus_per_worker=req.gpus_per_worker,
                questions=n_questions,
                label=label,
            )
        )
        answer_seconds += time.perf_counter() - t0
        if stats.num_rows:
            stats = stats.select(SHARD_STATS.names)
            # Every shard a worker answered must be readable here: a worker on another node with a local --output
            # writes its traces where this process never looks.
            check_reported_files(
                fs,
                [
                    ReportedFile(shard_path(root, m, int(s)), int(q))
                    for m, s, q in zip(
                        stats.column("mode").to_pylist(),
                        stats.column("shard").to_pylist(),
                        stats.column("questions").to_pylist(),
                        strict=True,
                    )
                ],
                "evaluation",
                req.output,
            )
            answered += int(pc.sum(stats.column("questions")).as_py() or 0)

    traces = load_traces(fs, root, modes)
    counts = {m: sum(1 for t in traces if t["mode"] == m) for m in modes}
    run = {
        **identity,
        "questions": len(items),
        "modes": modes,
        "index": req.index,
        "config": req.config,
        "overrides": list(req.overrides),
        "workers": req.workers,
        "concurrency": req.concurrency,
        "limit": req.limit,
        "metrics": list(spec.metrics),
        "primary_metric": spec.primary_metric,
        "skipped_rows": [list(s) for s in report.skipped],
        "loader": {"items": len(report.items), "skipped": len(report.skipped), "filtered": dict(report.filtered)},
    }
    if req.index and cfg.multistage.refusal_enabled and any(m in GATED_MODES for m in modes):
        run["off_topic_refusals"] = off_topic_refusals(req.index, cfg)
    st.write_json_atomic(fs, run_path, run)
    write_questions(fs, root, items)
    paths = write_run_report(fs, root, traces, run)
    agg = aggregate(traces, list(spec.metrics), spec.primary_metric)
    summary = {
        "benchmark": spec.name,
        "output": req.output,
        "questions": len(items),
        "modes": modes,
        "shards": len(bounds),
        "shards_run": shards_run,
        "shards_skipped": shards_skipped,
        "traces": counts,
        "answered_this_run": answered,
        "answer_seconds": round(answer_seconds, 3),
        "questions_per_s": round(answered / answer_seconds, 3) if answer_seconds > 0 else None,
        "skipped_rows": len(report.skipped),
        "primary_metric": spec.primary_metric,
        "per_mode": {
            m: {
                "n": v["n"],
                "errors": v["errors"],
                "correct": v["correct"],
                "metrics": v["metrics"],
                "latency_s": v["latency_s"],
                "prompt_tokens_mean": v["prompt_tokens_mean"],
                "completion_tokens_mean": v["completion_tokens_mean"],
                "paths": v["paths"],
                "refused": v["refused"],
            }
            for m, v in agg.items()
        },
        "report": paths,
        "off_topic_refusals": run.get("off_topic_refusals"),
    }
    st.write_json_atomic(fs, posixpath.join(root, "summary.json"), summary)
    return summary


def _finished_shards(fs: Any, root: str, mode: str, n_shards: int, log: Log) -> set[int]:
    """Shards of ``mode`` whose trace file is readable; an unreadable one (a crash mid-write) is removed."""
    done = set()
    for s in range(n_shards):
        path = shard_path(root, mode, s)
        if st.exists(fs, path):
            try:
                pq.read_metadata(path, filesystem=fs)
                done.add(s)
            except (OSError, pa.ArrowInvalid):
                log(f"removing unreadable {path}")
                st.remove_files(fs, [path])
    return done


# ----------------------------------------------------------------------------------------------- grid


def run_grid(req: EvalGridRequest, answer_shards: ShardRunner, log: Log = lambda _: None) -> dict[str, Any]:
    """Every cell of the grid as an ordinary (resumable) run under ``<output>/cells/``, then the comparison table.

    Every cell's config is checked and every index manifest read before the first answer, so a typo in the last
    axis value fails at once rather than after hours of the earlier cells.
    """
    spec = get_benchmark(req.benchmark)  # ValueError listing the valid names
    axes = [parse_axis(a) for a in req.axes]
    variants = [parse_index_variant(x) for x in req.indexes]
    cells = plan_cells(variants, axes, list(req.modes))
    first_index = variants[0].location if variants else None
    try:
        cfg = run_config(req, first_index)
    except IndexNotFoundError as exc:  # without --config the first index's manifest is the config
        raise HxdError(f"index {variants[0].label}: {exc}") from None
    manifests: dict[str, Any] = {}
    cell_cfgs: dict[str, HxdConfig] = {}
    for cell in cells:
        # Without --config every cell answers with the first variant's recorded config (llm_only included).
        cell_cfg = cell_cfgs[cell.name] = run_config(
            req.model_copy(update={"overrides": (*req.overrides, *cell.overrides)}), first_index
        )
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
    fs, root = open_run_folder(req.output, cfg)
    base = req.output.rstrip("/")
    summaries: dict[str, dict[str, Any]] = {}
    cell_reports = []
    for i, cell in enumerate(cells, 1):
        log(f"grid cell {i}/{len(cells)}: {cell.name} ({', '.join(cell.modes)})")
        cell_req = req.cell_run(
            tuple(cell.modes),
            cell.index.location if cell.index else None,
            f"{base}/cells/{cell.name}",
            tuple(cell.overrides),
        )
        summary = run_evaluation(cell_req, answer_shards, log, cfg=cell_cfgs[cell.name], label=cell.name)
        summaries[cell.name] = summary
        cell_reports.append(
            {
                "cell": cell.name,
                "output": summary["output"],
                "answered_this_run": summary["answered_this_run"],
                "answer_seconds": summary["answer_seconds"],
            }
        )
    questions = next(iter(summaries.values()))["questions"]
    paths = publish(
        fs,
        root,
        lambda folder: write_grid(
            folder,
            benchmark=spec.name,
            questions=questions,
            cells=cells,
            summaries=summaries,
            index_info=index_info,
            axes=axes,
            metrics=list(spec.metrics),
            primary_metric=spec.primary_metric,
        ),
    )
    rows = grid_rows(cells, summaries, index_info)
    return {
        "benchmark": spec.name,
        "output": req.output,
        "questions": questions,
        "cells": cell_reports,
        "primary_metric": spec.primary_metric,
        "rows": rows,
        "report": paths,
    }


# ------------------------------------------------------------------------------------- report / compare


def write_run_report(fs: Any, root: str, traces: list[dict[str, Any]], run: dict[str, Any]) -> dict[str, str]:
    """The report of a run (markdown, JSON, plots) into its folder."""
    saved = st.read_json(fs, posixpath.join(root, QUESTIONS_FILE)) or []
    kwargs = dict(
        title=f"Evaluation: {run['benchmark']}",
        metrics=run.get("metrics"),
        primary_metric=run.get("primary_metric"),
        skipped_rows=run.get("skipped_rows", []),
        run_info={k: v for k, v in run.items() if k not in ("skipped_rows", "metrics", "off_topic_refusals")},
        questions={str(q["id"]): q for q in saved},
        off_topic=run.get("off_topic_refusals"),
    )
    return publish(fs, root, lambda folder: write_report(traces, folder, **kwargs))


def publish(fs: Any, root: str, write: Callable[[str], dict[str, Any]]) -> dict[str, str]:
    """``write(folder) -> {name: Path}`` into ``root``: directly when local, else through a temp folder."""
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


def read_run(fs: Any, root: str, where: str) -> dict[str, Any]:
    run = st.read_json(fs, posixpath.join(root, "run.json"))
    if run is None:
        raise HxdError(f"{where} holds no evaluation run (run.json is missing)")
    return run


def rebuild_report(out: str, config: str | None = None, overrides: tuple[str, ...] = ()) -> dict[str, str]:
    cfg = load_config(config, overrides)
    fs, root = open_run_folder(out, cfg)
    run = read_run(fs, root, out)
    return write_run_report(fs, root, load_traces(fs, root, run.get("modes")), run)


def compare_dirs(a: str, b: str, metric: str | None = None, config: str | None = None) -> Any:
    cfg = load_config(config, [])
    traces = []
    for d in (a, b):
        fs, root = open_run_folder(d, cfg)
        traces.append(load_traces(fs, root, read_run(fs, root, d).get("modes")))
    return compare_runs(traces[0], traces[1], metric=metric)


# ------------------------------------------------------------------------------------------ questions


def write_questions(fs: Any, root: str, items: list[Any]) -> None:
    """The evaluated questions (text, gold answers, options) beside the traces, for ``hxd2 eval judge``."""
    st.write_json_atomic(
        fs,
        posixpath.join(root, QUESTIONS_FILE),
        [
            {
                "id": it.id,
                "position": i,
                "question": it.question,
                "answers": list(it.answers),
                "choices": [list(c) for c in it.choices],
                "task": it.task,
            }
            for i, it in enumerate(items)
        ],
    )


def load_questions(
    fs: Any,
    root: str,
    run: dict[str, Any],
    data_root: str | None = None,
    questions: str | None = None,
    corpus: str | None = None,
    log: Log = lambda _: None,
) -> dict[str, dict[str, Any]]:
    """id -> question dict of a run: its questions.json, else the benchmark reloaded (runs written before
    questions.json existed; --data-root/--questions/--corpus as given to ``hxd2 eval run``)."""
    saved = st.read_json(fs, posixpath.join(root, QUESTIONS_FILE))
    if saved is not None and questions is None:
        return {str(q["id"]): q for q in saved}
    spec = get_benchmark(run["benchmark"])
    try:
        items = spec.load(data_root, questions=questions, corpus=corpus).items
    except (OSError, ValueError) as exc:
        raise HxdError(
            f"{root} has no {QUESTIONS_FILE} and benchmark {spec.name!r} could not be reloaded "
            f"({exc}); pass --data-root / --questions as given to hxd2 eval run"
        ) from exc
    if run.get("limit") is not None:
        items = items[: run["limit"]]
    if run.get("items_hash") and items_hash([it.id for it in items]) != run["items_hash"]:
        log(f"warning: the reloaded questions of {spec.name} differ from the run's; pairing by id")
    return {
        it.id: {
            "id": it.id,
            "question": it.question,
            "answers": list(it.answers),
            "choices": [list(c) for c in it.choices],
        }
        for it in items
    }
