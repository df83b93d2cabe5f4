"""hxd2 index reindex-reads --index DIR: write the graph read structures of an index built before they existed.

The query side maps them (the ``ppr`` ranking needs them past ``retrieval.resident_graph_max_mb``); a build,
``--update`` and ``delete`` write them with every new generation. Vector families and a lexical index written
before their id maps and vocabulary were mapped are rewritten in the mapped format too (they answer the same).
Exit 0 when written, 2 on a bad index.
"""

from __future__ import annotations

import argparse
import sys

from hxd2_ray.errors import HxdError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hxd2 index reindex-reads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True, help="local index folder")
    parser.add_argument(
        "--config", default=None, help="YAML config (default: the config the index was built with, from its manifest)"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    return parser


def main(argv: list[str] | None = None) -> int:
    from hxd2_ray.indexer.reindex_reads import reindex_reads
    from hxd2_ray.retrieval.query_config import load_query_config

    args = build_parser().parse_args(argv)
    try:
        result = reindex_reads(
            args.index, load_query_config(args.index, args.config, args.overrides, keep_ray=True), progress=print
        )
    except HxdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"read structures written for {result['entities']:,} entities and {result['chunks']:,} chunks "
        f"in {result['seconds']:.1f}s: {args.index}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
