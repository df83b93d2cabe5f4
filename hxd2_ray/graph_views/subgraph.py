"""The part of a graph a picture can hold: an entity's neighbourhood, or around the most connected entity.

Both read through the graph store's public reads (``find_entity_by_name``, ``neighbors``, ``get_entities``,
``iter_pages``) and keep at most ``max_nodes`` entities: hop by hop from the centre, each hop's edges in the
store's ranking (degree sum, then weight), so what is cut is what ranks last. Edges between kept entities that
the walk did not cross are added too, so the picture shows every tie among what it shows.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from hxd2_ray.errors import HxdError
from hxd2_ray.extraction.merge import normalize_name

# Edges read per entity while walking (a hub of 100k edges must not become 100k Python rows).
_EDGES_PER_ENTITY = 200


@dataclass
class Subgraph:
    title: str
    center: list[str]  # keys drawn as the centre
    entities: dict[str, dict[str, Any]]  # key -> EntityRow
    edges: list[dict[str, Any]]  # EdgeRows among the kept entities
    hops: dict[str, int] = field(default_factory=dict)  # key -> distance from the centre
    cut: int = 0  # entities reached but left out for max_nodes
    # key -> the chunks the entity was extracted from (id, document, text), for views that show the evidence
    sources: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


SOURCE_CHUNKS_PER_ENTITY = 3
_SOURCE_CHARS = 600  # a chunk shown beside an entity is cut here: the view is a pointer, not the document


def attach_sources(store: Any, sub: Subgraph, per_entity: int = SOURCE_CHUNKS_PER_ENTITY) -> Subgraph:
    """Fill ``sub.sources`` with the first ``per_entity`` chunks of each entity (in document order): the text the
    entity was read from, so a reader can check the graph against it."""
    chosen = {key: ids[:per_entity] for key, ids in store.chunks_for_entities(list(sub.entities)).items()}
    rows = {c["id"]: c for c in store.get_chunks([i for ids in chosen.values() for i in ids])}
    for key, ids in chosen.items():
        sub.sources[key] = [
            {
                "id": rows[i]["id"],
                "document": rows[i]["doc_title"] or rows[i]["doc_source_id"],
                "text": rows[i]["text"][:_SOURCE_CHARS] + ("…" if len(rows[i]["text"]) > _SOURCE_CHARS else ""),
            }
            for i in ids
            if i in rows
        ]
    return sub


def find_entity(store: Any, name: str, suggestions: int = 5) -> dict[str, Any]:
    """The entity named ``name`` (by its merge key, so case and spacing do not matter); else an error that lists
    the best-connected entities whose name contains it."""
    row = store.find_entity_by_name(name, key_fn=normalize_name)
    if row is not None:
        return row
    needle = normalize_name(name)
    best: list[tuple[int, str, str]] = []
    if needle:
        for page in store.iter_pages("Entity"):
            for key, ent_name, degree in zip(
                page["key"].to_pylist(), page["name"].to_pylist(), page["degree"].to_pylist(), strict=True
            ):
                if needle in key:
                    item = (int(degree), key, ent_name)
                    if len(best) < suggestions:
                        heapq.heappush(best, item)
                    else:
                        heapq.heappushpop(best, item)
    hint = (
        "; entities whose name contains it: " + ", ".join(repr(n) for _d, _k, n in sorted(best, reverse=True))
        if best
        else "; no entity name contains it"
    )
    raise HxdError(f"no entity named {name!r} in this graph{hint}")


def _walk(store: Any, seeds: list[str], hops: int, max_nodes: int) -> tuple[list[str], dict[str, int], int]:
    kept: list[str] = list(dict.fromkeys(seeds))[:max_nodes]
    distance = {k: 0 for k in kept}
    frontier = list(kept)
    cut = 0
    for hop in range(1, max(0, hops) + 1):
        if not frontier:
            break
        reached: list[str] = []
        for edge in store.neighbors(frontier, limit_per_entity=_EDGES_PER_ENTITY):
            for key in (edge["source_key"], edge["target_key"]):
                if key not in distance and key not in reached:
                    reached.append(key)
        room = max(0, max_nodes - len(kept))
        cut += max(0, len(reached) - room)
        frontier = reached[:room]
        for key in frontier:
            distance[key] = hop
        kept.extend(frontier)
    return kept, distance, cut


def _edges_among(store: Any, keys: list[str]) -> list[dict[str, Any]]:
    inside = set(keys)
    return [
        e
        for e in store.neighbors(keys, limit_per_entity=_EDGES_PER_ENTITY)
        if e["source_key"] in inside and e["target_key"] in inside
    ]


def neighbourhood(store: Any, name: str, hops: int = 1, max_nodes: int = 40) -> Subgraph:
    """The entity named ``name`` and what lies within ``hops`` relations of it (at most ``max_nodes``)."""
    center = find_entity(store, name)
    keys, distance, cut = _walk(store, [center["key"]], hops, max_nodes)
    entities = {e["key"]: e for e in store.get_entities(keys)}
    shown = f"{len(keys)} entities" + (f", {cut} more not shown" if cut else "")
    return Subgraph(
        title=f"{center['name']}: {hops}-hop neighbourhood ({shown})",
        center=[center["key"]],
        entities=entities,
        edges=_edges_among(store, keys),
        hops=distance,
        cut=cut,
    )


def most_connected(store: Any, hops: int = 2, max_nodes: int = 40) -> Subgraph:
    """Around the entity of highest degree: the densest part of the graph, where a reader starts."""
    top: tuple[int, str] | None = None
    for page in store.iter_pages("Entity"):
        for key, degree in zip(page["key"].to_pylist(), page["degree"].to_pylist(), strict=True):
            if top is None or (int(degree), key) > top:
                top = (int(degree), key)
    if top is None:
        raise HxdError("the graph has no entities")
    keys, distance, cut = _walk(store, [top[1]], hops, max_nodes)
    entities = {e["key"]: e for e in store.get_entities(keys)}
    hub = entities[top[1]]
    shown = f"{len(keys)} entities" + (f", {cut} more not shown" if cut else "")
    plural = "s" if hops != 1 else ""
    return Subgraph(
        title=f"Most connected: around {hub['name']} (degree {top[0]}), {hops} hop{plural} ({shown})",
        center=[top[1]],
        entities=entities,
        edges=_edges_among(store, keys),
        hops=distance,
        cut=cut,
    )


def around_entities(store: Any, names: list[str], hops: int = 1, max_nodes: int = 40) -> tuple[Subgraph, list[str]]:
    """The entities named (by name or merge key) and what lies within ``hops`` relations of them, at most
    ``max_nodes`` in all; with the names no entity has. Exact lookups only: a miss costs one read, not the scan of
    every name that :func:`find_entity` makes to suggest near names (a server answers this for any request)."""
    found: list[dict[str, Any]] = []
    missing: list[str] = []
    for name in dict.fromkeys(names):
        row = store.find_entity_by_name(name, key_fn=normalize_name)
        if row is None:
            missing.append(name)
        elif all(row["key"] != f["key"] for f in found):
            found.append(row)
    if not found:
        return Subgraph(title="no entity found", center=[], entities={}, edges=[]), missing
    keys, distance, cut = _walk(store, [f["key"] for f in found], hops, max_nodes)
    entities = {e["key"]: e for e in store.get_entities(keys)}
    shown = f"{len(keys)} entities" + (f", {cut} more not shown" if cut else "")
    label = ", ".join(f["name"] for f in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    plural = "s" if hops != 1 else ""
    sub = Subgraph(
        title=f"{label}: {hops} hop{plural} around ({shown})",
        center=[k for k in keys if distance[k] == 0],
        entities=entities,
        edges=_edges_among(store, keys),
        hops=distance,
        cut=cut,
    )
    return sub, missing
