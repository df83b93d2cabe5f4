"""HashingEmbedder: the model-free embedder used by tests and the scripted pipeline."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hxd2_ray.embedding.hashing import HashingEmbedder

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["Marie Curie worked in Paris.", "a cat", "", "!!!", "居里夫人在巴黎工作", "stock market crash"]


def test_deterministic_within_and_across_processes():
    emb = HashingEmbedder(dim=64)
    a = emb.embed(TEXTS)
    np.testing.assert_array_equal(a, HashingEmbedder(dim=64).embed(TEXTS))
    # Python's str hash is salted per process; the embedder must not depend on it.
    code = (
        "import sys, numpy as np; from hxd2_ray.embedding.hashing import HashingEmbedder; "
        f"np.save(sys.stdout.buffer, HashingEmbedder(dim=64).embed({TEXTS!r}))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    np.testing.assert_array_equal(a, np.load(io.BytesIO(out.stdout)))


def test_shape_dtype_and_unit_rows():
    emb = HashingEmbedder(dim=48, model_id="hashing-test")
    vecs = emb.embed(TEXTS)
    assert emb.model_id == "hashing-test" and emb.dim == 48
    assert vecs.shape == (len(TEXTS), 48)
    assert vecs.dtype == np.float32 and vecs.flags["C_CONTIGUOUS"]
    # Empty and punctuation-only texts still get a unit vector (no zero rows, no NaN).
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)


def test_similar_texts_are_closer_than_dissimilar():
    emb = HashingEmbedder(dim=256)
    cat, cats, kitten_cat, market = emb.embed(["a black cat", "black cats", "the cat sleeps", "stock market crash"])
    assert cat @ cats > cat @ market
    assert cat @ kitten_cat > cat @ market
    # Identical text → identical vector; case and punctuation are ignored.
    same = emb.embed(["Marie Curie", "marie curie!"])
    assert same[0] @ same[1] == pytest.approx(1.0, abs=1e-6)


def test_empty_batch_shape():
    out = HashingEmbedder(dim=32).embed([])
    assert out.shape == (0, 32) and out.dtype == np.float32


def test_rejects_single_string_and_bad_dim():
    with pytest.raises(TypeError):
        HashingEmbedder().embed("a single string")
    with pytest.raises(ValueError):
        HashingEmbedder(dim=0)
