"""SYNONYM edges: entity pairs whose name vectors are near, so a sparse or noisy extraction still connects.

A small extractor names one thing several ways ("Lilu", "Lilu (mythology)", "the Lilu"); the merge stage
joins only names that normalise to the same key, so each spelling is its own node and the passages that use
them do not meet. HippoRAG 2 links such phrase nodes by embedding similarity; we do the same at index time:

    an edge joins entities a and b when cos(name(a), name(b)) >= threshold and b is among a's k nearest names,
    and (``require_shared_text``) their keys share a character trigram (a bigram where one is shorter than 3)

found with the ``entity_name`` vector family itself (Faiss, batched), so the search is the index's own (flat,
or IVF at scale) and costs what a family search costs. Each pair is stored once, smaller key first, with the
higher of its two scores; self-matches are dropped. The text check keeps an embedder's blind spots out: an
English model such as MiniLM maps every Chinese name to nearly the same vector (unknown tokens), and would join
them all; true near-names ("Harvard" / "Harvard University", "Beaux Arts" / "Beaux-Arts") always share some
text. The edges become the graph's SYNONYM relationship table
(only the ``ppr`` chunk ranking walks them; the context's relation table never shows them).

:func:`synonym_edges` takes *a set of entities* and searches them against a family, so an incremental build
can call it for the entities it adds (against the family that already holds them). Such an update finds every
edge of the new entities that their own k-nearest lists give; an old entity whose k-nearest list a new name
enters would, in a full rebuild, also gain that pair from its side: an incremental update that wants the exact
full-build edge set re-searches the old entities the new ones list as neighbours (their k-nearest lists are
the only ones that can change).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from hxd2_ray.config import SynonymConfig
from hxd2_ray.index_store.tables import SYNONYMS

__all__ = ["SYNONYMS", "synonym_edges"]

Progress = Callable[[str], None]


def _grams(key: str) -> set[str]:
    n = 3 if len(key) >= 3 else 2
    return {key[i : i + n] for i in range(max(1, len(key) - n + 1))}


def share_text(a: str, b: str) -> bool:
    """Whether two entity keys share a character trigram (a bigram when either is shorter than 3 characters)."""
    if min(len(a), len(b)) < 3:
        return bool(
            {a[i : i + 2] for i in range(max(1, len(a) - 1))} & {b[i : i + 2] for i in range(max(1, len(b) - 1))}
        )
    return bool(_grams(a) & _grams(b))


def synonym_edges(
    keys: Sequence[str],
    vectors: np.ndarray,
    family: Any,  # a VectorIndex over entity names: .search(vectors, k) -> [[(key, cosine), ...], ...]
    cfg: SynonymConfig,
    *,
    progress: Progress | None = None,
    log_every_s: float = 30.0,
) -> pa.Table:
    """SYNONYM rows (``tables.SYNONYMS``) of the entities ``keys`` (``vectors``: their entity-name vectors,
    row-aligned) against ``family``, sorted by pair. Empty when ``cfg.enabled`` is off or nothing qualifies."""
    if len(keys) != len(vectors):
        raise ValueError(f"{len(keys)} keys but {len(vectors)} vectors")
    if not cfg.enabled or not len(keys) or not getattr(family, "count", 0):
        return SYNONYMS.empty_table()
    best: dict[tuple[str, str], float] = {}
    threshold, k = float(cfg.threshold), int(cfg.k) + 1  # +1: an entity finds itself first
    started = last = time.perf_counter()
    vectors = np.asarray(vectors, dtype=np.float32)
    for start in range(0, len(keys), cfg.batch_size):
        batch_keys = keys[start : start + cfg.batch_size]
        hits = family.search(vectors[start : start + cfg.batch_size], k)
        for key, row in zip(batch_keys, hits):
            for other, score in row:
                if score < threshold:
                    break  # best first
                if other == key:
                    continue
                pair = (key, other) if key < other else (other, key)
                if cfg.require_shared_text and pair not in best and not share_text(key, other):
                    continue
                if score > best.get(pair, -2.0):
                    best[pair] = float(score)
        now = time.perf_counter()
        if progress is not None and now - last >= log_every_s:
            done = min(start + cfg.batch_size, len(keys))
            progress(
                f"synonym edges: searched {done:,}/{len(keys):,} entity names, {len(best):,} pairs so far "
                f"({now - started:,.0f}s)"
            )
            last = now
    pairs = sorted(best)
    return pa.table(
        {"source_key": [a for a, _ in pairs], "target_key": [b for _, b in pairs], "score": [best[p] for p in pairs]},
        schema=SYNONYMS,
    )
