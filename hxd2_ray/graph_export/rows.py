"""The graph's tables as the exporters see them (names, property types, endpoints) and its pages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hxd2_ray.progress import StageCounter

NODE_KINDS = ("Document", "Chunk", "Entity")
EDGE_KINDS = ("RELATED", "MENTIONS", "PART_OF")
# Property name -> type (Neo4j import type names; GraphML maps them), in the order they are written.
PROPERTIES: dict[str, tuple[tuple[str, str], ...]] = {
    "Document": (
        ("id", "string"),
        ("source_id", "string"),
        ("source_path", "string"),
        ("title", "string"),
        ("n_chars", "long"),
    ),
    "Chunk": (
        ("id", "string"),
        ("doc_id", "string"),
        ("order", "long"),
        ("start", "long"),
        ("text", "string"),
        ("header_path", "string"),
        ("language", "string"),
    ),
    "Entity": (
        ("key", "string"),
        ("name", "string"),
        ("type", "string"),
        ("description", "string"),
        ("source_chunk_ids", "string[]"),
        ("mention_count", "long"),
        ("name_truncated", "boolean"),
        ("degree", "long"),
    ),
    "RELATED": (
        ("description", "string"),
        ("keywords", "string[]"),
        ("weight", "double"),
        ("source_chunk_ids", "string[]"),
        ("mention_count", "long"),
    ),
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
PAGE_NODES = {
    "Document": 50_000,
    "Chunk": 10_000,
    "Entity": 20_000,
    "RELATED": 20_000,
    "MENTIONS": 10_000,
    "PART_OF": 50_000,
}
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


def counted_pages(
    pages: Pages, kind: str, counts: dict[str, int], counter: StageCounter
) -> Iterator[list[dict[str, Any]]]:
    """The pages of one kind, each added to ``counts[kind]`` and to the progress ``counter`` once the caller has
    written it (the loop body between two pages)."""
    counts[kind] = 0
    for rows in pages(kind):
        yield rows
        counts[kind] += len(rows)
        counter.add(done=len(rows))


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
