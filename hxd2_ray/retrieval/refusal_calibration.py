"""The refusal threshold of one index, calibrated when the index is built and recorded in its manifest.

A threshold calibrated on one corpus (the bundled sample: 0.21) is wrong for the next one: cosines depend on
the embedding model *and* on what the index holds. So every build calibrates its own, for the ``question`` rule
(the question's embedding against the entity_mix and relation_mix families; no LLM, so a build can afford it):

* positives: questions made from the index's own chunks (a seeded sample; one sentence of each, its first
  words wrapped in a question: "What is known about <words>?"); a knowledge-graph index without chunks uses
  its edge descriptions;
* negatives: the shipped off-topic set (``hxd2_ray/sample_data/off_topic_questions.jsonl``: everyday questions,
  written for this project);
* the threshold: :func:`~hxd2_ray.retrieval.refusal.calibrate_threshold` (best F1 of "answer the positives")
  when there are at least :data:`MIN_POSITIVES` positives. A small corpus gives fewer, and a threshold fitted to
  a handful of points sits on a knife's edge (7 positives once put it 0.002 above a question the corpus answers):
  below that the threshold is **conservative**, refusing only what scores like the bulk of the off-topic set
  (the lower of the fitted threshold and the off-topic scores' :data:`CONSERVATIVE_QUANTILE` quantile), and the
  record carries a one-line ``notice`` the build summary prints;
* the lexical level (:mod:`hxd2_ray.retrieval.lexical`): a question whose best BM25 score reaches it is answered
  whatever its cosine. It lies above every off-topic question's best score (x :data:`LEXICAL_MARGIN`) and at
  least at :data:`LEXICAL_POSITIVE_SHARE` of the positives' median (a couple of the corpus's rarer words).

The record also reports the gate as it runs, with its names rule: a question naming an entity of the index is
answered whatever its score (``with_names``). :meth:`RefusalGate.for_index` uses the recorded threshold when the
configured rule is ``question``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.retrieval.fuzzy import FuzzyNameIndex
from hxd2_ray.retrieval.lexical import LEXICAL_DIR, LexicalIndex
from hxd2_ray.retrieval.refusal import RefusalGate, calibrate_threshold
from hxd2_ray.vectors.base import family_keys

__all__ = [
    "MIN_POSITIVES",
    "OFF_TOPIC_FILE",
    "calibrate_index",
    "chunk_questions",
    "lexical_level",
    "off_topic_questions",
]

OFF_TOPIC_FILE = "off_topic_questions.jsonl"
DEFAULT_POSITIVES = 64
MIN_POSITIVES = 50  # fewer and the fitted threshold means little: the conservative one is used
CONSERVATIVE_QUANTILE = 0.95  # of the off-topic scores: the conservative threshold refuses what scores below it
LEXICAL_MARGIN = 1.15  # the lexical level is this much above the best off-topic question's BM25 score
LEXICAL_POSITIVE_SHARE = 0.1  # ... and at least this share of the positives' median BM25 score (a floor)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*")
_MARKUP = re.compile(r"[#>*_`|\[\]]+")


def off_topic_questions() -> list[str]:
    """The shipped off-topic questions (negatives)."""
    text = (Path(__file__).resolve().parents[1] / "sample_data" / OFF_TOPIC_FILE).read_text(encoding="utf-8")
    return [json.loads(line)["question"] for line in text.splitlines() if line.strip()]


def question_from_text(text: str, max_words: int = 12, max_chars_zh: int = 24) -> str | None:
    """A question about a passage: its first sentence of some length, cut short, wrapped in a question."""
    clean = " ".join(_MARKUP.sub(" ", text).split())
    if not clean:
        return None
    sentences = [s.strip() for s in _SENTENCE_END.split(clean) if s.strip()]
    if detect_language(clean) == "zh":
        body = next((s for s in sentences if len(s) >= 8), sentences[0])[:max_chars_zh].rstrip("。！？；;，, ")
        return f"关于“{body}”有什么信息？" if body else None
    sentence = next((s for s in sentences if len(s.split()) >= 5), sentences[0])
    words = sentence.rstrip(".!?;: ").split()[:max_words]
    return f"What is known about {' '.join(words)}?" if words else None


def chunk_questions(texts: Sequence[str], n: int = DEFAULT_POSITIVES, seed: int = 0) -> list[str]:
    """Up to ``n`` distinct questions from a sample of ``texts`` chosen by a seeded hash of each text, so the same
    index gives the same set whatever order its chunks come in (a rerun reads them back from staging)."""

    def text_at(i: int) -> str:
        text = texts[i]
        return (text.as_py() if hasattr(text, "as_py") else text) or ""  # an Arrow column is read row by row

    def rank(i: int) -> bytes:
        return hashlib.blake2b(text_at(i).encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()

    out: dict[str, None] = {}
    for i in sorted(range(len(texts)), key=rank):
        q = question_from_text(text_at(i))
        if q:
            out.setdefault(q, None)
        if len(out) >= n:
            break
    return list(out)


def _f1(good: Sequence[bool], bad: Sequence[bool]) -> dict[str, float]:
    tp, fp = sum(good), sum(bad)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / len(good) if good else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "good_answered": tp,
        "bad_answered": fp,
    }


def calibrate_index(
    index: Any,
    embedder: Any,
    texts: Sequence[str],
    *,
    n: int = DEFAULT_POSITIVES,
    seed: int = 0,
    negatives: Sequence[str] | None = None,
) -> dict[str, Any] | None:
    """The manifest's ``refusal`` record for an index (``index``: ``.family(name)``, and ``.graph`` /
    ``.names`` for the names rule), or None when there is nothing to calibrate on (no text, empty families)."""
    good = chunk_questions(texts, n, seed)
    bad = list(negatives) if negatives is not None else off_topic_questions()
    families = [index.family(f) for f in ("entity_mix", "relation_mix")]
    if not good or not bad or not any(getattr(f, "count", 0) for f in families):
        return None
    gate = RefusalGate(index, embedder, 0.0, rule="question", names=getattr(index, "graph", None) is not None)
    scores = gate.scores([*good, *bad], [None] * (len(good) + len(bad)))
    good_scores, bad_scores = [s.score for s in scores[: len(good)]], [s.score for s in scores[len(good) :]]
    cal = calibrate_threshold(good_scores, bad_scores)
    threshold, notice = cal.threshold, ""
    if len(good) < MIN_POSITIVES:
        threshold = min(cal.threshold, float(np.quantile(bad_scores, CONSERVATIVE_QUANTILE)))
        notice = (
            f"refusal: only {len(good)} questions could be made from this index's chunks (< {MIN_POSITIVES}); "
            f"a conservative threshold {threshold:.4f} refuses only what scores like off-topic questions"
        )
    level = lexical_level([s.lexical for s in scores[: len(good)]], [s.lexical for s in scores[len(good) :]])
    answered = [
        s.score >= threshold or s.named is not None or (level is not None and (s.lexical or 0.0) >= level)
        for s in scores
    ]
    return {
        "rule": "question",
        "threshold": round(threshold, 6),
        "fitted_threshold": round(cal.threshold, 6),
        "conservative": len(good) < MIN_POSITIVES,
        "notice": notice,
        "lexical_level": None if level is None else round(level, 6),
        "precision": round(cal.precision, 4),
        "recall": round(cal.recall, 4),
        "f1": round(cal.f1, 4),
        "n_good": len(good),
        "n_bad": len(bad),
        "seed": seed,
        "with_names": _f1(answered[: len(good)], answered[len(good) :]),
        "positives": f"questions made from {len(good)} sampled chunks of this index",
        "negatives": f"hxd2_ray/sample_data/{OFF_TOPIC_FILE}" if negatives is None else "given",
        "embedding_model": getattr(embedder, "model_id", ""),
    }


def lexical_level(good: Sequence[float | None], bad: Sequence[float | None]) -> float | None:
    """The BM25 score from which a question counts as a strong lexical match (module docstring); None without a
    lexical index (the scores are None) or without positives that match their own chunks at all."""
    pos = [g for g in good if g is not None and g > 0]
    neg = [b for b in bad if b is not None]
    if not pos or len(neg) != len(bad):
        return None
    return max(max(neg, default=0.0) * LEXICAL_MARGIN, float(np.median(pos)) * LEXICAL_POSITIVE_SHARE)


class _BuiltIndex:
    """What the gate reads, opened from a finished build folder (graph read-only, the two score families, the
    fuzzy names): the index before its manifest exists."""

    def __init__(self, root: Path, graph_backend: str = "kuzu") -> None:
        # the backends' modules load Kùzu and Faiss: imported when a build folder is opened
        from hxd2_ray.graph.kuzu_store import KuzuGraphStore
        from hxd2_ray.vectors.faiss_index import FaissFamilyIndex

        self.families = {f: FaissFamilyIndex.open(root, f) for f in ("entity_mix", "relation_mix")}
        self.graph = KuzuGraphStore(root / "graph.kuzu", read_only=True, engine=graph_backend)
        self.names = FuzzyNameIndex(family_keys(root, "entity_name").to_pylist())
        self.lexical = LexicalIndex.open(root / LEXICAL_DIR)

    def family(self, name: str) -> Any:
        return self.families[name]

    def close(self) -> None:
        self.graph.close()
        for f in self.families.values():
            f.close()


def calibrate_build(
    root: str | Path,
    texts: Sequence[str],
    *,
    embedder: Any = None,
    make_embedder: Callable[[], Any] | None = None,
    progress: Any = None,
    graph_backend: str = "kuzu",
) -> dict[str, Any] | None:
    """:func:`calibrate_index` on a build folder (graph and vector families written, manifest not yet), with
    ``embedder``, or one ``make_embedder()`` builds (and this closes after): the caller, which knows the config
    and the backends (``hxd2_ray.wiring.build_embedder``), injects it. A failure is reported in the record, never
    raised: the index stays usable with the configured threshold. ``graph_backend``: the engine that wrote the
    build's graph (``graph.backend``)."""
    if (embedder is None) == (make_embedder is None):
        raise TypeError("calibrate_build needs exactly one of embedder and make_embedder")
    started = time.perf_counter()
    own = embedder is None
    view = None
    try:
        if make_embedder is not None:
            embedder = make_embedder()
        view = _BuiltIndex(Path(root), graph_backend)
        record = calibrate_index(view, embedder, texts)
    except Exception as exc:  # noqa: BLE001 - calibration is advisory; the build must not fail on it
        record = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if view is not None:
            view.close()
        if own and embedder is not None and hasattr(embedder, "close"):
            embedder.close()
    if record is not None:
        record["seconds"] = round(time.perf_counter() - started, 3)
    if progress is not None:
        if record is None:
            progress("refusal threshold not calibrated (no text or no entity/relation vectors)")
        elif "error" in record:
            progress(f"refusal threshold not calibrated: {record['error']}")
        else:
            progress(
                f"refusal threshold {record['threshold']:.4f} (rule question, F1 {record['f1']:.3f} on "
                f"{record['n_good']} own / {record['n_bad']} off-topic questions; with names "
                f"F1 {record['with_names']['f1']:.3f})"
            )
            if record.get("notice"):
                progress(record["notice"])
    return record
