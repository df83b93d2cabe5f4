"""The lexical index's score matrix, built over arrays (hxd2_ray.retrieval.bm25_matrix), is bm25s' own: the same
CSC arrays, bit for bit, and the same vocabulary as ``bm25s.BM25.index`` over the same corpus (the contract that
keeps the array build honest against bm25s releases), and the same answers once saved and opened."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from hxd2_ray.retrieval.bm25_matrix import bm25_scores, tokenize_corpus
from hxd2_ray.retrieval.lexical import LexicalIndex, lexical_tokens

CORPUS = [
    "Qinghe 17 is a japonica rice variety bred in Jiangsu; Qinghe 17 yields well.",
    "The B-52 part number 4471 and the year 1998 appear in the maintenance log.",
    "",  # an empty chunk keeps its row
    "the of and",  # only function words: no token either
    "稻瘟病 抗性 鉴定 结果 表明 清河17 抗稻瘟病",
    "rice rice rice rice blast resistance in rice",
    "Zhefu 802 is an early indica rice; its plant height is 85 cm.",
]


def _reference(texts):
    """bm25s' own index of the same tokens, numbered the same way (sorted tokens), as the lexical index built it."""
    tokens = [lexical_tokens(t) or [""] for t in texts]
    vocab = {token: i for i, token in enumerate(sorted({t for doc in tokens for t in doc}))}
    bm25 = bm25s.BM25()
    bm25.index(([[vocab[t] for t in doc] for doc in tokens], vocab), show_progress=False)
    return bm25


def _random_corpus(n_docs: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(2_000)]
    draws = np.minimum(rng.zipf(1.3, n_docs * 40) - 1, len(words) - 1)
    lengths = rng.integers(0, 80, n_docs)
    out, at = [], 0
    for length in lengths.tolist():
        out.append(" ".join(words[w] for w in draws[at : at + length].tolist()))
        at += length
    return out


@pytest.mark.parametrize("texts", [CORPUS, _random_corpus(3_000, 1)], ids=["mixed", "zipf"])
def test_the_array_build_is_bm25s_own_matrix_bit_for_bit(texts):
    want = _reference(texts)
    corpus = tokenize_corpus(texts, lexical_tokens)
    got = bm25_scores(corpus, want.k1, want.b, want.dtype)
    assert got["num_docs"] == want.scores["num_docs"] == len(texts)
    for name in ("data", "indices", "indptr"):
        assert got[name].dtype == want.scores[name].dtype, name
        assert np.array_equal(got[name], want.scores[name]), name
    assert corpus.vocab == {t: i for t, i in want.vocab_dict.items() if t != "" or "" in corpus.vocab}


def test_a_built_index_answers_as_bm25s_does_once_saved_and_opened(tmp_path):
    ids = [f"c{i}" for i in range(len(CORPUS))]
    built = LexicalIndex.build(ids, CORPUS)
    assert built.bm25.vocab_dict == _reference(CORPUS).vocab_dict
    full = [t for t in CORPUS if lexical_tokens(t)]  # no chunk without tokens: "" is appended last, as bm25s does
    vocab = LexicalIndex.build([f"c{i}" for i in range(len(full))], full).bm25.vocab_dict
    assert vocab == _reference(full).vocab_dict and vocab[""] == len(vocab) - 1
    opened = LexicalIndex.open(built.save(tmp_path / "lexical"))
    assert opened is not None
    for question in ("Qinghe 17 yield", "rice blast resistance", "part 4471", "抗稻瘟病", "nothing here at all"):
        assert opened.search(question, 3) == built.search(question, 3), question
    assert opened.search("Qinghe 17", 1)[0][0] == "c0"
