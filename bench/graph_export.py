"""``hxd2 graph`` on a large synthetic graph: export time and peak memory per format, stats and show.

    .venv/bin/python bench/graph_export.py [--entities 1000000] [--formats graphml,csv,cypher] [--graph DIR]

The graph is ``bench/storage_write.py``'s synthetic shape (N entities, 1.5N relations, N/4 chunks of ~768
chars, N/40 documents, ~2N mentions), built once in a child process (kept with ``--graph DIR``). Every
measurement runs in a fresh child process and reports its peak resident memory (``ru_maxrss``) and the
resident memory right after the store was opened, so each figure is that command's own. For scale, one more
child reads the whole graph into Arrow at once (``scan_tables``, what a non-streaming export would hold).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args: argparse.Namespace) -> None:
    from jobs.graph_cli import open_graph

    graph_dir = Path(args.graph)
    if args.child == "build":
        sys.path.insert(0, str(ROOT / "bench"))
        from storage_write import make_tables

        from hxd2_ray.graph.kuzu_store import load_graph

        docs, chunks, ents, rels = make_tables(args.entities)
        graph_dir.mkdir(parents=True, exist_ok=True)
        counts = load_graph(graph_dir / "graph.kuzu", docs, chunks.drop_columns(["shard"]), ents, rels)
        print(json.dumps(counts))
        return
    if args.child == "scan_all":  # what holding the whole graph at once takes (Kùzu's default page cache)
        from hxd2_ray.graph.kuzu_store import KuzuGraphStore

        store = KuzuGraphStore(graph_dir / "graph.kuzu", read_only=True)
    else:
        store = open_graph(str(graph_dir))
    opened = _rss_mb()
    started = time.perf_counter()
    result: dict = {}
    if args.child == "scan_all":
        tables = store.scan_tables()
        result["rows"] = sum(t.num_rows for t in tables.values())
    elif args.child == "stats":
        from hxd2_ray.graph_views.stats import graph_stats

        stats = graph_stats(store, graph_dir)
        result["components"] = stats["components"]["count"]
    elif args.child == "show":
        from hxd2_ray.graph_views.draw import draw_png
        from hxd2_ray.graph_views.subgraph import most_connected

        sub = most_connected(store, hops=2, max_nodes=40)
        draw_png(sub, args.out)
        result["nodes"] = len(sub.entities)
    else:
        from hxd2_ray.graph_export import export_graph

        summary = export_graph(store, args.child, args.out)
        result["rows"] = sum(summary.counts.values())
        out = Path(args.out)
        result["bytes"] = sum(f.stat().st_size for f in out.iterdir()) if out.is_dir() else out.stat().st_size
    result.update(
        seconds=round(time.perf_counter() - started, 1),
        opened_rss_mb=round(opened, 1),
        peak_rss_mb=round(_peak_mb(), 1),
    )
    store.close()
    print(json.dumps(result))


def _run_child(what: str, graph: Path, out: Path, entities: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        what,
        "--graph",
        str(graph),
        "--out",
        str(out),
        "--entities",
        str(entities),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entities", type=int, default=1_000_000)
    p.add_argument("--formats", default="graphml,csv,cypher")
    p.add_argument("--graph", default=None, help="folder to build the graph in (kept); default: a temp folder")
    p.add_argument("--skip", default="", help="comma-separated: scan_all,stats,show")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="hxd2-graph-bench-"))
    graph = Path(args.graph) if args.graph else tmp / "graph"
    if not (graph / "graph.kuzu").exists():
        t0 = time.perf_counter()
        counts = _run_child("build", graph, tmp / "none", args.entities)
        print(f"built {counts} in {time.perf_counter() - t0:.0f}s", flush=True)
    size_mb = (graph / "graph.kuzu").stat().st_size / 2**20
    print(f"graph file {size_mb:,.0f} MB; load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    skip = set(filter(None, args.skip.split(",")))
    for fmt in filter(None, args.formats.split(",")):
        out = tmp / ("csv" if fmt == "csv" else f"graph.{fmt}")
        r = _run_child(fmt, graph, out, args.entities)
        rows.append((f"export {fmt}", r))
        print(f"export {fmt}: {r}", flush=True)
        if out.is_dir():
            for f in out.iterdir():
                f.unlink()
        else:
            out.unlink()
    for what in ("stats", "show", "scan_all"):
        if what in skip:
            continue
        r = _run_child(what, graph, tmp / "show.png", args.entities)
        rows.append((what, r))
        print(f"{what}: {r}", flush=True)
    print(f"\n| command ({args.entities:,} entities) | seconds | peak RSS MB | RSS after open MB | output MB |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        mb = f"{r['bytes'] / 2**20:,.0f}" if "bytes" in r else "—"
        print(f"| {name} | {r['seconds']:,.1f} | {r['peak_rss_mb']:,.0f} | {r['opened_rss_mb']:,.0f} | {mb} |")
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
