"""The BM25 score matrix of a corpus, built with NumPy in bm25s' own layout, without holding the corpus's tokens as
Python objects.

``bm25s.BM25.index`` takes the corpus as a list of token lists and loops over it in Python (a ``Counter`` and a set
per document). With the token strings held as well, building the lexical index of 2.5M chunks of 60 words peaked at
18.5 GB (``bench/query_scale.py`` at 10M entities), most of it Python objects. Here each document's tokens become
32-bit ids as they are read (a token is held once, in the vocabulary), and the matrix is computed over flat arrays:
about 30 bytes a token at the peak (``bench/lexical_build.py``).

The result is bm25s' own: the same ``data`` / ``indices`` / ``indptr`` of its CSC matrix, bit for bit, for its default
scoring (``method="lucene"``: Lucene's idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` and Robertson's term frequency
component), with the vocabulary numbered in sorted token order and ``""`` appended when absent (bm25s'
``create_empty_token``). ``tests/unit/test_bm25_matrix.py`` compares both on one corpus, so a bm25s release that
scores otherwise fails there, not in a served index.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Callable, Iterable

import numpy as np

__all__ = ["TokenizedCorpus", "bm25_scores", "tokenize_corpus"]


class TokenizedCorpus:
    """Every document's token ids, flat (``ids``, int32, in sorted-token numbering), with each document's start
    in ``offsets`` (int64, one more than documents), and the vocabulary (token -> id)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, vocab: dict[str, int]) -> None:
        self.ids = ids
        self.offsets = offsets
        self.vocab = vocab

    @property
    def documents(self) -> int:
        return len(self.offsets) - 1


def tokenize_corpus(texts: Iterable[str], tokens_of: Callable[[str], list[str]]) -> TokenizedCorpus:
    """Token ids of every text (a text without tokens counts as the one token ``""``, so its row stays), then the
    ids renumbered in sorted token order (two builds of one corpus write the same files)."""
    first_seen: dict[str, int] = {}
    flat = array("i")
    offsets = array("q", [0])
    for text in texts:
        tokens = tokens_of(text or "") or [""]
        # setdefault's default is evaluated before the call: a new token gets the next id
        flat.extend([first_seen.setdefault(token, len(first_seen)) for token in tokens])
        offsets.append(len(flat))
    ordered = sorted(first_seen)
    rank = np.empty(len(ordered), dtype=np.int32)
    rank[np.fromiter((first_seen[token] for token in ordered), dtype=np.int64, count=len(ordered))] = np.arange(
        len(ordered), dtype=np.int32
    )
    ids = rank[np.frombuffer(flat, dtype=np.int32)] if len(flat) else np.zeros(0, dtype=np.int32)
    del flat, first_seen
    return TokenizedCorpus(ids, np.frombuffer(offsets, dtype=np.int64).copy(), {t: i for i, t in enumerate(ordered)})


def bm25_scores(corpus: TokenizedCorpus, k1: float, b: float, dtype: Any = "float32") -> dict[str, Any]:
    """bm25s' ``scores`` (``data``, ``indices``, ``indptr``, ``num_docs``) of ``corpus``, as ``BM25.index`` would
    compute them with ``method="lucene"``; the same arithmetic, in the same precision, over arrays."""
    n_docs, n_vocab = corpus.documents, len(corpus.vocab)
    lengths = np.diff(corpus.offsets)
    avg_doc_len = lengths.mean()  # bm25s: np.array([len(doc) for doc in corpus]).mean()
    # one entry per (document, token) with its count: keys sorted by document, then token
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    keys, counts = np.unique(doc_of * n_vocab + corpus.ids, return_counts=True)
    del doc_of
    docs = (keys // n_vocab).astype(np.int32)
    tokens = (keys % n_vocab).astype(np.int32)
    del keys
    doc_freqs = np.bincount(tokens, minlength=n_vocab)
    idf = np.zeros(n_vocab, dtype=dtype)
    for token, df in enumerate(doc_freqs.tolist()):  # math.log, as bm25s: numpy's log may differ in the last bit
        if df:
            idf[token] = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    tf = counts.astype(dtype)
    l_d = lengths[docs]
    # bm25s' Robertson term: tf / (k1 * ((1 - b) + b * l_d / l_avg) + tf), tf in ``dtype``, the rest in float64
    tfc = tf / (k1 * ((1 - b) + b * l_d / avg_doc_len) + tf)
    data = (idf[tokens] * tfc).astype(dtype)
    del tf, l_d, tfc, counts
    # bm25s' CSC layout (its _np_csc_python): columns are tokens, rows are documents, sorted by (token, document)
    order = np.argsort((tokens.astype(np.int64) << 32) | docs.astype(np.int64))
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(np.bincount(tokens, minlength=n_vocab), out=indptr[1:])
    return {"data": data[order], "indices": docs[order], "indptr": indptr, "num_docs": n_docs}
