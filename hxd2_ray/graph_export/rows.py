"""The graph's tables as the exporters see them (names, property types, endpoints) and the export entry point."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hxd2_ray.progress import NO_COUNTER, StageCounter

NODE_KINDS = ("Document", "Chunk", "Entity")
EDGE_KINDS = ("RELATED", "MENTIONS", "PART_OF")
# Property name -> type (Neo4j import type names; GraphML maps them), in the order they are written.
PROPERTIES: dict[str, tuple[tuple[str, str], ...]] = {
    "Document": (("id", "string"), ("source_id", "string"), ("source_path", "string"), ("title", "string"),
                 ("n_chars", "long")),
    "Chunk": (("id", "string"), ("doc_id", "string"), ("order", "long"), ("start", "long"), ("text", "string"),
              ("header_path", "string"), ("language", "string")),
    "Entity": (("key", "string"), ("name", "string"), ("type", "string"), ("description", "string"),
               ("source_chunk_ids", "string[]"), ("mention_count", "long"), ("name_truncated", "boolean"),
               ("degree", "long")),
    "RELATED": (("description", "string"), ("keywords", "string[]"), ("weight", "double"),
                ("source_chunk_ids", "string[]"), ("mention_count", "long")),
    "MENTIONS": (),
    "PART_OF": (),
}
ID_PROPERTY = {"Document": "id", "Chunk": "id", "Entity": "key"}
# relationship -> (start column, end column, start node kind, end node kind)
ENDPOINTS = {
    "RELATED": ("source_key", "target_key", "Entity", "Entity"),
    "MENTIONS": ("chunk_id", "entity_key", "Chunk", "Entity"),
    "PART_OF": ("chunk_id", "doc_id", "Chunk", "Document"),
}
# Nodes per page (chunks carry their text, so fewer of them).
PAGE_NODES = {"Document": 50_000, "Chunk": 10_000, "Entity": 20_000, "RELATED": 20_000, "MENTIONS": 10_000,
              "PART_OF": 50_000}
EXPORT_FORMATS = ("graphml", "csv", "cypher")

Pages = Callable[[str], Iterator[list[dict[str, Any]]]]


def store_pages(store: Any) -> Pages:
    """Row pages of each kind from a graph store with ``iter_pages`` (Kùzu's ``ord`` is exported as ``order``)."""

    def pages(kind: str) -> Iterator[list[dict[str, Any]]]:
        for page in store.iter_pages(kind, PAGE_NODES[kind]):
            rows = page.to_pylist()
            if kind == "Chunk":
                for r in rows:
                    r["order"] = r.pop("ord")
            yield rows

    return pages


@dataclass
class ExportSummary:
    format: str
    output: str
    files: list[str]
    counts: dict[str, int]
    # Characters the format cannot carry (XML 1.0 forbids most control characters; CSV arrays use U+001F as
    # their delimiter), replaced by U+FFFD and counted here.
    replaced_characters: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def export_graph(store: Any, fmt: str, output: str | os.PathLike[str],
                 counter: StageCounter = NO_COUNTER) -> ExportSummary:
    """Write the graph of ``store`` as ``fmt`` (graphml: one file; csv: a folder of Neo4j import files;
    cypher: one script) at ``output``; ``counter`` gets ``done`` = rows written, page by page."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    started = time.perf_counter()
    pages = store_pages(store)
    if fmt == "graphml":
        from hxd2_ray.graph_export.graphml import write_graphml as write
    elif fmt == "csv":
        from hxd2_ray.graph_export.neo4j_csv import write_neo4j_csv as write
    else:
        from hxd2_ray.graph_export.cypher import write_cypher as write
    summary = write(pages, os.fspath(output), counter)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary
