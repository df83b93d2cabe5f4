"""Deterministic feature-hashing embedder: no model, no torch, stable across processes and machines.

Used by tests and the scripted pipeline. Each text becomes a bag of word tokens plus the character
trigrams of each token, hashed (blake2b, not Python's salted ``hash``) into ``dim`` signed buckets and
L2-normalised. Shared words and shared spelling give overlapping buckets, so "a cat" is closer to
"cats" than to "stock market crash", which is enough for retrieval tests to be meaningful.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Sequence

import numpy as np

from hxd2_ray.embedding.base import empty_embeddings, l2_normalize

_TOKEN = re.compile(r"\w+", re.UNICODE)
# Trigrams carry spelling similarity but are many; weighting them below whole words keeps exact word
# matches dominant.
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.5
# Featureless text (empty, punctuation only) still needs a unit vector: it gets this one fixed feature.
_EMPTY_FEATURE = "\x00empty"


@lru_cache(maxsize=1 << 18)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    h = int.from_bytes(digest, "little")
    # The low bit picks the sign, the rest the bucket: signed hashing keeps collisions unbiased.
    return (h >> 1) % dim, (1.0 if h & 1 else -1.0)


def _features(text: str) -> list[tuple[str, float]]:
    feats: list[tuple[str, float]] = []
    for tok in _TOKEN.findall(text.lower()):
        feats.append(("w:" + tok, _WORD_WEIGHT))
        padded = f"<{tok}>"
        feats.extend(("c:" + padded[i : i + 3], _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
    return feats or [(_EMPTY_FEATURE, 1.0)]


class HashingEmbedder:
    """Token + char-trigram feature hashing into ``dim`` signed buckets (stdlib + numpy only)."""

    def __init__(self, dim: int = 64, model_id: str = "hashing-v1") -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.dim = dim
        self.model_id = model_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        if len(texts) == 0:
            return empty_embeddings(self.dim)
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            vec = out[row]
            for feature, weight in _features(text or ""):
                idx, sign = _bucket(feature, self.dim)
                vec[idx] += sign * weight
            if not vec.any():
                # Every feature cancelled out (possible with few buckets): fall back to the fixed feature.
                idx, sign = _bucket(_EMPTY_FEATURE, self.dim)
                vec[idx] = sign
        return l2_normalize(out)

    def close(self) -> None:
        """Nothing to release; present so callers can close any embedder."""
