"""How a query process holds an index: caches, threads, the resident graph, checksums."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hxd2_ray.config.base import FrozenSection


class RetrievalServing(FrozenSection):
    """How a query process opens and holds an index (caches, threads, memory); results are the same either way."""

    embedding_cache_texts: int = Field(
        4096,
        ge=0,
        description="Texts whose query vectors the query flow remembers (least recently used first out), so the "
        "refusal gate reuses retrieval's keyword vectors instead of a second embedding call; 0: off.",
    )
    cache_dir: str | None = Field(
        None, description="Local copy of s3:// indexes; None: $HXD2_INDEX_CACHE or ~/.cache/hxd2/indexes."
    )
    search_threads: int | None = Field(
        1,
        ge=1,
        description="OpenMP threads of Faiss in a query process (set when an index is opened; process-wide). "
        "1: a query's searches are small, and spinning thread pools stall under concurrent queries or "
        "a shared CPU. None: leave Faiss' default.",
    )
    graph_threads: int = Field(
        1, ge=0, description="Kùzu threads per query (0: all cores); point lookups gain nothing from more."
    )
    resident_graph: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Read the graph from arrays instead of a Kùzu statement per key (microseconds per key; the "
        "ppr ranking needs them). auto and on: the generation's read structures, written at index time and "
        "memory-mapped (open in milliseconds at any size, pages shared by every process on a node). An index "
        "written before them has its arrays built in memory instead (about 3.5x the graph file, ~5 s per 1M "
        "entities), always with on, with auto while the file is at most resident_graph_max_mb; either way a "
        "warning names `hxd2 index reindex-reads`. off: every read through Kùzu.",
    )
    resident_graph_max_mb: int = Field(
        512,
        gt=0,
        description="Only for an index without read structures: the largest graph file (MB) `auto` builds "
        "arrays for in memory (an index with them is mapped at any size).",
    )
    verify_checksums: bool = Field(
        False,
        description="Check every index file's sha256 against the manifest when an index opens (sizes are "
        "always checked); `hxd2 index verify` does the same on demand.",
    )
