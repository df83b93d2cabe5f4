"""``hxd2 graph``: look at an index's knowledge graph.

    hxd2 graph export --index DIR --format graphml|csv|cypher --output PATH
    hxd2 graph show   --index DIR [--entity NAME] [--hops N] [--max-nodes N] --output view.png|view.html
    hxd2 graph stats  --index DIR [--output DIR] [--json]

``export`` streams every entity, relation, chunk and document with its properties (GraphML for Gephi/yEd, a
folder of CSV files for ``neo4j-admin database import``, or a Cypher script for your own Neo4j), page by page in
bounded memory. ``show`` draws an entity's neighbourhood, or around the most connected entity, as a PNG or a
self-contained HTML page you can pan and zoom. ``stats`` prints and plots counts, degrees, entity types, the
largest components, quarantined files and extraction failures. The index is opened read-only; a local folder
(copy an ``s3://`` index down first).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hxd2_ray.errors import HxdError

SUBCOMMANDS = ("export", "show", "stats")
_EXPECTED = (HxdError, ValueError, FileNotFoundError)
# Kùzu's page cache for these scans (its default is a share of the machine's memory).
_BUFFER_POOL_BYTES = 256 * 1024 * 1024


def open_graph(index: str) -> Any:
    """The current generation's graph of the index at ``index``, read-only, through the index layout, with the
    engine that wrote it (the manifest's ``graph_backend``)."""
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore
    from hxd2_ray.index_store.layout import locate_local_index

    if "://" in index:
        raise HxdError(f"hxd2 graph reads a local index folder; copy {index} to a local folder first")
    layout = locate_local_index(index)
    return KuzuGraphStore(
        layout.graph_path,
        read_only=True,
        buffer_pool_bytes=_BUFFER_POOL_BYTES,
        engine=layout.manifest.graph_backend,
    )


# ---------------------------------------------------------------------------------------------- export


def run_export(args: argparse.Namespace) -> dict[str, Any]:
    from hxd2_ray.graph_export import export_graph
    from jobs import progress

    store = open_graph(args.index)
    try:
        counts = store.counts()
        board = progress.current()
        # PART_OF has one row per chunk whose document exists: every chunk, for an index this project built.
        total = sum(counts.values()) + counts["chunks"]
        board.begin("export", total=total, unit="rows")
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        summary = export_graph(store, args.format, output, counter=board.counter("export"))
        board.end("export", f"{args.format} -> {output}")
    finally:
        store.close()
    return summary.to_dict()


def format_export(s: dict[str, Any]) -> str:
    lines = [
        f"graph exported as {s['format']} to {s['output']} in {s['seconds']:.1f}s",
        "  " + ", ".join(f"{k} {v:,}" for k, v in s["counts"].items()),
    ]
    if s["replaced_characters"]:
        lines.append(f"  {s['replaced_characters']:,} characters the format cannot carry were replaced by U+FFFD")
    lines += [f"  {n}" for n in s["notes"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- show


def run_show(args: argparse.Namespace) -> dict[str, Any]:
    from hxd2_ray.graph_views.subgraph import attach_sources, most_connected, neighbourhood

    suffix = Path(args.output).suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise HxdError(f"--output must end in .png or .html, got {args.output!r}")
    if args.hops < 0 or args.max_nodes < 1:
        raise HxdError("--hops must be >= 0 and --max-nodes >= 1")
    store = open_graph(args.index)
    try:
        if args.entity:
            sub = neighbourhood(store, args.entity, hops=args.hops, max_nodes=args.max_nodes)
        else:
            sub = most_connected(store, hops=max(1, args.hops), max_nodes=args.max_nodes)
        if suffix != ".png":  # the page shows each entity's source chunks; a picture has no room for them
            attach_sources(store, sub)
    finally:
        store.close()
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".png":
        from hxd2_ray.graph_views.draw import draw_png

        drawn = draw_png(sub, output, subtitle=f"index: {args.index}")
    else:
        from hxd2_ray.graph_views.html_view import write_html

        drawn = write_html(sub, output)
    return {"output": str(output), "title": sub.title, **drawn, "not_shown": sub.cut}


def format_show(s: dict[str, Any]) -> str:
    more = f" ({s['not_shown']} more entities within reach not shown: raise --max-nodes)" if s["not_shown"] else ""
    return f"{s['title']}\n  {s['nodes']} entities, {s['edges']} relations drawn -> {s['output']}" + more


# ---------------------------------------------------------------------------------------------- stats


def run_stats(args: argparse.Namespace) -> dict[str, Any]:
    import json

    from hxd2_ray.graph_views.stats import graph_stats, plot_stats

    store = open_graph(args.index)
    try:
        stats = graph_stats(store, args.index)
    finally:
        store.close()
    out = Path(args.output) if args.output else Path(args.index) / "_stats"
    out.mkdir(parents=True, exist_ok=True)
    (out / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    plot_stats(stats, out / "stats.png")
    stats["files"] = {"json": str(out / "stats.json"), "png": str(out / "stats.png")}
    return stats


def format_stats(s: dict[str, Any]) -> str:
    from hxd2_ray.graph_views.stats import format_stats as text

    return text(s) + f"\n  written: {s['files']['png']}, {s['files']['json']}"


# ---------------------------------------------------------------------------------------------- CLI


def build_parser(sub: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"hxd2 graph {sub}", description=__doc__.split("\n\n")[0])
    p.add_argument("--index", required=True, help="index folder")
    if sub == "export":
        p.add_argument("--format", required=True, choices=("graphml", "csv", "cypher"))
        p.add_argument("--output", required=True, help="file (graphml, cypher) or folder (csv)")
    elif sub == "show":
        p.add_argument("--entity", default=None, help="centre on this entity (default: the most connected one)")
        p.add_argument("--hops", type=int, default=1, help="relations to walk from the centre (default 1)")
        p.add_argument("--max-nodes", type=int, default=40, help="entities drawn at most (default 40)")
        p.add_argument("--output", required=True, help="view.png or view.html")
    else:
        p.add_argument("--output", default=None, help="folder for stats.png and stats.json (default <index>/_stats)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="progress as plain lines")
    return p


def main(argv: list[str] | None = None) -> int:
    from jobs.console import run_job

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS:
        print(f"usage: hxd2 graph {{{','.join(SUBCOMMANDS)}}} --index DIR ...\n\n{__doc__}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    sub, rest = argv[0], argv[1:]
    args = build_parser(sub).parse_args(rest)
    work, text = {
        "export": (run_export, format_export),
        "show": (run_show, format_show),
        "stats": (run_stats, format_stats),
    }[sub]
    # Nothing here logs at length (no Ray, no model): no log file; the progress and warnings still show.
    return run_job(
        lambda: work(args),
        command=f"graph {sub}",
        log_path=None,
        verbose=args.verbose,
        as_json=args.json,
        format_text=text,
        errors=_EXPECTED,
    )
