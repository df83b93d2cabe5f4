"""What a generation's readers map instead of building (``<generation>/reads/``): the graph's read structures
(:mod:`hxd2_ray.graph.read_structures`), the fuzzy name index over its entity keys
(:class:`~hxd2_ray.retrieval.fuzzy.FuzzyNameIndex`) and the document titles as names
(:class:`~hxd2_ray.extraction.names.TitleIndex`), written together from the graph just loaded. The write
stage, ``hxd2 index-kb`` and ``hxd2 index reindex-reads`` all write them here, one way."""

from __future__ import annotations

import os
from pathlib import Path

from hxd2_ray.extraction.names import TitleIndex
from hxd2_ray.graph.read_structures import GraphReads, document_chunks, write_graph_reads_from
from hxd2_ray.retrieval.fuzzy import FuzzyNameIndex

__all__ = ["write_query_reads"]

SCAN_BUFFER_POOL = 2 << 30


def _names(reads: GraphReads, folder: Path) -> None:
    FuzzyNameIndex(reads.entities.column("key").to_pylist() if reads.entities.num_rows else []).write(folder)
    TitleIndex(document_chunks(reads)).write(folder)


def write_query_reads(
    graph_path: str | os.PathLike[str], reads_dir: str | os.PathLike[str], engine: str | None = None
) -> GraphReads:
    """Write the read structures and the name index of the graph at ``graph_path`` (written by ``engine``) into
    ``reads_dir``, replacing what is there whole."""
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore

    # A bounded buffer pool: the scan reads a page at a time, and the engine's default (most of the machine's
    # memory) would sit beside the tables being converted.
    with KuzuGraphStore(graph_path, read_only=True, engine=engine, buffer_pool_bytes=SCAN_BUFFER_POOL) as store:
        return write_graph_reads_from(store, reads_dir, also=_names)
