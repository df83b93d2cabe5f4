"""Evaluation job: answer a benchmark with one or more query modes over an index, score, and report.

    python -m jobs.evaluate --benchmark hotpotqa --index DIR --output DIR [--mode dual --mode auto ...]
    hxd2 eval run ...              (same as above)
    hxd2 eval grid --index base=DIR --index gleaning2=DIR2 --axis retrieval.chunk_budget_tokens=2000,8000 ...
                                   one run per cell (index variant x axis values) and a table like the paper's
    hxd2 eval report DIR           rebuild report.md / report.json / PNGs from the shard traces
    hxd2 eval compare DIR1 DIR2    per-question differences between two runs
    hxd2 eval judge DIR_A [DIR_B] --mode-a M --mode-b M   pairwise LLM-as-judge of two runs or two modes

This module parses arguments into the typed requests of :mod:`hxd2_ray.runs.requests`, starts Ray and hands
the library functions (:mod:`hxd2_ray.runs.evaluation`, :mod:`hxd2_ray.runs.judging`) a shard runner: each
shard of each mode is answered by an actor of a Ray Data actor pool (``--workers``) and persisted as
``<output>/shards/<mode>/shard-NNNN.parquet``. A rerun skips the shards whose file exists, so a killed run resumes
where it stopped. Without ``--config`` the index's own recorded config is used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from hxd2_ray.errors import HxdError
from hxd2_ray.retrieval.flow import MODES
from hxd2_ray.runs.requests import GRID_DEFAULT_MODES
from jobs import telemetry
from jobs.cli import add_config_overrides, run_and_report

SUBCOMMANDS = ("run", "grid", "report", "compare", "judge", "corpus")
# Errors a user can fix (bad names, paths, values): one line and exit status 2, not a traceback.
_EXPECTED = (HxdError, ValueError, FileNotFoundError)


def _log(msg: str) -> None:
    print(f"[hxd2 eval] {msg}", file=sys.stderr, flush=True)


def ray_shard_runner(job: Any) -> pa.Table:
    """Answer a mode's pending shards on a Ray Data actor pool (each actor loads the LLM and the index once)."""
    import ray

    from hxd2_ray.stages.eval_stage import AnswerQuestions
    from hxd2_ray.stages.ray_runner import collect as _collect
    from hxd2_ray.wiring import check_llm_server
    from jobs.index_wiring import init_ray

    if job.mode not in ("chunk_vector", "graphflow"):  # the modes that make no LLM call need no server
        check_llm_server(job.cfg.llm)  # a remote model server that is down: one line, exit 2, before Ray starts
    init_ray(job.cfg)
    _check_nodes(job)
    stage_name = " ".join(x for x in ("answer", job.label, job.mode) if x)
    stage = telemetry.begin_stage("eval", stage_name)
    counter = telemetry.for_job("eval").counter(
        stage_name, unit="questions", score=True, mode=job.mode, total=job.questions
    )
    ds = ray.data.from_arrow([pa.Table.from_pylist([r]) for r in job.rows])
    stats = _collect(
        ds.map_batches(
            AnswerQuestions,
            fn_constructor_args=(job.cfg, job.index, job.mode, job.fs, job.root, None, job.concurrency),
            fn_constructor_kwargs={"counter": counter},
            batch_size=1,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=job.workers),
            num_cpus=job.cpus_per_worker,
            num_gpus=job.gpus_per_worker,
        )
    )
    stage.end(f"{len(job.rows)} shards, {job.workers} worker(s)")
    return stats


_NODES_CHECKED: set[tuple[str, str]] = set()


def _check_nodes(job: Any) -> None:
    """Once per run folder and index: every node writes the run folder the driver reads, and reads the index."""
    if not job.cfg.ray.check_nodes or (job.root, job.index) in _NODES_CHECKED:
        return
    from hxd2_ray.index_store.cluster_storage import ReadCheck
    from hxd2_ray.ingest.sources import resolve_filesystem
    from jobs.cluster_check import check_every_node

    reads = []
    if job.index:
        index_fs, index_path = resolve_filesystem(job.index, job.cfg.s3)
        reads.append(ReadCheck(index_fs, (f"{index_path.rstrip('/')}/manifest.json",), "index"))
    check_every_node(job.fs, job.root, job.root, reads=reads, what="evaluation output and index", log=_log)
    _NODES_CHECKED.add((job.root, job.index))


def _request(model: Any, args: argparse.Namespace) -> Any:
    """A command's typed request (:mod:`hxd2_ray.runs.requests`): each field from the option of the same name
    (every field has one; the model turns the options' lists into its tuples and checks every value)."""
    return model(**{name: getattr(args, name) for name in model.model_fields})


def _run_request(args: argparse.Namespace) -> Any:
    from hxd2_ray.runs.requests import EvalRunRequest

    return _request(EvalRunRequest, args)


def _grid_request(args: argparse.Namespace) -> Any:
    from hxd2_ray.runs.requests import EvalGridRequest

    return _request(EvalGridRequest, args)


def _judge_request(args: argparse.Namespace) -> Any:
    from hxd2_ray.runs.requests import JudgeRequest

    return _request(JudgeRequest, args)


def format_grid(s: dict[str, Any]) -> str:
    from hxd2_ray.evaluation.grid import row_label

    primary = s["primary_metric"]
    width = max([len(row_label(r)) for r in s["rows"]] + [10])
    lines = [
        f"grid over {s['benchmark']}: {len(s['cells'])} cell(s), {s['questions']} questions each -> {s['output']}",
        f"  {'setup':<{width}} {primary:>8} {'n':>5} {'errors':>6}",
    ]
    for r in s["rows"]:
        score = r["metrics"].get(primary)
        lines.append(
            f"  {row_label(r):<{width}} {'-' if score is None else f'{score:.3f}':>8} {r['n']:>5} {r['errors']:>6}"
        )
    lines.append(f"  table: {s['report'].get('markdown')}")
    return "\n".join(lines)


def format_summary(s: dict[str, Any]) -> str:
    primary = s["primary_metric"]
    lines = [
        f"evaluated {s['benchmark']}: {s['questions']} questions x {len(s['modes'])} mode(s), "
        f"{s['shards']} shards -> {s['output']}",
        f"  answered this run {s['answered_this_run']} in {s['answer_seconds']:.1f}s "
        f"({s['questions_per_s'] or 0:.2f} questions/s); skipped malformed rows {s['skipped_rows']}",
        f"  {'mode':<10} {'n':>5} {'errors':>6} {primary:>8} {'p50 s':>7} {'p95 s':>7}",
    ]
    for m, v in s["per_mode"].items():
        score = v["metrics"].get(primary)
        lat = v["latency_s"]
        lines.append(
            f"  {m:<10} {v['n']:>5} {v['errors']:>6} {'-' if score is None else f'{score:.3f}':>8} "
            f"{lat['p50'] or 0:>7.3f} {lat['p95'] or 0:>7.3f}"
        )
    lines.append(f"  report: {s['report'].get('markdown')}")
    return "\n".join(lines)


def build_judge_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hxd2 eval judge",
        description="pairwise LLM-as-judge of two runs (or two modes of one run), each pair judged in both orders",
    )
    p.add_argument("a", help="run folder A")
    p.add_argument("b", nargs="?", default=None, help="run folder B (default: A, judging --mode-a vs --mode-b)")
    p.add_argument("--config", default=None, help="YAML config; its llm section is the judge model")
    p.add_argument("--mode-a", default=None, help="mode of run A (default: its only mode)")
    p.add_argument("--mode-b", default=None, help="mode of run B (default: its only mode, else --mode-a)")
    p.add_argument("--limit", type=int, default=None, help="first N paired questions only")
    p.add_argument(
        "--output", default=None, help="folder for judge.json / judge.md / judge.png (default: <A>/judge-<modes>)"
    )
    p.add_argument(
        "--criterion",
        dest="criteria",
        action="append",
        default=[],
        metavar="NAME[=TEXT]",
        help="overall (default) | correctness | comprehensiveness | faithfulness, or NAME=custom text "
        "(repeatable: each criterion is judged separately)",
    )
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
    from hxd2_ray.runs.judging import judge_runs

    args = build_judge_parser().parse_args(argv)
    if args.batch_size < 1 or args.max_tokens < 1 or (args.limit is not None and args.limit < 1):
        print("error: --batch-size, --max-tokens and --limit must be >= 1", file=sys.stderr)
        return 2

    def text(summary: dict[str, Any]) -> str:
        totals = format_totals(summary["totals"], summary["label_a"], summary["label_b"])
        return (
            f"judged {summary['pairing']['judged']} pairs ({summary['info']['judge_model']}, prompts "
            f"{summary['info']['prompt_version']})\n{totals}\n  report: {summary['report'].get('markdown')}"
        )

    return run_and_report(
        lambda: judge_runs(_judge_request(args), log=_log), as_json=args.json, format_text=text, errors=_EXPECTED
    )


# ---------------------------------------------------------------------------------------------- CLI


def build_run_parser(prog: str = "hxd2 eval run", grid: bool = False) -> argparse.ArgumentParser:
    """The options of ``eval run``; with ``grid``, those of ``eval grid`` (named index variants and axes)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--config", default=None, help="YAML config (default: the config the index was built with, from its manifest)"
    )
    p.add_argument("--benchmark", required=True, help="benchmark name (see hxd2_ray.evaluation.datasets)")
    if grid:
        p.add_argument(
            "--index",
            dest="indexes",
            action="append",
            default=[],
            metavar="LABEL=PATH",
            help="an index variant, e.g. a loop-NER setting (repeatable; folder or s3:// URI)",
        )
        p.add_argument(
            "--axis",
            dest="axes",
            action="append",
            default=[],
            metavar="SECTION.KEY=V1,V2",
            help="a query-time setting to vary, e.g. retrieval.chunk_budget_tokens=2000,8000 (repeatable)",
        )
        p.add_argument("--output", required=True, help="grid folder or s3:// URI (cells/, grid.md, grid.json)")
    else:
        p.add_argument("--index", default=None, help="index folder or s3:// URI (not needed for llm_only alone)")
        p.add_argument("--output", required=True, help="run folder or s3:// URI (traces, report)")
    p.add_argument("--limit", type=int, default=None, help="first N questions only")
    p.add_argument(
        "--mode",
        dest="modes",
        action="append",
        default=[],
        help=f"{' | '.join(MODES)} (repeatable; default {' '.join(GRID_DEFAULT_MODES) if grid else 'auto'})",
    )
    p.add_argument("--data-root", default=None, help="benchmark data root (default ../shared/data)")
    p.add_argument("--questions", default=None, help="questions file (overrides the benchmark's default)")
    p.add_argument("--corpus", default=None, help="corpus file (overrides the benchmark's default)")
    p.add_argument("--workers", type=int, default=1, help="answering actors (each loads its own LLM)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="questions answered at once per worker; > 1 batches them in vLLM's async engine",
    )
    p.add_argument("--shards", type=int, default=None, help="question shards (default min(n, 4 x workers))")
    p.add_argument("--cpus-per-worker", type=float, default=1.0)
    p.add_argument("--gpus-per-worker", type=float, default=0.0)
    add_config_overrides(p)
    if not grid:
        p.add_argument(
            "--policy",
            default=None,
            metavar="DIR",
            help="a GraphFlow policy trained for the index: enables --mode graphflow and "
            "multistage.graph_walk (same as --set graphflow.policy=DIR)",
        )
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Ray, Ray Data and vLLM logs here (default: in <output>/_logs/)",
    )
    return p


def _counts_below_one(args: argparse.Namespace) -> bool:
    """Says so on stderr when --workers, --concurrency or --shards is below 1."""
    if args.workers < 1 or args.concurrency < 1 or (args.shards is not None and args.shards < 1):
        print("error: --workers, --concurrency and --shards must be >= 1", file=sys.stderr)
        return True
    return False


def _run_sharded_job(
    args: argparse.Namespace, command: str, work: Callable[[], Any], format_text: Callable[[dict[str, Any]], str]
) -> int:
    """``eval run`` / ``eval grid``: ``work`` under the console (its log in ``<output>``, JSON or text summary)."""
    from jobs.console import log_path_for, run_job

    return run_job(
        work,
        command=command,
        log_path=log_path_for(command.replace(" ", "-"), args.output),
        verbose=args.verbose,
        as_json=args.json,
        format_text=format_text,
        errors=_EXPECTED,
        run=args.output,
    )


def _main_run(argv: list[str]) -> int:
    args = build_run_parser().parse_args(argv)
    if _counts_below_one(args):
        return 2
    from hxd2_ray.runs.evaluation import run_evaluation

    return _run_sharded_job(
        args, "eval run", lambda: run_evaluation(_run_request(args), ray_shard_runner, _log), format_summary
    )


def _main_grid(argv: list[str]) -> int:
    args = build_run_parser("hxd2 eval grid", grid=True).parse_args(argv)
    if _counts_below_one(args):
        return 2
    from hxd2_ray.runs.evaluation import run_grid

    return _run_sharded_job(
        args, "eval grid", lambda: run_grid(_grid_request(args), ray_shard_runner, _log), format_grid
    )


def _main_report(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hxd2 eval report", description="rebuild the report from the shard traces")
    p.add_argument("output")
    p.add_argument("--config", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    args = p.parse_args(argv)
    try:
        from hxd2_ray.runs.evaluation import rebuild_report

        paths = rebuild_report(args.output, args.config, tuple(args.overrides))
    except (HxdError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(f"{k}: {v}" for k, v in paths.items()))
    return 0


def _main_corpus(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="hxd2 eval corpus",
        description="write a benchmark's corpus as JSONL {id, title, text}: the input of `hxd2 index` (each "
        "passage keeps its own id, which references and recall@k use)",
    )
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
        from hxd2_ray.runs.evaluation import compare_dirs

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
        commands = {
            "run": _main_run,
            "grid": _main_grid,
            "report": _main_report,
            "compare": _main_compare,
            "judge": _main_judge,
            "corpus": _main_corpus,
        }
        return commands[argv[0]](argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print("usage: hxd2 eval {run,grid,report,compare,judge,corpus} ...  (no subcommand: run)\n")
        build_run_parser().print_help()
        return 0
    return _main_run(argv)


if __name__ == "__main__":
    sys.exit(main())
