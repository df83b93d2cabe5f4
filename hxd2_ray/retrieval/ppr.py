"""Personalized PageRank over entity and chunk nodes: the ``ppr`` chunk ranking (HippoRAG 2's idea, our code).

The graph (:class:`PropagationGraph`) is undirected and weighted, built once per open index from the resident
graph's arrays: entity nodes ``0 .. E-1`` and chunk nodes ``E .. E+C-1``, joined by

* MENTIONS (chunk -- entity it mentions), weight ``mention``: the only way from a passage to another passage;
* RELATED (entity -- entity), weight ``related`` per edge: the extractor's relations;
* SYNONYM (entity -- entity whose name vector is near, built at index time), weight ``synonym`` x cosine, so a
  sparse or noisy extraction ("Lilu" / "Lilu (mythology)") still connects;
* TITLE (chunk -- title node), weight ``title``: a node per document whose title another chunk's text names
  (NAMES_TITLE, found at index time: :mod:`hxd2_ray.indexing.title_mentions`), joined to those chunks and to the
  document's own. This is the corpus's own link structure (a Wikipedia passage names the article it links to),
  and it does not depend on the extractor: a 135M model that misses "Lester Smith" in passage A still leaves A
  one title node away from Lester Smith's own article. Title nodes are numbered after the chunks,
  ``E + C .. E + C + T - 1``.

A walk from a node picks an edge in proportion to its weight; with probability ``1 - damping`` it jumps back to
the personalization (reset) vector ``s``. The PPR vector solves ``x = (1 - d) s + d P^T x`` with
``P = D^-1 A`` (``A`` symmetric, ``D`` its row sums). Since ``A`` is symmetric, ``P^T x = A (x / D)``: each step is
one scipy sparse product. Power iteration converges geometrically with ratio ``d`` (0.5 by default, as in
HippoRAG 2: 40 steps reach 1e-12), and unlike a direct solve (SuperLU fills in badly on graph matrices: 0.9 s
for 2,000 nodes) or GMRES/BiCGSTAB (10-40x slower per solve at 20,000 nodes here), it costs one product per
step. The result equals networkx's ``pagerank`` with the same personalization (contract-tested), normalised.

**Locality.** A question's walk is confined to a neighbourhood of its seeds: nodes within ``radius`` hops,
expanding no node whose neighbour count exceeds ``max_fanout`` (a hub spreads each unit of mass so thin that
no single neighbour of it can rank) and at most ``max_nodes`` nodes (the ones most connected to the frontier
first). Rows keep their degree in the whole graph, so mass that walks out of the neighbourhood is lost, never
bent back in: the local vector is an elementwise lower bound of the global one, equal to it when the
neighbourhood is closed (tested), and the loss at distance ``h`` is at most ``d^h`` of the mass.

Dangling nodes (no edges) keep what reaches them; normalised, this equals the usual convention of
returning dangling mass to ``s`` (the linear-system form of PageRank).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["EdgeWeights", "PropagationGraph", "WalkResult"]


@dataclass(frozen=True, slots=True)
class EdgeWeights:
    mention: float = 1.0
    related: float = 1.0
    synonym: float = 1.0  # multiplies each SYNONYM edge's cosine
    title: float = 1.0  # a chunk -- title node edge
    mention_idf: bool = False  # a MENTIONS edge weighs mention x log(1 + chunks / chunks mentioning the entity)


@dataclass(frozen=True, slots=True)
class WalkResult:
    nodes: np.ndarray  # node ids of the neighbourhood, ascending
    scores: np.ndarray  # PPR mass of each node (sums to at most 1: what walked out is lost)
    iterations: int
    residual: float  # L1 change of the last step


def _gather(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Concatenated column indices of ``rows`` of a CSR matrix (no Python loop)."""
    starts, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=indices.dtype)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return indices[offsets + np.arange(total)]


class PropagationGraph:
    """The symmetric weighted adjacency of entities and chunks as one scipy CSR matrix; read-only, thread-safe."""

    def __init__(
        self,
        n_entities: int,
        n_chunks: int,
        *,
        related: tuple[np.ndarray, np.ndarray],
        mentions: tuple[np.ndarray, np.ndarray],  # (chunk offset, entity offset)
        synonyms: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,  # (entity, entity, cosine)
        titles: tuple[np.ndarray, np.ndarray] | None = None,  # (chunk offset, title node index)
        n_titles: int = 0,
        weights: EdgeWeights = EdgeWeights(),
    ):
        # scipy.sparse (about half a second) loads when a graph is built, not with the query pipeline
        import scipy.sparse as sp  # noqa: PLC0415

        self.n_entities = int(n_entities)
        self.n_chunks = int(n_chunks)
        self.n_titles = int(n_titles)
        self.weights = weights
        n = self.n_entities + self.n_chunks + self.n_titles
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        data: list[np.ndarray] = []

        def add(a: np.ndarray, b: np.ndarray, w: np.ndarray | float) -> None:
            a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
            keep = a != b  # a self-loop only delays the walk; it carries no evidence
            a, b = a[keep], b[keep]
            weight = np.broadcast_to(np.asarray(w, dtype=np.float64), keep.shape)[keep]
            keep = weight > 0
            rows.extend((a[keep], b[keep]))
            cols.extend((b[keep], a[keep]))
            data.extend((weight[keep], weight[keep]))

        if weights.related > 0:
            add(related[0], related[1], weights.related)
        men_entity = np.asarray(mentions[1], dtype=np.int64)
        chunk_count = np.bincount(men_entity, minlength=self.n_entities)
        if weights.mention > 0:
            mention_w: np.ndarray | float = weights.mention
            if weights.mention_idf and len(men_entity):
                # From a chunk, the walk prefers its rare entities: a name many chunks share ("United States") says
                # little about which passage comes next; an entity's own edges stay uniform among its chunks.
                mention_w = weights.mention * np.log1p(max(1, self.n_chunks) / np.maximum(chunk_count[men_entity], 1))
            add(np.asarray(mentions[0], dtype=np.int64) + self.n_entities, men_entity, mention_w)
        self.n_synonym_edges = 0
        if synonyms is not None and weights.synonym > 0 and len(synonyms[0]):
            add(synonyms[0], synonyms[1], weights.synonym * np.asarray(synonyms[2], dtype=np.float64))
            self.n_synonym_edges = int(len(synonyms[0]))
        self.n_title_edges = 0
        if titles is not None and weights.title > 0 and len(titles[0]):
            title_nodes = np.asarray(titles[1], dtype=np.int64)
            if title_nodes.min() < 0 or title_nodes.max() >= self.n_titles:
                raise ValueError(f"title node ids must be in [0, {self.n_titles})")
            add(
                np.asarray(titles[0], dtype=np.int64) + self.n_entities,
                title_nodes + self.n_entities + self.n_chunks,
                weights.title,
            )
            self.n_title_edges = int(len(titles[0]))
        r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
        v = np.concatenate(data) if data else np.zeros(0, np.float64)
        # Duplicate pairs (an edge listed twice, or RELATED and SYNONYM on the same pair) add up.
        matrix = sp.csr_matrix((v, (r, c)), shape=(n, n))
        matrix.sum_duplicates()
        self.adjacency: sp.csr_matrix = matrix
        self.strength = np.asarray(matrix.sum(axis=1)).ravel()  # weighted degree in the whole graph
        self.fanout = np.diff(matrix.indptr)  # neighbour count
        self._inv_strength = np.divide(1.0, self.strength, out=np.zeros(n), where=self.strength > 0)
        # Chunks that mention each entity (node specificity of an entity seed).
        self.entity_chunk_count = chunk_count

    @property
    def size(self) -> int:
        return self.n_entities + self.n_chunks + self.n_titles

    def chunk_node(self, chunk_offsets: np.ndarray) -> np.ndarray:
        return np.asarray(chunk_offsets, dtype=np.int64) + self.n_entities

    def is_chunk(self, nodes: np.ndarray) -> np.ndarray:
        """Which of ``nodes`` are chunk nodes (not entities, not title nodes)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        return (nodes >= self.n_entities) & (nodes < self.n_entities + self.n_chunks)

    def neighbourhood(self, seeds: np.ndarray, radius: int, max_nodes: int, max_fanout: int) -> np.ndarray:
        """Node ids within ``radius`` hops of ``seeds`` (ascending), expanding only nodes with at most
        ``max_fanout`` neighbours, capped at ``max_nodes`` (seeds always kept; beyond them, the nodes with the
        most edges into the frontier first, ties by id)."""
        inside = np.unique(np.asarray(seeds, dtype=np.int64))
        frontier = inside
        indptr, indices = self.adjacency.indptr, self.adjacency.indices
        for _ in range(max(0, radius)):
            if len(inside) >= max_nodes:
                break
            expand = frontier[self.fanout[frontier] <= max_fanout]
            reached, hits = np.unique(_gather(indptr, indices, expand), return_counts=True)
            new_mask = ~np.isin(reached, inside, assume_unique=True)
            new, hits = reached[new_mask], hits[new_mask]
            if not len(new):
                break
            room = max_nodes - len(inside)
            if len(new) > room:
                best = np.lexsort((new, -hits))[:room]
                new = np.sort(new[best])
            inside = np.union1d(inside, new)
            frontier = new
        return inside

    def personalized_pagerank(
        self,
        seed_nodes: Sequence[int] | np.ndarray,
        seed_weights: Sequence[float] | np.ndarray,
        *,
        damping: float = 0.5,
        radius: int = 3,
        max_nodes: int = 2000,
        max_fanout: int = 512,
        tol: float = 1e-10,
        max_iter: int = 200,
    ) -> WalkResult:
        """PPR from ``seed_nodes`` (weights >= 0, normalised to sum 1) over their neighbourhood (module docstring).

        ``radius=None``-like behaviour (the whole graph) is ``radius >= size`` with ``max_nodes >= size``.
        """
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {damping}")
        seeds = np.asarray(seed_nodes, dtype=np.int64)
        weights = np.asarray(seed_weights, dtype=np.float64)
        if seeds.shape != weights.shape:
            raise ValueError(f"{len(seeds)} seed nodes but {len(weights)} weights")
        if len(seeds) and (seeds.min() < 0 or seeds.max() >= self.size):
            raise ValueError(f"seed node ids must be in [0, {self.size})")
        if not np.all(np.isfinite(weights)) or (weights < 0).any():
            raise ValueError("seed weights must be finite and non-negative")
        keep = weights > 0
        seeds, weights = seeds[keep], weights[keep]
        if not len(seeds):
            return WalkResult(np.zeros(0, np.int64), np.zeros(0), 0, 0.0)
        nodes = self.neighbourhood(seeds, radius, max(max_nodes, len(np.unique(seeds))), max_fanout)
        reset = np.zeros(len(nodes))
        np.add.at(reset, np.searchsorted(nodes, seeds), weights)
        reset *= (1.0 - damping) / reset.sum()
        sub = self.adjacency[nodes][:, nodes]
        inv = self._inv_strength[nodes]  # whole-graph degree: mass sent outside is lost
        x = reset.copy()
        residual, steps = 0.0, 0
        for steps in range(1, max_iter + 1):
            nxt = reset + damping * (sub @ (x * inv))
            residual = float(np.abs(nxt - x).sum())
            x = nxt
            if residual <= tol:
                break
        return WalkResult(nodes, x, steps, residual)


_GRAPHS: "weakref.WeakKeyDictionary[object, dict[EdgeWeights, PropagationGraph]]" = weakref.WeakKeyDictionary()
_GRAPHS_LOCK = threading.Lock()


def graph_for(resident: object, weights: EdgeWeights) -> PropagationGraph | None:
    """The propagation graph of a resident graph (built once per graph and weights, then shared by every
    pipeline over it); None when the graph is not held in memory (a Kùzu store has no arrays to walk)."""
    edges = getattr(resident, "walk_edges", None)
    if not callable(edges):
        return None
    with _GRAPHS_LOCK:
        cache = _GRAPHS.setdefault(resident, {})
        graph = cache.get(weights)
        if graph is None:
            e = edges()
            graph = PropagationGraph(
                e.n_entities,
                e.n_chunks,
                related=e.related,
                mentions=e.mentions,
                synonyms=e.synonyms,
                titles=e.titles,
                n_titles=e.n_titles,
                weights=weights,
            )
            cache[weights] = graph
    return graph
