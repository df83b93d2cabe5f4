"""The export entry point: one of the writers over the store's pages."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from hxd2_ray.graph_export.cypher import write_cypher
from hxd2_ray.graph_export.graphml import write_graphml
from hxd2_ray.graph_export.neo4j_csv import write_neo4j_csv
from hxd2_ray.graph_export.rows import EXPORT_FORMATS, ExportSummary, Pages, store_pages
from hxd2_ray.progress import NO_COUNTER, StageCounter

_WRITERS: dict[str, Callable[[Pages, str, StageCounter], ExportSummary]] = {
    "graphml": write_graphml,
    "csv": write_neo4j_csv,
    "cypher": write_cypher,
}


def export_graph(
    store: Any, fmt: str, output: str | os.PathLike[str], counter: StageCounter = NO_COUNTER
) -> ExportSummary:
    """Write the graph of ``store`` as ``fmt`` (graphml: one file; csv: a folder of Neo4j import files;
    cypher: one script) at ``output``; ``counter`` gets ``done`` = rows written, page by page."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    started = time.perf_counter()
    pages = store_pages(store)
    write = _WRITERS[fmt]
    summary = write(pages, os.fspath(output), counter)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary
