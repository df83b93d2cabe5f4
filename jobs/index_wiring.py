"""What every ``hxd2 index`` command (build, update, delete) wires the same way: its lines and progress, the Ray
runner of the library's build flow, the LLM cache and budget flags, the exit status of a stopped run."""

from __future__ import annotations

import argparse
import sys

from hxd2_ray.config import HxdConfig
from hxd2_ray.stages.runner import BuildHooks, RunContext, StageRunner
from jobs import telemetry


def _log(msg: str) -> None:
    print(f"[hxd2 index] {msg}", file=sys.stderr, flush=True)


def _say(msg: str) -> None:
    """A line the user must see on the terminal, also when Ray's lines go to the log file: what a crash or a killed
    build left and this run repaired (a lock taken over, a leftover folder removed)."""
    from jobs import progress

    board = progress.current()
    if isinstance(board, progress.NullBoard):
        _log(msg)
    else:
        board.note(msg)


def index_hooks() -> BuildHooks:
    """The build's lines, stages and counters, on this job's progress board and telemetry."""
    return BuildHooks(
        log=_log,
        say=_say,
        stage=lambda name, status: telemetry.stage("index", name, status=status),
        counter=lambda stage, **kw: telemetry.for_job("index").counter(stage, **kw),
    )


def ray_runner(run: RunContext) -> StageRunner:
    """The build's stages on Ray Data, every node checked first (``ray.check_nodes``); Ray is up."""
    from hxd2_ray.stages.ray_runner import RayRunner
    from jobs.cluster_check import check_every_node

    return RayRunner(run, check_nodes=check_every_node)


def init_ray(cfg: HxdConfig) -> None:
    from hxd2_ray.stages.ray_runner import init_ray as start

    start(cfg)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The LLM cache and budget flags of every command that changes an index (build, update, delete)."""
    parser.add_argument("--no-llm-cache", action="store_true", help="call the LLM for every request (llm_cache)")
    parser.add_argument(
        "--llm-cache",
        default=None,
        metavar="DIR_OR_S3",
        help="LLM response cache to use (default: <output>/_llm_cache)",
    )
    parser.add_argument(
        "--budget-tokens",
        type=int,
        default=None,
        metavar="N",
        help="stop cleanly once this run has spent N LLM tokens (prompt + completion); rerun to go on",
    )
    parser.add_argument(
        "--budget-usd",
        type=float,
        default=None,
        metavar="USD",
        help="stop cleanly once this run has cost USD dollars (cost.prices); rerun to go on",
    )


def config_with_run_options(args: argparse.Namespace) -> HxdConfig:
    overrides = list(args.overrides)
    if args.no_llm_cache:
        overrides.append("llm_cache.enabled=false")
    if args.llm_cache:
        overrides.append(f"llm_cache.location={args.llm_cache}")
    from hxd2_ray.retrieval.query_config import load_query_config

    # An existing output brings its own config (an update, an overwrite); a new one gets the shipped default models.
    return load_query_config(args.output, args.config, overrides, new_index=True, keep_ray=True)


# Exit status of a run that stopped at its budget: its summary is printed, the work is not finished.
EXIT_STOPPED = 3
