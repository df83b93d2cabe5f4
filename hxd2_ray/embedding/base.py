"""Embedder protocol: texts in, one L2-normalised float32 row per text out.

Rows are unit length so inner product == cosine similarity in every vector index (Faiss IP).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class Embedder(Protocol):
    model_id: str  # recorded in the index manifest; a query must use the same model
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape [len(texts), dim], C-contiguous, rows L2-normalised; [] → shape (0, dim)."""
        ...


def empty_embeddings(dim: int) -> np.ndarray:
    return np.zeros((0, dim), dtype=np.float32)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit-length rows as a new float32 C-contiguous array (norms computed in float64).

    A zero row stays zero rather than becoming NaN; embedders avoid producing one in the first place.
    """
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D array of embeddings, got shape {arr.shape}")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    out = np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)
    return np.ascontiguousarray(out, dtype=np.float32)
