"""CachedEmbedder: the inner embedder's rows, each text embedded once while it stays among the last ``max_texts``,
and the query flow's refusal gate reusing retrieval's keyword vectors."""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np
import pytest

from hxd2_ray.embedding.cached import CachedEmbedder
from hxd2_ray.embedding.hashing import HashingEmbedder


class CountingEmbedder:
    def __init__(self, dim: int = 32, model_id: str = "hashing-v1"):
        self.inner = HashingEmbedder(dim=dim, model_id=model_id)
        self.model_id, self.dim = self.inner.model_id, dim
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
        return self.inner.embed(texts)


def test_rows_equal_the_inner_embedders_and_only_misses_go_inside():
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, max_texts=10)
    first = cached.embed(["a", "b", "a"])
    np.testing.assert_array_equal(first, inner.inner.embed(["a", "b", "a"]))
    assert inner.calls == [["a", "b"]]  # one call, each missing text once
    second = cached.embed(["b", "c", "a"])
    np.testing.assert_array_equal(second, inner.inner.embed(["b", "c", "a"]))
    assert inner.calls[-1] == ["c"]
    assert cached.embed([]).shape == (0, inner.dim)
    assert (cached.hits, cached.misses) == (3, 3)
    assert second.dtype == np.float32 and second.flags["C_CONTIGUOUS"]


def test_a_caller_changing_its_array_does_not_change_the_cache():
    cached = CachedEmbedder(CountingEmbedder())
    got = cached.embed(["x"])
    want = got.copy()
    got[:] = 0
    np.testing.assert_array_equal(cached.embed(["x"]), want)


def test_least_recently_used_texts_leave_first():
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, max_texts=2)
    cached.embed(["a"])
    cached.embed(["b"])
    cached.embed(["a"])  # a is now the most recent
    cached.embed(["c"])  # b leaves
    inner.calls.clear()
    cached.embed(["a", "c"])
    assert inner.calls == []
    cached.embed(["b"])
    assert inner.calls == [["b"]]
    with pytest.raises(ValueError, match="max_texts"):
        CachedEmbedder(inner, max_texts=0)


def test_the_refusal_gate_reuses_the_retrievals_keyword_vectors(tmp_path):
    """Mode auto embeds every text once per query: retrieval's keywords and question, then the gate's (the same)."""
    from hxd2_ray.retrieval import open_index
    from hxd2_ray.wiring import build_pipeline
    from tests.unit.retrieval_fixtures import DIM, build_tiny_index
    from tests.unit.test_query_flow import QUESTION, scripted, with_multistage

    tiny = build_tiny_index(tmp_path / "index")
    index = open_index(tiny.root, tiny.cfg)
    try:
        for cache, repeats_expected in ((4096, False), (0, True)):
            embedder = CountingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
            cfg = with_multistage(tiny.cfg, refusal_rule="min")
            cfg = cfg.model_copy(
                update={"retrieval": cfg.retrieval.model_copy(update={"embedding_cache_texts": cache})}
            )
            with build_pipeline("auto", index, scripted(), embedder, cfg) as flow:
                answer = flow.answer(QUESTION)
            assert "score" in answer.trace["refusal"] and answer.path == "logic_form"  # the gate ran
            embedded = [t for call in embedder.calls for t in call]
            assert QUESTION in embedded
            assert (len(embedded) != len(set(embedded))) is repeats_expected, embedded
    finally:
        index.close()
