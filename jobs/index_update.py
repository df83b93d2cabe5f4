"""``hxd2 index delete``: remove documents from an index (a new generation).

    hxd2 index delete --output EXISTING --doc-id ID ...    remove documents by id
    hxd2 index delete --output EXISTING --source PATH ...  remove the documents read from a file (or a folder)

Adding or updating documents is ``hxd2 index --input NEW --output EXISTING`` (``jobs/index.py``); both are the
library's build flow (:mod:`hxd2_ray.indexer`), a change of the current generation
(:mod:`hxd2_ray.indexer.update`).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from hxd2_ray.config import HxdConfig
from hxd2_ray.errors import HxdError
from hxd2_ray.stages.runner import RunOptions


def run_delete(
    cfg: HxdConfig, output_uri: str, doc_ids: list[str], source_paths: list[str], options: RunOptions | None = None
) -> dict[str, Any]:
    """Delete documents under the output's build lock (no other build or change runs meanwhile)."""
    from hxd2_ray.index_store.output import build_output
    from hxd2_ray.indexer.flow import IndexBuild
    from jobs.index_wiring import _say, index_hooks, init_ray, ray_runner

    if not doc_ids and not source_paths:
        raise HxdError("name the documents to delete: --doc-id ID and/or --source PATH")
    with build_output(output_uri, cfg.s3, command="index delete", log=_say) as output:
        for path in output.swept:
            _say(f"removed {path}, left by a build that was killed")
        init_ray(cfg)
        build = IndexBuild(cfg, "", output.uri, ray_runner, options, output=output, hooks=index_hooks())
        return build.delete(doc_ids, [_as_source(p) for p in source_paths])


def _as_source(path: str) -> str:
    """A --source as documents record it: s3:// URIs as given, local paths absolute."""
    if "://" in path and not path.startswith("file://"):
        return path.rstrip("/")
    return os.path.abspath(os.path.expanduser(path.removeprefix("file://")))


def build_delete_parser() -> argparse.ArgumentParser:
    from jobs.index_wiring import add_run_options

    parser = argparse.ArgumentParser(
        prog="hxd2 index delete", description="Remove documents from an index (a new generation)."
    )
    parser.add_argument("--output", required=True, help="the index folder or s3:// URI")
    parser.add_argument(
        "--doc-id",
        dest="doc_ids",
        action="append",
        default=[],
        metavar="ID",
        help="a document id (the record's id field, else its file path); repeatable",
    )
    parser.add_argument(
        "--source",
        dest="sources",
        action="append",
        default=[],
        metavar="PATH",
        help="every document read from this file, or from the files under this folder; repeatable",
    )
    parser.add_argument("--config", default=None, help="YAML config (default: the one the index was built with)")
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
        "-v",
        "--verbose",
        action="store_true",
        help="show Ray, Ray Data and vLLM logs here (default: in <output>/_logs/)",
    )
    add_run_options(parser)
    return parser


def main_delete(argv: list[str]) -> int:
    from hxd2_ray.retrieval.query_config import load_query_config
    from jobs.console import log_path_for, run_job
    from jobs.index_format import format_summary
    from jobs.index_wiring import EXIT_STOPPED

    args = build_delete_parser().parse_args(argv)
    outcome: dict[str, Any] = {}

    def work() -> dict[str, Any]:
        overrides = list(args.overrides)
        if args.no_llm_cache:
            overrides.append("llm_cache.enabled=false")
        if args.llm_cache:
            overrides.append(f"llm_cache.location={args.llm_cache}")
        cfg = load_query_config(args.output, args.config, overrides, keep_ray=True)
        options = RunOptions(budget_tokens=args.budget_tokens, budget_usd=args.budget_usd)
        outcome.update(run_delete(cfg, args.output, args.doc_ids, args.sources, options))
        return outcome

    code = run_job(
        work,
        command="index-delete",
        log_path=log_path_for("index-delete", args.output),
        verbose=args.verbose,
        run=args.output,
        as_json=args.json,
        format_text=format_summary,
    )
    return EXIT_STOPPED if code == 0 and outcome.get("status") == "stopped" else code
