"""An embedder that remembers its last texts' vectors, so one query's steps embed each text once.

The query flow embeds the same keywords twice: dual-level retrieval to search, the refusal gate to score them
(and the question, for the question channel and the gate's question rule). In Serve each embedding is a remote
call to the Embedder deployment, so the second one is a round trip that returns vectors already computed. A
bounded least-recently-used map from text to its row makes the second call local; popular questions reuse it
across requests too. Vectors depend only on the text (the model is fixed for an index), so nothing goes stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Sequence

import numpy as np

from hxd2_ray.embedding.base import Embedder, empty_embeddings

DEFAULT_MAX_TEXTS = 4096  # ~6 MB of 384-d rows: many requests' keywords and questions


class CachedEmbedder:
    """:class:`Embedder` over another one; thread-safe; misses of one call go to the inner embedder in one call."""

    def __init__(self, inner: Embedder, max_texts: int = DEFAULT_MAX_TEXTS):
        if max_texts < 1:
            raise ValueError(f"max_texts must be at least 1, got {max_texts}")
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.max_texts = max_texts
        self.hits = 0
        self.misses = 0
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return empty_embeddings(self.dim)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                row = self._rows.get(text)
                if row is not None:
                    self._rows.move_to_end(text)
                    found[text] = row
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            vectors = self.inner.embed(missing)
            with self._lock:
                for text, row in zip(missing, vectors):
                    row = np.array(row, dtype=np.float32)  # a copy: the caller may keep or change its array
                    found[text] = row
                    self._rows[text] = row
                    self._rows.move_to_end(text)
                while len(self._rows) > self.max_texts:
                    self._rows.popitem(last=False)
        with self._lock:
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
        return np.ascontiguousarray(np.stack([found[t] for t in texts]), dtype=np.float32)
