"""Brute-force NumPy cosine index: the test oracle for Faiss, and a stand-in where Faiss is not wanted."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from hxd2_ray.vectors.base import SearchHits, check_query_dim, key_ids, normalized


class ExactVectorIndex:
    """Exact top-k by cosine similarity over all vectors; ties broken by insertion order."""

    def __init__(self, keys: Sequence[str], vectors: np.ndarray, family: str = "exact"):
        vecs = np.asarray(vectors, dtype=np.float32)
        if len(keys) != (vecs.shape[0] if vecs.ndim == 2 else 0) and len(keys):
            raise ValueError(f"{len(keys)} keys but {vecs.shape[0] if vecs.ndim else 0} vectors")
        self.family = family
        self.keys = list(keys)
        self.ids = key_ids(self.keys)  # same uniqueness rules as the Faiss families
        self.dim = int(vecs.shape[1]) if vecs.ndim == 2 else 0
        self.count = len(self.keys)
        self._vectors = normalized(vecs.reshape(len(self.keys), self.dim)) if self.count else vecs

    def search(self, queries: np.ndarray, k: int) -> SearchHits:
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q.reshape(1, -1)
        check_query_dim(q, self.dim, self.family)
        if k <= 0 or self.count == 0:
            return [[] for _ in range(q.shape[0])]
        q = normalized(q, self.dim, "queries")
        scores = q @ self._vectors.T
        k = min(k, self.count)
        out: SearchHits = []
        for row in scores:
            order = np.argsort(-row, kind="stable")[:k]
            out.append([(self.keys[i], float(row[i])) for i in order])
        return out

    def close(self) -> None:
        """Nothing to release: the vectors are plain NumPy, freed with the object."""
