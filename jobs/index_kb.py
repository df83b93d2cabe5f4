"""Build a queryable index straight from a ``subject|relation|object`` triple file (e.g. the MetaQA KB): no NER.

    python -m jobs.index_kb --config configs/local.yaml --triples ../shared/data/metaqa/kb.txt \
        --output runs/metaqa_index

Every triple's ends become entities and every triple a fact on its pair's edge (the direction kept in the
edge description); the graph is loaded into Kùzu and the entity / relation vector families are embedded
with the configured embedding model (no chunk vectors: a KB has no documents). ``manifest.json`` is
written last and the folder renamed into place, so the output is complete or absent. Plain Python: no Ray.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hxd2_ray.indexer.kb_index import DEFAULT_EMBED_CALL_SIZE, build_kb_index
from hxd2_ray.retrieval.query_config import load_query_config


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        f"index written to {summary['output']} (fingerprint {summary['fingerprint']})",
        f"  triples {summary['triples']:>10,}   malformed lines skipped {summary['malformed_lines']:,}   "
        f"dropped (self-loops) {summary['dropped_triples']:,}",
        f"  entities {summary['entities']:>9,}   edges {summary['relations']:>10,}",
        "  vectors: " + ", ".join(f"{k} {v:,}" for k, v in summary["vectors"].items()),
        f"  embedding model {summary['embedding_model']} (dim {summary['embedding_dim']}), "
        f"{summary['embedded_texts']:,} distinct texts embedded",
        "  seconds per stage: "
        + ", ".join(f"{k} {v:.1f}" for k, v in summary["seconds_per_stage"].items())
        + f"; total {summary['seconds_total']:.1f}",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hxd2 index-kb", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config",
        default=None,
        help="YAML config (default: the shipped default models, configs/local.yaml; the output's own config when it "
        "holds an index)",
    )
    parser.add_argument("--triples", required=True, help="subject|relation|object file (MetaQA kb.txt)")
    parser.add_argument("--output", required=True, help="local index folder to create")
    parser.add_argument(
        "--limit-entities",
        type=int,
        default=None,
        metavar="N",
        help="keep a closed subgraph of at most N entities (file order decides)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace what the output folder holds")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help=f"texts per embedder call (default {DEFAULT_EMBED_CALL_SIZE})",
    )
    parser.add_argument(
        "--log-every", type=int, default=2, metavar="N", help="a progress line every N embedder calls (default 2)"
    )
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
        help="show the build's log lines and the models' logs here (default: in a log file)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.limit_entities is not None and args.limit_entities <= 0:
        print("error: --limit-entities must be positive", file=sys.stderr)
        return 2
    from hxd2_ray.errors import HxdError
    from jobs import progress
    from jobs.console import log_path_for, run_job

    try:  # a bad output is one error line, before the console opens its log beside it
        cfg = load_query_config(args.output, args.config, args.overrides, new_index=True, keep_ray=True)
        _check_output_parent(args.output, cfg)
    except HxdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def build() -> dict[str, Any]:
        return build_kb_index(
            cfg,
            args.triples,
            args.output,
            limit_entities=args.limit_entities,
            overwrite=args.overwrite,
            batch_size=args.batch_size or DEFAULT_EMBED_CALL_SIZE,
            log_every=max(1, args.log_every),
            board=progress.current(),
        )

    # The output folder must be empty or absent until the build is swapped in: the log goes beside it.
    return run_job(
        build,
        command="index-kb",
        log_path=log_path_for("index-kb", args.output, beside=True),
        verbose=args.verbose,
        as_json=args.json,
        format_text=format_summary,
    )


def _check_output_parent(output: str, cfg: Any) -> None:
    """The build folder and the final rename live beside the output: its parent must be a writable folder.
    Checked before anything is embedded, by the one place that opens outputs (one ``error:`` line if not)."""
    from pathlib import Path

    from hxd2_ray.index_store.output import open_output

    if "://" not in output:
        path = Path(output).expanduser().absolute()
        if path.is_file():
            return  # build_kb_index says "is a file, not an index folder"
        open_output(str(path.parent), cfg.s3)


if __name__ == "__main__":
    sys.exit(main())
