"""What the web UI reads of an open index besides answers: a chunk's text, the graph around some entities, and
the index's statistics. Runs in the Retriever replica, which holds the open indexes; the Ingress validates the
parameters first (:mod:`serve.index_routes`), and every read goes through the graph store's parameterised reads
(no request text ever becomes part of a query).

Each view is a JSON-ready dict; what the index does not hold raises :class:`NotInIndex` (a 404 for the client).
The statistics scan the whole graph once (degrees, components) and are kept per index: an open index is
read-only, so they cannot change while it is served.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Mapping

# Bounds a view keeps whatever the caller asked (the Ingress refuses larger requests before they get here).
MAX_HOPS = 2
MAX_NODES = 150
MAX_ENTITIES = 20
# An entity's or relation's description in a graph view is cut here: a picture's tooltip, not the record.
DESCRIPTION_CHARS = 400
TOP_ROWS = 10

VIEW_KINDS = ("chunk", "graph", "stats")


class NotInIndex(LookupError):
    """The index holds no such chunk or entity."""


def chunk_view(index: Any, chunk_id: str) -> dict[str, Any]:
    rows = index.graph.get_chunks([chunk_id])
    if not rows:
        raise NotInIndex(f"no chunk {chunk_id!r} in this index")
    row = rows[0]
    return {
        "id": row["id"],
        "doc_id": row["doc_id"],
        "doc_title": row["doc_title"],
        "doc_source_id": row["doc_source_id"],
        "doc_source_path": row["doc_source_path"],
        "header_path": row["header_path"],
        "order": int(row["order"]),
        "language": row["language"],
        "text": row["text"],
    }


def _cut(text: str) -> str:
    return text if len(text) <= DESCRIPTION_CHARS else text[: DESCRIPTION_CHARS - 1] + "…"


def graph_view(index: Any, entities: list[str], hops: int, max_nodes: int) -> dict[str, Any]:
    from hxd2_ray.graph_views.subgraph import around_entities

    hops = max(0, min(int(hops), MAX_HOPS))
    max_nodes = max(1, min(int(max_nodes), MAX_NODES))
    sub, missing = around_entities(index.graph, list(entities)[:MAX_ENTITIES], hops=hops, max_nodes=max_nodes)
    if not sub.entities:
        raise NotInIndex("no entity named " + ", ".join(repr(n) for n in missing[:5]) + " in this index")
    nodes = [
        {
            "key": key,
            "name": row["name"],
            "type": row["type"],
            "degree": int(row["degree"]),
            "hops": int(sub.hops.get(key, 0)),
            "description": _cut(row["description"]),
        }
        for key, row in sub.entities.items()
    ]
    edges = [
        {
            "source": e["source_key"],
            "target": e["target_key"],
            "description": _cut(e["description"]),
            "keywords": list(e["keywords"])[:8],
            "weight": float(e["weight"]),
        }
        for e in sub.edges
    ]
    return {
        "title": sub.title,
        "center": sub.center,
        "hops": hops,
        "max_nodes": max_nodes,
        "nodes": nodes,
        "edges": edges,
        "not_shown": sub.cut,
        "not_found": missing,
    }


def _index_folder(index: Any) -> Path:
    """The index's own folder (where its build summary lies), above the current generation's files."""
    root = Path(index.root)
    return root.parent.parent if index.manifest.generation else root


def stats_view(index: Any) -> dict[str, Any]:
    from hxd2_ray.graph_views.stats import graph_stats  # scipy: loaded by the replicas that compute statistics

    # The pages are read through the store of record (a graph held in memory answers lookups, not scans).
    store = getattr(index.graph, "store", index.graph)
    stats = graph_stats(store, _index_folder(index), top=TOP_ROWS)
    manifest = index.manifest
    degree = {k: v for k, v in stats["degree"].items() if k != "histogram"}
    build = {
        k: v
        for k, v in (stats.get("build") or {}).items()
        if isinstance(v, (int, float, str)) and not isinstance(v, bool)
    }
    return {
        "counts": {k: int(v) for k, v in stats["counts"].items()},
        "degree": degree,
        "degree_histogram": stats["degree"]["histogram"],
        "components": stats["components"],
        "top_entities": stats["top_entities"],
        "entity_types": stats["entity_types"][:TOP_ROWS],
        "build": build,
        "manifest": {
            "fingerprint": manifest.fingerprint,
            "created_at": manifest.created_at,
            "generation": manifest.generation,
            "embedding_model": manifest.embedding_model_id,
        },
    }


class IndexViews:
    """The views of a replica's open indexes (thread-safe: called from the Retriever's worker threads): of the index
    a call passes (the generation the request pinned), else of ``indexes`` by name."""

    def __init__(self, indexes: Mapping[str, Any] | None = None):
        self.indexes = indexes or {}
        self._stats: dict[str, dict[str, Any]] = {}  # name, generation -> the stats view
        self._stats_lock = threading.Lock()

    def _index(self, name: str) -> Any:
        try:
            return self.indexes[name]
        except KeyError:
            raise NotInIndex(f"unknown index {name!r}; served: {', '.join(self.indexes)}") from None

    def _stats_of(self, name: str, index: Any) -> dict[str, Any]:
        # One scan per index generation at a time: concurrent first requests wait for it rather than scan the graph
        # again; a newly published generation is scanned anew.
        key = f"{name}\n{index.manifest.generation}\n{index.manifest.created_at}"
        with self._stats_lock:
            if key not in self._stats:
                self._stats = {k: v for k, v in self._stats.items() if not k.startswith(f"{name}\n")}
                self._stats[key] = stats_view(index)
            return self._stats[key]

    def run(self, kind: str, name: str, params: Mapping[str, Any], index: Any = None) -> dict[str, Any]:
        if kind not in VIEW_KINDS:
            raise ValueError(f"unknown view {kind!r}; valid: {', '.join(VIEW_KINDS)}")
        opened = index if index is not None else self._index(name)
        views: dict[str, Callable[[], dict[str, Any]]] = {
            "chunk": lambda: chunk_view(opened, str(params["chunk_id"])),
            "graph": lambda: graph_view(
                opened,
                [str(e) for e in params["entities"]],
                int(params.get("hops", 1)),
                int(params.get("max_nodes", 60)),
            ),
            "stats": lambda: self._stats_of(name, opened),
        }
        return {"index": name, **views[kind]()}
