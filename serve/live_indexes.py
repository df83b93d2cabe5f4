"""The served indexes of one replica, each a :class:`~hxd2_ray.retrieval.live_index.LiveIndex`: every deployment
that reads an index (Retriever, PlanExecutor, GraphWalker) follows its published generations and answers each
request from the generation the Retriever pinned for it (``RequestScope.generation``).

Also what answers show of a document's location: its path relative to the corpus root (the folder every document
of the index lies under), or its S3 URI, never the absolute path of the machine that built the index; with
``source_url_prefix`` a URL for clients to open.
"""

from __future__ import annotations

import functools
import logging
import os
import posixpath
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from hxd2_ray.config import HxdConfig
from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.indexer.query_reads import corpus_root_of, read_corpus_root
from hxd2_ray.retrieval.live_index import LiveIndex

log = logging.getLogger("hxd2.serve")

T = TypeVar("T")


def open_live(
    locations: Mapping[str, str],
    cfg: HxdConfig,
    attach: Callable[[str, Any], T],
    *,
    poll_s: float,
    detach: Callable[[T], None] | None = None,
) -> dict[str, LiveIndex[T]]:
    """One live index per served name; ``attach(name, open_index)`` builds what the replica reads it through."""
    opened: dict[str, LiveIndex[T]] = {}
    try:
        for name, location in locations.items():
            try:
                opened[name] = LiveIndex(location, cfg, functools.partial(attach, name), poll_s=poll_s, detach=detach)
            except IndexNotFoundError as exc:
                if "://" in location:
                    raise
                # A replica may start on any node; a local path exists only where it was written.
                from hxd2_ray.index_store.cluster_storage import advice
                from hxd2_ray.stages.stage_run import current_node

                raise IndexNotFoundError(
                    f"{exc} (on node {current_node()[:12]}, where this replica runs: {advice('index')})"
                ) from None
    except BaseException:
        close_live(opened)
        raise
    return opened


def close_live(lives: Mapping[str, LiveIndex[Any]]) -> None:
    """Close a replica's indexes on its way out; one that fails to close does not keep the others open."""
    for live in lives.values():
        try:
            live.close()
        except Exception as exc:  # noqa: BLE001 - the replica's log has it; the other indexes still close
            log.warning("closing index %s failed: %s: %s", live.location, type(exc).__name__, exc)


def live_of(lives: Mapping[str, LiveIndex[T]], name: str) -> LiveIndex[T]:
    try:
        return lives[name]
    except KeyError:
        raise IndexNotFoundError(f"unknown index {name!r}; served: {', '.join(lives)}") from None


# ------------------------------------------------------------------------------------- public document paths


def corpus_root(graph: Any) -> str:
    """The deepest folder every local document of the index lies under ("" when none is a local path): written
    with the generation's read structures (a generation opens without reading its documents); from their mapped
    document column for read structures written before that; by a scan of the store's Document pages for an index
    without read structures."""
    reads = getattr(graph, "reads", None)
    if reads is not None:
        if reads.folder is not None and (root := read_corpus_root(reads.folder)) is not None:
            return root
        return corpus_root_of(reads.documents.column("doc_source_path").to_pylist())
    store = getattr(graph, "store", graph)  # pages are read through the store of record (not a resident copy)
    return corpus_root_of(
        path for page in store.iter_pages("Document") for path in page.column("source_path").to_pylist()
    )


def public_references(references: list[dict[str, Any]], root: str, url_prefix: str | None) -> list[dict[str, Any]]:
    """References as a client may see them: ``source_path`` (and a ``source_id`` that is a file's path, as it is
    for documents read from plain files) relative to the corpus root, an S3 URI as it is; plus ``source_url`` when
    a prefix is configured."""
    out = []
    for ref in references:
        path = _public_path(str(ref.get("source_path") or ""), root)
        shown = {**ref, "source_path": path, "source_id": _public_path(str(ref.get("source_id") or ""), root)}
        if url_prefix and path:
            shown["source_url"] = url_prefix.rstrip("/") + "/" + path.lstrip("/") if "://" not in path else path
        out.append(shown)
    return out


def _public_path(path: str, root: str) -> str:
    if not path or "://" in path or not os.path.isabs(path):
        return path  # a record's own id, an S3 URI, or already relative
    return os.path.relpath(path, root) if root else posixpath.basename(path)
