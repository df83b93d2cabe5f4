"""The lexical channel: BM25 over an index generation's chunks (``bm25s``), written beside the vector families.

Rare names, codes and numbers ("Qinghe 17", a part number, a year) are where embeddings are weakest and exact
terms strongest. Every generation the index job writes carries ``lexical/``: a BM25 index of its chunk table
(built from the whole table each time, so ``--update`` and ``--delete`` leave it matching the generation; at a
few hundred thousand chunks that takes seconds). Two readers use it:

* the refusal gate (:mod:`hxd2_ray.retrieval.refusal`): a question whose best BM25 score reaches the level
  calibrated for the index (above what any shipped off-topic question reaches) has strong evidence in the corpus
  and is answered;
* the ``ppr`` chunk ranking (``retrieval.lexical_seeds``): the best BM25 chunks join the dense chunks as seeds.

Tokens: English words lower-cased (letters and digits, so "17" and "B-52" parts stay), Chinese runs cut with
jieba as the rest of the project does; function words dropped on both sides, so "what is the" matches nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa

from hxd2_ray.errors import IndexMismatchError
from hxd2_ray.extraction.names import STOPWORDS, ZH_STOPWORDS
from hxd2_ray.graph.read_structures import KeyLookup

__all__ = [
    "LEXICAL_DIR",
    "LexicalIndex",
    "lexical_shares",
    "lexical_tokens",
    "mix_channels",
    "upgrade_lexical",
    "write_lexical",
]

LEXICAL_DIR = "lexical"  # in a generation's folder, beside graph.kuzu and vectors/
LEXICAL_FORMAT = 2  # 2: chunk ids and vocabulary mapped (lexical.json written last); 1: chunk_ids.json, bm25s' JSON
_META = "lexical.json"
_CHUNK_IDS = "chunk_ids.arrow"  # chunk row -> id
_VOCAB_FILE = "vocab.arrow"  # token id -> token
_VOCAB_HASH = "vocab_hash.npy"  # the tokens' 64-bit hashes, ascending ...
_VOCAB_HASH_ID = "vocab_hash_id.npy"  # ... and the token id of each
_BM25_VOCAB = "vocab.index.json"  # bm25s' own vocabulary file (format 1)
_IDS_JSON = "chunk_ids.json"  # format 1's chunk ids
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[^\W_]+")


def lexical_tokens(text: str) -> list[str]:
    """BM25 tokens of ``text``: lower-cased words outside Chinese runs, jieba words inside them, no function
    words."""
    out: list[str] = []
    at = 0
    for run in _CJK_RUN.finditer(text):
        out += _words(text[at : run.start()])
        out += _zh_words(run.group())
        at = run.end()
    out += _words(text[at:])
    return out


def _words(text: str) -> list[str]:
    return [w for w in (m.group().lower() for m in _WORD.finditer(text)) if w not in STOPWORDS]


def _zh_words(run: str) -> list[str]:
    import jieba  # noqa: PLC0415 - its dictionary loads on first use: only for Chinese text

    return [w for w in jieba.lcut(run) if w.strip() and w not in ZH_STOPWORDS]


@dataclass(frozen=True)
class LexicalIndex:
    """BM25 scores of questions against one generation's chunks; read-only and thread-safe once opened.

    Opened, everything is memory-mapped (format 2): the score matrix (bm25s' own arrays), the chunk ids (an Arrow
    column) and the vocabulary (its tokens' sorted hashes, :class:`~hxd2_ray.graph.read_structures.KeyLookup`), so
    opening reads no array whole and every process on a node shares the pages. A lexical index of format 1 (written
    before) has its chunk ids in ``chunk_ids.json`` and its vocabulary in bm25s' JSON, read whole when it opens.
    """

    chunk_ids: pa.Array  # chunk row -> id
    bm25: Any  # bm25s.BM25 (its scores; its own vocabulary is empty when ``vocab`` is given)
    vocab: KeyLookup | None = None  # token -> token id; None: bm25s' own ``vocab_dict`` (format 1, or just built)

    @property
    def count(self) -> int:
        return len(self.chunk_ids)

    @classmethod
    def build(cls, chunk_ids: Sequence[str], texts: Iterable[str]) -> "LexicalIndex":
        """The BM25 index of ``texts`` (one per chunk id, in order; an empty chunk keeps its row). The score matrix
        is bm25s' own, computed over arrays (:mod:`.bm25_matrix`): bm25s' ``index`` holds the corpus's tokens as
        Python lists, 18.5 GB at 2.5M chunks."""
        import bm25s  # noqa: PLC0415 - scipy-backed: loaded by the readers and writers of the lexical channel only

        from hxd2_ray.retrieval.bm25_matrix import bm25_scores, tokenize_corpus  # noqa: PLC0415 - build only

        bm25 = bm25s.BM25()
        corpus = tokenize_corpus(texts, lexical_tokens)
        if corpus.documents:
            bm25.scores = bm25_scores(corpus, bm25.k1, bm25.b, bm25.dtype)
            bm25.nonoccurrence_array = None  # what index() sets for its default (lucene) scoring
            vocab = corpus.vocab
            if "" not in vocab:  # bm25s' create_empty_token: a query of no known token scores against ""
                vocab[""] = len(vocab)
            bm25.vocab_dict = vocab
            bm25.unique_token_ids_set = set(vocab.values())
        return cls(pa.array([str(c) for c in chunk_ids], pa.large_string()), bm25)

    def save(self, folder: str | Path) -> Path:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        if self.count:
            self.bm25.save(str(out), show_progress=False)
            (out / _BM25_VOCAB).unlink()  # the vocabulary is written below, in a form that maps
        self.save_mapped(out)
        return out

    def save_mapped(self, out: Path) -> None:
        """The chunk ids and the vocabulary as mapped files, then ``lexical.json`` (last: the format's mark)."""
        vocab: dict[str, int] = self.bm25.vocab_dict if self.count else {}
        tokens: list[str | None] = [None] * len(vocab)
        for token, token_id in vocab.items():
            tokens[token_id] = token  # bm25s numbers its tokens 0..n-1
        if None in tokens:
            raise ValueError("the BM25 vocabulary's token ids are not 0..n-1")
        _write_column(out / _VOCAB_FILE, pa.array(tokens, pa.large_string()))
        lookup = KeyLookup.build(pa.array(tokens, pa.large_string()))
        np.save(out / _VOCAB_HASH, lookup.hashes)
        np.save(out / _VOCAB_HASH_ID, lookup.rows)
        _write_column(out / _CHUNK_IDS, self.chunk_ids.cast(pa.large_string()))
        (out / _META).write_text(json.dumps({"format": LEXICAL_FORMAT, "chunks": self.count}) + "\n", "utf-8")

    @classmethod
    def open(cls, folder: str | Path) -> "LexicalIndex | None":
        """The lexical index in ``folder``, memory-mapped, or None when the generation has none (built before the
        channel)."""
        root = Path(folder)
        if not (root / _META).exists():
            return cls._open_format_1(root)
        import bm25s  # noqa: PLC0415

        meta = json.loads((root / _META).read_text(encoding="utf-8"))
        if int(meta.get("format", 0)) > LEXICAL_FORMAT:
            raise IndexMismatchError(
                f"the lexical index at {root} has format {meta['format']}; this version reads up to {LEXICAL_FORMAT}"
            )
        chunk_ids = _mapped_column(root / _CHUNK_IDS)
        if not len(chunk_ids):
            return cls(chunk_ids, bm25s.BM25())
        vocab = KeyLookup(
            _mapped_array(root / _VOCAB_HASH), _mapped_array(root / _VOCAB_HASH_ID), _mapped_column(root / _VOCAB_FILE)
        )
        # Memory-mapped: every process on a node shares the score matrix's pages (as the graph's read structures).
        bm25 = bm25s.BM25.load(str(root), show_progress=False, mmap=True, load_vocab=False)
        return cls(chunk_ids, bm25, vocab)

    @classmethod
    def _open_format_1(cls, root: Path) -> "LexicalIndex | None":
        ids_file = root / _IDS_JSON
        if not ids_file.exists():
            return None
        import bm25s  # noqa: PLC0415

        ids = json.loads(ids_file.read_text(encoding="utf-8"))
        bm25 = bm25s.BM25.load(str(root), show_progress=False, mmap=True) if ids else bm25s.BM25()
        return cls(pa.array(ids, pa.large_string()), bm25)

    @classmethod
    def upgrade(cls, root: Path) -> bool:
        """See :func:`upgrade_lexical`."""
        if (root / _META).exists():
            return False
        old = cls._open_format_1(root)
        if old is None:
            return False
        old.save_mapped(root)  # lexical.json last: a reader opening meanwhile reads format 1 whole, or format 2
        for name in (_IDS_JSON, _BM25_VOCAB):
            (root / name).unlink(missing_ok=True)
        return True

    def _token_ids(self, tokens: list[str]) -> list[int]:
        """The vocabulary's id of each token it holds, in the question's order (repeats kept, as bm25s does)."""
        if self.vocab is None:
            vocab = self.bm25.vocab_dict
            return [vocab[t] for t in tokens if t in vocab]
        return [i for i in self.vocab.find(tokens) if i is not None]  # a token's row is its id

    def search(self, question: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` best chunks of ``question`` by BM25, best first, zero scores left out."""
        if not self.count or k <= 0:
            return []
        known = self._token_ids(lexical_tokens(question))
        if not known:
            return []
        scores = np.asarray(self.bm25.get_scores_from_ids(known), dtype=np.float64)
        top = np.argsort(-scores, kind="stable")[:k]
        top = top[scores[top] > 0]
        ids = self.chunk_ids.take(pa.array(top, pa.int64())).to_pylist()
        return [(cid, float(scores[i])) for cid, i in zip(ids, top.tolist())]

    def best_score(self, question: str) -> float:
        """The best BM25 score of ``question`` over the chunks (0 when no word of it is in the corpus)."""
        hits = self.search(question, 1)
        return hits[0][1] if hits else 0.0


def upgrade_lexical(folder: str | Path) -> bool:
    """Rewrite a lexical index of format 1 in format 2, in place: its chunk ids and vocabulary as mapped files (the
    score matrix stays as it is; it answers the same). False when there is none or it is already format 2."""
    return LexicalIndex.upgrade(Path(folder))


def _write_column(path: Path, column: pa.Array) -> None:
    table = pa.table({"v": column})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        for batch in table.to_batches(max_chunksize=max(table.num_rows, 1)):  # one batch: one contiguous column
            out.write_batch(batch)


def _mapped_column(path: Path) -> pa.Array:
    column = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()["v"]  # zero-copy: points into the mapping
    return column.chunk(0) if column.num_chunks == 1 else pa.array([], pa.large_string())


def _mapped_array(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r").view(np.ndarray)
    except ValueError:  # numpy cannot map an array of no elements
        return np.load(path)


def write_lexical(generation_folder: str | Path, chunk_ids: Sequence[str], texts: Iterable[str]) -> Path:
    """Build and save the lexical index of a generation's chunk table into ``<generation>/lexical``."""
    return LexicalIndex.build(chunk_ids, texts).save(Path(generation_folder) / LEXICAL_DIR)


def lexical_shares(index: LexicalIndex | None, question: str, k: int) -> dict[str, float]:
    """The question's ``k`` best BM25 chunks with their share of those chunks' total score (a distribution over
    chunks, like the dense channel's probabilities); empty without a lexical index, with ``k`` 0 or no match."""
    if index is None or k <= 0:
        return {}
    hits = index.search(question, k)
    total = sum(score for _, score in hits)
    return {cid: score / total for cid, score in hits} if total > 0 else {}


def mix_channels(dense: dict[str, float], lexical: dict[str, float], weight: float) -> dict[str, float]:
    """``(1 - weight) x dense + weight x lexical`` over the chunks of either (a side that is empty gives its share
    to the other), in the order dense first."""
    if not dense or not lexical:
        return dict(dense or lexical)
    keys = list(dict.fromkeys([*dense, *lexical]))
    return {c: (1.0 - weight) * dense.get(c, 0.0) + weight * lexical.get(c, 0.0) for c in keys}
