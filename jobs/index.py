"""Indexing job: corpus -> chunks -> loop-NER -> global merge -> embeddings -> Kùzu graph + sharded Faiss.

Run locally (starts a local Ray):   python -m jobs.index --config configs/local.yaml --input DIR --output DIR
On a cluster:  ray job submit --working-dir . -- python -m jobs.index --config configs/gpu.yaml --input s3://…

Every stage persists its results under ``<output>/_staging`` before the next starts, so a rerun after a
crash skips finished work: ingest and merge by input fingerprint, extraction and embedding per row.
``manifest.json`` is written last; an output without it is never taken for a complete index.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from hxd2_ray.config import HxdConfig, stand_ins
from hxd2_ray.errors import HxdError
from hxd2_ray.stages.runner import LLM_CACHE_FOLDER, RunOptions
from jobs.index_format import format_summary
from jobs.index_wiring import (
    EXIT_STOPPED,
    _say,
    add_run_options,
    config_with_run_options,
    index_hooks,
    init_ray,
    ray_runner,
)

if TYPE_CHECKING:
    from hxd2_ray.ingest.sources import InputSelection

# Also this job's API (tests and benchmarks use them from here): the summary's text, the wiring of a run.
__all__ = [
    "EXIT_STOPPED",
    "add_run_options",
    "config_with_run_options",
    "format_summary",
    "index_hooks",
    "init_ray",
    "main",
    "preflight",
    "ray_runner",
    "run_index",
]


def preflight(cfg: HxdConfig, input_uri: str, output_uri: str, overwrite: bool = False) -> InputSelection:
    """Check the input (walked: the files to read) and the output (created if missing) before anything else is
    written or started; an :class:`HxdError` says what is wrong. Returns the selected inputs."""
    from hxd2_ray.index_store.output import check_input_outside, open_output
    from hxd2_ray.ingest.sources import select_inputs
    from hxd2_ray.wiring import check_llm_server

    inputs = select_inputs(input_uri, cfg.ingest, cfg.s3, exclude=(output_uri,))
    if overwrite:
        check_input_outside(input_uri, output_uri, cfg.s3)
    check_llm_server(cfg.llm)  # a remote model server that is down: one line, exit 2, before Ray starts
    open_output(output_uri, cfg.s3)
    return inputs


def run_index(
    cfg: HxdConfig,
    input_uri: str,
    output_uri: str,
    overwrite: bool = False,
    options: RunOptions | None = None,
    inputs: InputSelection | None = None,
) -> dict[str, Any]:
    """Check the input and the output (unless ``inputs`` says :func:`preflight` did), take the output's build
    lock, then start Ray and build or change the index. ``overwrite`` empties the output first, but for its LLM
    cache (replies keyed by model, prompt and sampling are never stale) and the run's log folder."""
    from hxd2_ray.index_store.output import build_output
    from hxd2_ray.indexer.flow import IndexBuild
    from jobs.console import LOG_FOLDER

    if inputs is None:
        inputs = preflight(cfg, input_uri, output_uri, overwrite)
    with build_output(
        output_uri,
        cfg.s3,
        overwrite=overwrite,
        input_uri=input_uri,
        command="index",
        keep_on_overwrite=(LOG_FOLDER, LLM_CACHE_FOLDER),
        log=_say,
    ) as output:
        for path in output.swept:
            _say(f"removed {path}, left by a build that was killed")
        init_ray(cfg)
        build = IndexBuild(
            cfg, input_uri, output_uri, ray_runner, options, output=output, inputs=inputs, hooks=index_hooks()
        )
        return build.run()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hxd2 index",
        description=__doc__.split("\n\n")[0],
        epilog="hxd2 index delete --output INDEX --doc-id ID... | --source PATH: "
        "remove documents from an index (hxd2 index delete --help)",
    )
    parser.add_argument(
        "--config",
        default=None,
        help="YAML config (default: the config the output's index was built with; for a new index, the shipped "
        "default models, configs/local.yaml)",
    )
    parser.add_argument(
        "--input",
        required=True,
        help="folder, file, glob or s3:// URI of the corpus; when the "
        "output holds an index, the documents to add or update",
    )
    parser.add_argument("--output", required=True, help="index folder or s3:// URI")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="delete what the output holds first (but its LLM cache) and build from scratch",
    )
    add_run_options(parser)
    parser.add_argument(
        "--sync",
        action="store_true",
        help="make the index exactly the input folder or prefix: new and changed documents are indexed and those "
        "whose files are gone deleted, in one generation (without it an update only adds and changes)",
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="the output's index was built by another release or config that extracts differently (the update "
        "says what changed): build the whole input into a new generation; the current one stays served until then",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate tokens, time and cost from a sample of the chunks to extract; build nothing",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Ray, Ray Data and vLLM logs here (default: in <output>/_logs/)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from jobs.console import log_path_for, run_job

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "delete":  # hxd2 index delete --output DIR --doc-id ID | --source PATH
        from jobs.index_update import main_delete

        return main_delete(argv[1:])
    if argv and argv[0] == "verify":  # hxd2 index verify --index DIR: the files against the manifest's checksums
        from jobs.index_verify import main as verify_main

        return verify_main(argv[1:])
    if argv and argv[0] in ("export", "import"):  # hxd2 index export --index DIR --output ARCHIVE | import ARCHIVE
        from jobs.index_backup import main_export, main_import

        return (main_export if argv[0] == "export" else main_import)(argv[1:])
    if argv and argv[0] == "reindex-reads":  # hxd2 index reindex-reads --index DIR: an older index's read structures
        from jobs.index_reads import main as reads_main

        return reads_main(argv[1:])
    args = build_parser().parse_args(argv)
    # A bad input or output is one error line before the console opens its log inside the output.
    try:
        cfg = config_with_run_options(args)
        inputs = preflight(cfg, args.input, args.output, args.overwrite)
    except (HxdError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcome: dict[str, Any] = {}

    def work() -> dict[str, Any]:
        options = RunOptions(
            budget_tokens=args.budget_tokens,
            budget_usd=args.budget_usd,
            dry_run=args.dry_run,
            sync=args.sync,
            rebuild=args.rebuild,
        )
        outcome.update(
            run_index(cfg, args.input, args.output, overwrite=args.overwrite, options=options, inputs=inputs)
        )
        outcome["stand_ins"] = stand_ins(cfg)
        return outcome

    code = run_job(
        work,
        command="index",
        log_path=log_path_for("index", args.output),
        verbose=args.verbose,
        run=args.output,
        as_json=args.json,
        format_text=format_summary,
    )
    return EXIT_STOPPED if code == 0 and outcome.get("status") == "stopped" else code


if __name__ == "__main__":
    sys.exit(main())
