"""The walk's adjacency as typed CSR arrays: one structure for every choice of edge weights.

The ``ppr`` ranking (:mod:`hxd2_ray.retrieval.ppr`) walks one undirected graph of entity, chunk and title nodes
(entities ``0 .. E-1``, chunks ``E .. E+C-1``, title nodes ``E+C .. E+C+T-1``) whose edge weights come from the
query configuration (``retrieval.ppr_*_weight``). So the index cannot store the weighted matrix itself. It stores
the matrix's structure once (``indptr``, ``indices``: every node pair joined by any edge, self-loops dropped,
columns ascending) and, per stored entry, what each edge kind contributes before weighting:

* ``related``: the number of RELATED edges on the pair;
* ``mention``: the number of MENTIONS edges on the pair (the idf variant multiplies it by the entity end's
  ``log(1 + C / chunks mentioning the entity)`` at query time);
* ``synonym``: the summed name cosine of the SYNONYM edges on the pair (a non-positive cosine carries nothing);
* ``title``: the number of chunk--title edges on the pair.

An entry's weight is then ``w_related * related + w_mention * mention + w_synonym * synonym + w_title * title``,
computed only for the rows a question's neighbourhood touches; the per-node sums of each kind (``strength_*``) give
a node's weighted degree in the whole graph the same way. Written at index time as flat ``.npy`` files
(:mod:`hxd2_ray.graph.read_structures`), these arrays are memory-mapped by every query process on a node, so the
pages are shared and opening reads nothing up front.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["WALK_ARRAYS", "WalkMatrix", "build_walk_matrix"]

# The arrays of a WalkMatrix, in file order (one .npy per name).
WALK_ARRAYS = (
    "indptr",
    "indices",
    "related",
    "mention",
    "synonym",
    "title",
    "strength_related",
    "strength_mention",
    "strength_mention_idf",
    "strength_synonym",
    "strength_title",
    "entity_chunk_count",
)


@dataclass(frozen=True)
class WalkMatrix:
    """The walk graph's structure and each edge kind's unweighted contribution (module docstring). Read-only."""

    n_entities: int
    n_chunks: int
    n_titles: int
    indptr: np.ndarray  # int64, size + 1
    indices: np.ndarray  # int32 (int64 past 2**31 nodes), columns ascending within a row
    related: np.ndarray  # float32 per entry: RELATED edges on the pair
    mention: np.ndarray  # float32 per entry: MENTIONS edges on the pair
    synonym: np.ndarray  # float64 per entry: summed cosine of SYNONYM edges on the pair
    title: np.ndarray  # float32 per entry: chunk--title edges on the pair
    strength_related: np.ndarray  # float64 per node: the sum of its row of each kind
    strength_mention: np.ndarray
    strength_mention_idf: np.ndarray  # its MENTIONS edges weighted by the entity end's idf
    strength_synonym: np.ndarray
    strength_title: np.ndarray
    entity_chunk_count: np.ndarray  # int64 per entity: MENTIONS edges to it (chunks mentioning it)
    synonym_edges: int  # SYNONYM edges with a positive cosine (each counted once)
    title_edges: int  # chunk--title edges

    @property
    def size(self) -> int:
        return self.n_entities + self.n_chunks + self.n_titles

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in WALK_ARRAYS}

    def counts(self) -> dict[str, int]:
        return {
            "n_entities": self.n_entities,
            "n_chunks": self.n_chunks,
            "n_titles": self.n_titles,
            "synonym_edges": self.synonym_edges,
            "title_edges": self.title_edges,
        }


def mention_idf(n_chunks: int, entity_chunk_count: np.ndarray) -> np.ndarray:
    """Per entity, the idf factor of its MENTIONS edges: ``log(1 + C / chunks mentioning it)``."""
    return np.log1p(max(1, n_chunks) / np.maximum(entity_chunk_count, 1))


def build_walk_matrix(
    n_entities: int,
    n_chunks: int,
    *,
    related: tuple[np.ndarray, np.ndarray],
    mentions: tuple[np.ndarray, np.ndarray],  # (chunk offset, entity offset)
    synonyms: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,  # (entity, entity, cosine)
    titles: tuple[np.ndarray, np.ndarray] | None = None,  # (chunk offset, title node index)
    n_titles: int = 0,
) -> WalkMatrix:
    """The typed CSR of the walk graph from its edge lists (entity, chunk and title offsets as stored).

    Memory stays a few arrays of the entry count (one sort of the pair codes), so the index job builds it at
    tens of millions of edges: every pair's kinds are summed into one slot of the sorted unique pairs."""
    n_entities, n_chunks, n_titles = int(n_entities), int(n_chunks), int(n_titles)
    n = n_entities + n_chunks + n_titles
    kinds = ("related", "mention", "synonym", "title")
    ends: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []  # (a, b, value, kind) with self-loops dropped

    def add(kind: str, a: np.ndarray, b: np.ndarray, value: np.ndarray | float) -> None:
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        v = np.broadcast_to(np.asarray(value, dtype=np.float64), a.shape)
        keep = (a != b) & (v > 0)  # a self-loop only delays the walk; a non-positive weight carries nothing
        ends.append((a[keep], b[keep], np.ascontiguousarray(v[keep]), kinds.index(kind)))

    add("related", related[0], related[1], 1.0)
    men_chunk = np.asarray(mentions[0], dtype=np.int64)
    men_entity = np.asarray(mentions[1], dtype=np.int64)
    add("mention", men_chunk + n_entities, men_entity, 1.0)
    synonym_edges = 0
    if synonyms is not None and len(synonyms[0]):
        score = np.asarray(synonyms[2], dtype=np.float64)
        add("synonym", synonyms[0], synonyms[1], score)
        synonym_edges = len(ends[-1][0])
    title_edges = 0
    if titles is not None and len(titles[0]):
        title_nodes = np.asarray(titles[1], dtype=np.int64)
        if title_nodes.min() < 0 or title_nodes.max() >= n_titles:
            raise ValueError(f"title node ids must be in [0, {n_titles})")
        add("title", np.asarray(titles[0], dtype=np.int64) + n_entities, title_nodes + n_entities + n_chunks, 1.0)
        title_edges = int(len(titles[0]))
    # Each edge both ways, as pair codes row * n + column; sorted unique codes are the CSR's entries in order.
    codes = np.concatenate([np.concatenate((a * n + b, b * n + a)) for a, b, _, _ in ends] or [np.zeros(0, np.int64)])
    unique, slot = np.unique(codes, return_inverse=True)
    del codes
    rows = unique // n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    indices = (unique % n).astype(np.int32 if n < 2**31 else np.int64)
    del unique
    # Duplicate pairs (an edge listed twice, or RELATED and SYNONYM on one pair) add up within each kind.
    per_kind = {k: np.zeros(len(indices)) for k in kinds}
    start = 0
    for _, _, v, kind in ends:
        both = slot[start : start + 2 * len(v)]
        per_kind[kinds[kind]] += np.bincount(both, weights=np.concatenate((v, v)), minlength=len(indices))
        start += 2 * len(v)
    del slot
    ends.clear()
    entity_chunk_count = np.bincount(men_entity, minlength=n_entities).astype(np.int64)[:n_entities]
    idf = mention_idf(n_chunks, entity_chunk_count)
    entity_end = np.where(rows < n_entities, rows, indices.astype(np.int64))
    mention_values = per_kind["mention"]
    entry_idf = np.zeros(len(mention_values))
    is_mention = mention_values > 0
    entry_idf[is_mention] = mention_values[is_mention] * idf[entity_end[is_mention]]
    del entity_end

    def row_sums(values: np.ndarray) -> np.ndarray:
        return np.bincount(rows, weights=values, minlength=n).astype(np.float64)

    return WalkMatrix(
        n_entities=n_entities,
        n_chunks=n_chunks,
        n_titles=n_titles,
        indptr=indptr,
        indices=indices,
        related=per_kind["related"].astype(np.float32),
        mention=mention_values.astype(np.float32),
        synonym=per_kind["synonym"].astype(np.float64),
        title=per_kind["title"].astype(np.float32),
        strength_related=row_sums(per_kind["related"]),
        strength_mention=row_sums(mention_values),
        strength_mention_idf=row_sums(entry_idf),
        strength_synonym=row_sums(per_kind["synonym"]),
        strength_title=row_sums(per_kind["title"]),
        entity_chunk_count=entity_chunk_count,
        synonym_edges=synonym_edges,
        title_edges=title_edges,
    )
