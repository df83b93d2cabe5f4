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

from hxd2_ray.extraction.names import STOPWORDS, ZH_STOPWORDS

__all__ = ["LEXICAL_DIR", "LexicalIndex", "lexical_shares", "lexical_tokens", "mix_channels", "write_lexical"]

LEXICAL_DIR = "lexical"  # in a generation's folder, beside graph.kuzu and vectors/
_IDS_FILE = "chunk_ids.json"
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
    """BM25 scores of questions against one generation's chunks; read-only and thread-safe once opened."""

    chunk_ids: tuple[str, ...]
    bm25: Any  # bm25s.BM25

    @property
    def count(self) -> int:
        return len(self.chunk_ids)

    @classmethod
    def build(cls, chunk_ids: Sequence[str], texts: Iterable[str]) -> "LexicalIndex":
        import bm25s  # noqa: PLC0415 - scipy-backed: loaded by the readers and writers of the lexical channel only

        tokens = [lexical_tokens(t or "") or [""] for t in texts]  # an empty chunk keeps its row
        bm25 = bm25s.BM25()
        if tokens:
            bm25.index(tokens, show_progress=False)
        return cls(tuple(str(c) for c in chunk_ids), bm25)

    def save(self, folder: str | Path) -> Path:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        if self.chunk_ids:
            self.bm25.save(str(out), show_progress=False)
        (out / _IDS_FILE).write_text(json.dumps(list(self.chunk_ids)), encoding="utf-8")
        return out

    @classmethod
    def open(cls, folder: str | Path) -> "LexicalIndex | None":
        """The lexical index in ``folder``, or None when the generation has none (built before the channel)."""
        root = Path(folder)
        ids_file = root / _IDS_FILE
        if not ids_file.exists():
            return None
        import bm25s  # noqa: PLC0415

        ids = tuple(json.loads(ids_file.read_text(encoding="utf-8")))
        # Memory-mapped: every process on a node shares the score matrix's pages (as the graph's read structures).
        bm25 = bm25s.BM25.load(str(root), show_progress=False, mmap=True) if ids else bm25s.BM25()
        return cls(ids, bm25)

    def search(self, question: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` best chunks of ``question`` by BM25, best first, zero scores left out."""
        if not self.chunk_ids or k <= 0:
            return []
        known = [t for t in lexical_tokens(question) if t in self.bm25.vocab_dict]
        if not known:
            return []
        scores = np.asarray(self.bm25.get_scores(known), dtype=np.float64)
        top = np.argsort(-scores, kind="stable")[:k]
        return [(self.chunk_ids[i], float(scores[i])) for i in top if scores[i] > 0]

    def best_score(self, question: str) -> float:
        """The best BM25 score of ``question`` over the chunks (0 when no word of it is in the corpus)."""
        hits = self.search(question, 1)
        return hits[0][1] if hits else 0.0


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
