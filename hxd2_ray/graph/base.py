"""Graph store protocol and the plain value types it returns (no engine objects cross this line).

Rows are TypedDicts, i.e. ordinary dicts: they pickle cheaply across Ray and serialise to JSON as is.
Two stores implement it: ``kuzu_store.KuzuGraphStore`` (the store of record) and
``resident.ResidentGraph`` (a read-only graph held in memory over it); keeping the protocol here lets the
query engine and its tests depend on the shape, not on Kùzu.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence, TypedDict, TypeVar

if TYPE_CHECKING:
    import pyarrow as pa

# Bump when the DDL in kuzu_store changes; recorded in the manifest so an old index is rebuilt, not misread.
GRAPH_SCHEMA_VERSION = 1

# Names of the counts() entries, in a fixed order (manifest and CLI print them this way).
COUNT_NAMES = ("documents", "chunks", "entities", "relations", "mentions")


class EntityRow(TypedDict):
    key: str
    name: str
    type: str
    description: str
    source_chunk_ids: list[str]
    mention_count: int
    name_truncated: bool
    degree: int


class EdgeRow(TypedDict):
    """One undirected RELATED edge; ``source_key < target_key`` always (the stored orientation)."""

    source_key: str
    target_key: str
    description: str
    keywords: list[str]
    weight: float
    source_chunk_ids: list[str]
    mention_count: int
    degree: int  # degree(source) + degree(target): LightRAG's edge rank


class ChunkRow(TypedDict):
    id: str
    doc_id: str
    order: int
    start: int
    text: str
    header_path: str
    language: str
    doc_title: str  # "" when the document row is missing
    doc_source_id: str
    doc_source_path: str


class GraphStore(Protocol):
    """Read side of the knowledge graph. All batch methods accept any iterable and ignore unknown keys."""

    def counts(self) -> dict[str, int]:
        """Rows per table: documents, chunks, entities, relations, mentions."""
        ...

    def get_entities(self, keys: Iterable[str]) -> list[EntityRow]:
        """Entities for the known keys, in the order asked (duplicates asked once)."""
        ...

    def find_entity_by_name(self, name: str, key_fn: Callable[[str], str] | None = None) -> EntityRow | None:
        """Exact lookup: by ``key_fn(name)`` when given (the merge stage's normaliser), else by the name property."""
        ...

    def neighbors(self, keys: Iterable[str], limit_per_entity: int | None = None) -> list[EdgeRow]:
        """1-hop undirected edges of the keys, best ``limit_per_entity`` per key by (degree, weight), deduplicated."""
        ...

    def get_relations(self, pairs: Iterable[tuple[str, str]]) -> list[EdgeRow]:
        """Edges for the pairs, in either orientation; missing pairs are skipped."""
        ...

    def chunks_for_entities(self, keys: Iterable[str]) -> dict[str, list[str]]:
        """Chunk ids that mention each key (every asked key present, [] when none), in document order."""
        ...

    def get_chunks(self, ids: Iterable[str]) -> list[ChunkRow]:
        """Chunks for the known ids, in the order asked, with their document's title and source joined."""
        ...

    def entity_degree(self, keys: Iterable[str]) -> dict[str, int]:
        """Degree of each known key (unknown keys are absent)."""
        ...

    def top_relation_keywords(self, limit: int) -> list[str]:
        """The ``limit`` most frequent relation keywords, most frequent first (the planner's relation hint)."""
        ...

    def run_template(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A named read of :mod:`hxd2_ray.graph.templates` with exactly its parameters bound (``KeyError`` for
        an unknown name, ``ValueError`` for missing or extra parameters); rows as that module lists them."""
        ...

    def scan_tables(self, page_nodes: int | None = None) -> dict[str, pa.Table]:
        """Every table as Arrow, for a copy held elsewhere: ``Entity``, ``Chunk`` and ``Document`` with each
        node's offset ``o`` and its properties, ``RELATED`` (``a``, ``b``) and ``MENTIONS`` (``c``, ``e``) as
        node-offset pairs with the relationship's properties. ``page_nodes``: read a page of that many nodes at a
        time (the same rows; the engine holds one page's result at once)."""
        ...

    def warm(self) -> None:
        """Load now whatever the reads resolve against (idempotent), so the first question does not pay for it."""
        ...

    def close(self) -> None: ...


_T = TypeVar("_T")


def unique_in_order(items: Iterable[_T]) -> list[_T]:
    """Drop repeats but keep the caller's order (queries return rows in the order they were asked)."""
    return list(dict.fromkeys(items))


def canonical_pair(a: str, b: str) -> tuple[str, str]:
    """Relations are stored once per unordered pair with the smaller key first."""
    return (a, b) if a <= b else (b, a)


def sort_edges(edges: Sequence[EdgeRow]) -> list[EdgeRow]:
    """LightRAG ranks edges by degree sum, then weight; ties fall back to the keys so results are stable."""
    return sorted(edges, key=lambda e: (-e["degree"], -e["weight"], e["source_key"], e["target_key"]))


def entity_row(r: Mapping[str, Any]) -> EntityRow:
    """An entity from a row holding its stored properties under their column names."""
    return EntityRow(
        key=r["key"],
        name=r["name"],
        type=r["type"],
        description=r["description"],
        source_chunk_ids=list(r["source_chunk_ids"] or []),
        mention_count=int(r["mention_count"]),
        name_truncated=bool(r["name_truncated"]),
        degree=int(r["degree"]),
    )


def chunk_row(r: Mapping[str, Any], doc: Mapping[str, Any]) -> ChunkRow:
    """A chunk from a row holding its stored properties (``ord`` for its order), with its document's title and
    source joined from ``doc`` (empty when the document row is missing)."""
    return ChunkRow(
        id=r["id"],
        doc_id=r["doc_id"],
        order=int(r["ord"]),
        start=int(r["start"]),
        text=r["text"],
        header_path=r["header_path"],
        language=r["language"],
        doc_title=doc.get("doc_title") or "",
        doc_source_id=doc.get("doc_source_id") or "",
        doc_source_path=doc.get("doc_source_path") or "",
    )


def edge_row(a_key: str, b_key: str, r: Mapping[str, Any]) -> EdgeRow:
    """An edge between ``a_key`` and ``b_key`` from a row holding its properties and ``degree`` (oriented
    smaller key first, as stored, whichever end the read started from)."""
    src, tgt = canonical_pair(a_key, b_key)
    return EdgeRow(
        source_key=src,
        target_key=tgt,
        description=r["description"],
        keywords=list(r["keywords"] or []),
        weight=float(r["weight"]),
        source_chunk_ids=list(r["source_chunk_ids"] or []),
        mention_count=int(r["mention_count"]),
        degree=int(r["degree"]),
    )


def rank_neighbors(
    seeds: Sequence[str], per_seed: Sequence[Sequence[Mapping[str, Any]]], limit_per_entity: int | None
) -> list[EdgeRow]:
    """:meth:`GraphStore.neighbors` from each seed's edge rows (``other`` names the far end): each seed's
    best ``limit_per_entity`` edges by :func:`sort_edges`, then all of them deduplicated and sorted."""
    out: dict[tuple[str, str], EdgeRow] = {}
    for seed, rows in zip(seeds, per_seed):
        mine: dict[tuple[str, str], EdgeRow] = {}
        for r in rows:  # a self-loop can come back once per direction; the pair key folds it
            edge = edge_row(seed, r["other"], r)
            mine[(edge["source_key"], edge["target_key"])] = edge
        ranked = sort_edges(list(mine.values()))
        if limit_per_entity is not None:
            ranked = ranked[: max(0, limit_per_entity)]
        for edge in ranked:
            out.setdefault((edge["source_key"], edge["target_key"]), edge)
    return sort_edges(list(out.values()))
