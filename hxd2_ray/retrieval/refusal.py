"""The refusal gate: is a question about this knowledge base at all? And how to calibrate its threshold.

Score (the reference's rule, ``KnowledgeRetriever.similarity_score``): the best cosine of the low-level
keywords against the ``entity_mix`` family and the best cosine of the high-level keywords against the
``relation_mix`` family, averaged. With only one level of keywords that level's best is the score; with no
keywords at all (an unreadable keyword reply) the question itself is embedded and searched against both
families. A level whose family holds no vectors counts as absent; nothing to compare gives 0.

The keywords are the ones dual-level retrieval already extracted, so a query pays ONE keyword call, not the
reference's two (one for the gate, one for retrieval). Two more rules are offered (:class:`RefusalGate`):
``"question"`` scores the question's own embedding, ``"min"`` takes the lower of both scores, which keeps a
small model's made-up keywords from carrying an off-topic question past the gate.

**A question that names an entity of the index is never refused** (``names``, on by default): its word n-grams
are looked up among the entity names, exactly and fuzzily (:mod:`hxd2_ray.extraction.names`), and a hit passes
the gate whatever the score says. A user asking about "Qinghe 17" in a corpus whose heading is "Qinghe 17" is
asking about the corpus, even when a small model's keywords ("Research affiliation") and the question's own
embedding score low; the score still decides for questions that name nothing the index knows.

**Nor is a question with a strong lexical match** (:mod:`hxd2_ray.retrieval.lexical`): its best BM25 score over
the index's chunks at or above ``lexical_level``, the level calibrated for the index above what the shipped
off-topic questions reach. Rare names, codes and numbers ("Qinghe 17", partial or differently cased names) are
where vectors are weakest and exact terms strongest. Document titles count as names too.

The threshold comes from the index when it has one (:meth:`RefusalGate.for_index`): every build calibrates the
``question`` rule on questions made from its own chunks against a shipped off-topic set and records it in the
manifest (:mod:`hxd2_ray.retrieval.refusal_calibration`); otherwise, or for another rule, the configured one.

Below the threshold the pipeline refuses politely in the question's language (the reference's v2 turned the
refusal into an answer without retrieval; HuixiangDou v1 refused, which is what a domain assistant in a
group chat needs). :func:`calibrate_threshold` picks the threshold that maximises F1 of "answer" over a set
of good (in-domain) and bad (off-topic) questions, with scikit-learn's ``precision_recall_curve``;
:func:`plot_calibration` draws the curve (``hxd2 calibrate-refusal``, :mod:`jobs.calibrate`).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from hxd2_ray.embedding.base import Embedder
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.extraction.names import TitleIndex, named_entities, title_index
from hxd2_ray.graph.base import unique_in_order
from hxd2_ray.retrieval.intent import MultiStagePromptSet, load_multistage_prompts
from hxd2_ray.retrieval.results import Keywords

__all__ = [
    "RULES",
    "Calibration",
    "RefusalGate",
    "RefusalScore",
    "calibrate_threshold",
    "index_lexical_level",
    "index_threshold",
    "plot_calibration",
    "refusal_message",
]


RULES = ("keywords", "question", "min")


@dataclass(frozen=True, slots=True)
class RefusalScore:
    score: float  # what is compared with the threshold
    threshold: float
    basis: str  # keyword levels used: both | low | high | question (no keywords) | none (nothing to compare: 0)
    low_best: float | None = None  # best cosine of a low-level keyword (or the question) against entity_mix
    high_best: float | None = None  # best cosine of a high-level keyword (or the question) against relation_mix
    low_match: tuple[str, str] | None = None  # (keyword, entity key) of low_best
    high_match: tuple[str, str] | None = None  # (keyword, relation key) of high_best
    seconds: float = 0.0
    rule: str = "keywords"  # keywords | question | min (see RefusalGate)
    keyword_score: float | None = None  # the reference rule's score (None under rule "question")
    question_score: float | None = None  # the question's own score (None under rule "keywords")
    named: tuple[str, str, float] | None = None  # (n-gram, entity key, match score) the question names: never refused
    threshold_source: str = "config"  # config | index (calibrated when the index was built)
    lexical: float | None = None  # the question's best BM25 score over the chunks (None: no lexical index)
    lexical_level: float | None = None  # at or above it the question is answered (None: the channel is off)

    @property
    def lexical_match(self) -> bool:
        return self.lexical is not None and self.lexical_level is not None and self.lexical >= self.lexical_level

    @property
    def refused(self) -> bool:
        # Strong evidence in the corpus (a name of the index, a lexical match) answers whatever the score says.
        return self.named is None and not self.lexical_match and self.score < self.threshold

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 6)

        return {
            "score": round(self.score, 6),
            "threshold": self.threshold,
            "refused": self.refused,
            "rule": self.rule,
            "basis": self.basis,
            "keyword_score": r(self.keyword_score),
            "question_score": r(self.question_score),
            "low_best": r(self.low_best),
            "high_best": r(self.high_best),
            "low_match": list(self.low_match) if self.low_match else None,
            "high_match": list(self.high_match) if self.high_match else None,
            "named": (
                {"text": self.named[0], "key": self.named[1], "score": round(self.named[2], 4)} if self.named else None
            ),
            "threshold_source": self.threshold_source,
            "lexical": r(self.lexical),
            "lexical_level": r(self.lexical_level),
            "lexical_match": self.lexical_match,
            "ms": round(self.seconds * 1000, 2),
        }


class RefusalGate:
    """Scores questions against an open index; thread-safe, no LLM.

    ``rule``: ``"keywords"`` (the reference's rule, the module docstring); ``"question"``: the question's own
    embedding against both families, averaged (no keywords needed); ``"min"``: the lower of the two, so that
    keywords a small model made up (copied from the prompt's examples, say) cannot carry an off-topic
    question past the gate. On the sample corpus with SmolLM2-135M keywords and MiniLM, "question" and "min"
    separated 16 good from 16 bad questions perfectly where "keywords" let 3 bad ones through.
    """

    def __init__(
        self,
        index: Any,  # OpenIndex: .family(name).search(vectors, k)
        embedder: Embedder,
        threshold: float,
        *,
        rule: str = "keywords",
        entity_family: str = "entity_mix",
        relation_family: str = "relation_mix",
        names: bool = True,
        name_cutoff: float = 90.0,
        threshold_source: str = "config",
        lexical_level: float | None = None,
    ):
        """``names``: never refuse a question that names an entity of the index (exact merge key, or rapidfuzz
        ratio >= ``name_cutoff`` for n-grams of 6+ characters) or a document title; needs ``index.graph`` (and
        ``index.names`` for the fuzzy part), else only the score decides. ``lexical_level``: never refuse a question
        whose best BM25 score over ``index.lexical`` reaches it (None, or an index without a lexical index: off)."""
        if not -1.0 <= float(threshold) <= 1.0:
            raise ValueError(f"the refusal threshold is a cosine, between -1 and 1; got {threshold}")
        if rule not in RULES:
            raise ValueError(f"unknown refusal rule {rule!r}; valid: {', '.join(RULES)}")
        self.index = index
        self.embedder = embedder
        self.threshold = float(threshold)
        self.rule = rule
        self.entity_family = entity_family
        self.relation_family = relation_family
        self.names = names and getattr(index, "graph", None) is not None
        self.name_cutoff = float(name_cutoff)
        self.threshold_source = threshold_source
        self._starts: tuple[TitleIndex, _TitleStarts] | None = None
        self.lexical = getattr(index, "lexical", None)
        self.lexical_level = float(lexical_level) if lexical_level is not None and self.lexical is not None else None
        index.family(entity_family)  # fail now, not on the first question
        index.family(relation_family)

    @classmethod
    def for_index(cls, index: Any, embedder: Embedder, cfg: Any) -> "RefusalGate":
        """The gate of ``cfg`` (a MultiStageConfig) over ``index``: the threshold calibrated for this index when
        its manifest has one for ``cfg.refusal_rule`` (and ``cfg.refusal_index_threshold``), else the configured
        ``refusal_threshold``."""
        threshold, source = cfg.refusal_threshold, "config"
        manifest = getattr(index, "manifest", None)
        calibrated = index_threshold(manifest, cfg.refusal_rule)
        if cfg.refusal_index_threshold and calibrated is not None:
            threshold, source = calibrated, "index"
        return cls(
            index,
            embedder,
            threshold,
            rule=cfg.refusal_rule,
            names=cfg.refusal_names,
            name_cutoff=cfg.refusal_name_cutoff,
            threshold_source=source,
            lexical_level=index_lexical_level(manifest) if cfg.refusal_lexical else None,
        )

    def score(self, question: str, keywords: Keywords | None = None, topic: str | None = None) -> RefusalScore:
        """``topic``: the question's topic entity when the caller gave one; an entity of the index is a name the
        question names, so it answers."""
        result = self.scores([question], [keywords])[0]
        if topic and result.named is None and self.names:
            key = normalize_name(topic)
            if self.index.graph.get_entities([key]):
                result = replace(result, named=(topic, key, 1.0))
        return result

    def scores(self, questions: Sequence[str], keywords: Sequence[Keywords | None]) -> list[RefusalScore]:
        """Scores of many questions with one embedding call and one search per family (calibration)."""
        if len(questions) != len(keywords):
            raise ValueError("one Keywords (or None) per question")
        started = time.perf_counter()
        use_keywords = self.rule in ("keywords", "min")
        use_question = self.rule in ("question", "min")
        queries: list[tuple[list[str], list[str]]] = []  # per question: (low texts, high texts) of the kw rule
        for q, kw in zip(questions, keywords):
            low = list(kw.low_level) if kw is not None and use_keywords else []
            high = list(kw.high_level) if kw is not None and use_keywords else []
            queries.append((low, high) if (low or high) else ([q], [q]))
        low_texts = unique_in_order(t for low, _ in queries for t in low)
        high_texts = unique_in_order(t for _, high in queries for t in high)
        if use_question:
            low_texts = unique_in_order([*low_texts, *questions])
            high_texts = unique_in_order([*high_texts, *questions])
        texts = unique_in_order([*low_texts, *high_texts])
        vectors = self.embedder.embed(texts) if texts else None
        row = {t: i for i, t in enumerate(texts)}
        low_best = self._best(self.entity_family, low_texts, vectors, row)
        high_best = self._best(self.relation_family, high_texts, vectors, row)
        named = [self._named(q) for q in questions]
        lexical = [self.lexical.best_score(q) if self.lexical is not None else None for q in questions]
        elapsed = (time.perf_counter() - started) / max(1, len(questions))
        out = []
        for q, (low, high), name, lex in zip(questions, queries, named, lexical):
            lo = _max_hit([(t, low_best.get(t)) for t in low])
            hi = _max_hit([(t, high_best.get(t)) for t in high])
            parts = [x[1] for x in (lo, hi) if x is not None]
            if not parts:
                kw_score, level = 0.0, "none"
            else:
                kw_score = float(sum(parts) / len(parts))
                if low == [q] and high == [q]:
                    level = "question"
                else:
                    level = "both" if len(parts) == 2 else ("low" if lo is not None else "high")
            q_score = None
            if use_question:
                q_parts = [h[0] for h in (low_best.get(q), high_best.get(q)) if h is not None]
                q_score = float(sum(q_parts) / len(q_parts)) if q_parts else 0.0
            if q_score is None:  # rule "keywords"
                score = kw_score
            elif self.rule == "question":
                score = q_score
            else:
                score = min(kw_score, q_score)
            out.append(
                RefusalScore(
                    score=float(score),
                    threshold=self.threshold,
                    basis=level if use_keywords else "question",
                    low_best=None if lo is None else lo[1],
                    high_best=None if hi is None else hi[1],
                    low_match=None if lo is None else (lo[0], lo[2]),
                    high_match=None if hi is None else (hi[0], hi[2]),
                    seconds=elapsed,
                    rule=self.rule,
                    keyword_score=kw_score if use_keywords else None,
                    question_score=q_score,
                    named=name,
                    threshold_source=self.threshold_source,
                    lexical=lex,
                    lexical_level=self.lexical_level,
                )
            )
        return out

    def _named(self, question: str) -> tuple[str, str, float] | None:
        """The best entity the question names (n-gram, key, score), or None."""
        if not self.names:
            return None
        found = named_entities(
            question, self.index.graph, getattr(self.index, "names", None), fuzzy_cutoff=self.name_cutoff
        )
        if not found:  # a document's title is a name of the corpus too ("Qinghe 17" heading its own page) ...
            titles = title_index(self.index.graph)
            found = named_entities(question, titles, None) or named_entities(question, self._title_starts(titles), None)
        return (found[0].text, found[0].key, found[0].score) if found else None

    def _title_starts(self, titles: TitleIndex) -> "_TitleStarts":
        """... and so is the start of one that reads as a name ("Kestrel-9" of "Kestrel-9 alloy"); built once."""
        if self._starts is None or self._starts[0] is not titles:
            self._starts = (titles, _TitleStarts(titles.chunks))
        return self._starts[1]

    def _best(
        self, family: str, texts: list[str], vectors: np.ndarray | None, row: dict[str, int]
    ) -> dict[str, tuple[float, str]]:
        """text -> (best cosine, key) in ``family``; texts with no hit (empty family) are left out."""
        if not texts or vectors is None:
            return {}
        index = self.index.family(family)
        if not getattr(index, "count", 1):
            return {}
        hits = index.search(vectors[[row[t] for t in texts]], 1)
        return {t: (float(h[0][1]), str(h[0][0])) for t, h in zip(texts, hits) if h}


def index_threshold(manifest: Any, rule: str) -> float | None:
    """The refusal threshold calibrated for ``rule`` when the index was built (its manifest), or None."""
    record = getattr(manifest, "refusal", None)
    if not record or record.get("rule") != rule:
        return None
    value = record.get("threshold")
    return float(value) if isinstance(value, (int, float)) and -1.0 <= value <= 1.0 else None


class _TitleStarts:
    """The leading words of document titles that read as a name on their own: two words or more, or one with a
    digit, as the names rule splits them ("kestrel 9" of "Kestrel-9 alloy"); quacks like a graph for
    :func:`named_entities`. A single plain word ("Introduction" of "Introduction to X") is no name."""

    def __init__(self, title_keys: Iterable[str]):
        self.starts: set[str] = set()
        for title in title_keys:
            words = _JOINERS.sub(" ", title).split()
            for n in range(1, len(words)):
                start = words[:n]
                if len(start) >= 2 or any(ch.isdigit() for ch in start[0]):
                    self.starts.add(" ".join(start))

    def get_entities(self, keys: Any) -> list[dict[str, str]]:
        return [{"key": k} for k in keys if k in self.starts]


_JOINERS = re.compile(r"[-_/·]")


def index_lexical_level(manifest: Any) -> float | None:
    """The lexical level calibrated when the index was built (its manifest), or None."""
    record = getattr(manifest, "refusal", None) or {}
    value = record.get("lexical_level")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _max_hit(pairs: list[tuple[str, tuple[float, str] | None]]) -> tuple[str, float, str] | None:
    best = None
    for text, hit in pairs:
        if hit is None:
            continue
        if best is None or hit[0] > best[1]:
            best = (text, hit[0], hit[1])
    return best


def refusal_message(language: str, prompts: MultiStagePromptSet | None = None) -> str:
    """The polite refusal in ``language`` (English when there is none for it); never empty."""
    return (prompts or load_multistage_prompts()).for_language(language).refusal


# --------------------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Calibration:
    """The threshold that maximises F1 of "answer" (a good question scoring >= threshold) on a labelled set.

    ``cut_score`` is the lowest accepted score at the best point of the curve; ``threshold`` is halfway
    between it and the next lower score of the set, so the same questions are accepted on the calibration
    set but a good question that scores a hair lower next time is not refused.
    """

    threshold: float
    precision: float
    recall: float
    f1: float
    cut_score: float
    n_good: int
    n_bad: int
    counts: dict[str, int] = field(default_factory=dict)  # tp/fn/fp/tn at threshold ("positive" = answered)
    curve: list[dict[str, float]] = field(default_factory=list)  # one point per candidate threshold, ascending

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "cut_score": self.cut_score,
            "n_good": self.n_good,
            "n_bad": self.n_bad,
            "counts": dict(self.counts),
            "curve": list(self.curve),
        }


def calibrate_threshold(good_scores: Sequence[float], bad_scores: Sequence[float]) -> Calibration:
    """Pick the refusal threshold from scores of in-domain ("good") and off-topic ("bad") questions.

    Uses ``sklearn.metrics.precision_recall_curve`` with "good" as the positive class; the chosen point is the
    best F1, ties broken by higher precision, then by the higher threshold (fewer answers to off-topic
    questions). Raises ValueError unless both lists are non-empty and finite.
    """
    from sklearn.metrics import precision_recall_curve  # noqa: PLC0415 - seconds to import: only when calibrating

    good = [float(s) for s in good_scores]
    bad = [float(s) for s in bad_scores]
    if not good or not bad:
        raise ValueError(f"calibration needs good and bad questions; got {len(good)} good and {len(bad)} bad")
    if not all(math.isfinite(s) for s in good + bad):
        raise ValueError("calibration scores must be finite numbers")
    y = np.array([1] * len(good) + [0] * len(bad))
    scores = np.array(good + bad, dtype=np.float64)
    precision, recall, thresholds = precision_recall_curve(y, scores)
    # precision/recall have one more entry than thresholds (the final point: recall 0, precision 1).
    p, r = precision[:-1], recall[:-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(p + r > 0, 2 * p * r / (p + r), 0.0)
    best = max(range(len(thresholds)), key=lambda i: (round(float(f1[i]), 12), float(p[i]), float(thresholds[i])))
    cut = float(thresholds[best])
    below = scores[scores < cut]
    threshold = (cut + float(below.max())) / 2 if below.size else cut
    curve = [
        {"threshold": float(t), "precision": float(pp), "recall": float(rr), "f1": float(ff)}
        for t, pp, rr, ff in zip(thresholds, p, r, f1)
    ]
    tp = sum(s >= threshold for s in good)
    fp = sum(s >= threshold for s in bad)
    counts = {"tp": tp, "fn": len(good) - tp, "fp": fp, "tn": len(bad) - fp}
    return Calibration(
        threshold=float(threshold),
        precision=float(p[best]),
        recall=float(r[best]),
        f1=float(f1[best]),
        cut_score=cut,
        n_good=len(good),
        n_bad=len(bad),
        counts=counts,
        curve=curve,
    )


def plot_calibration(cal: Calibration, path: str | Path, title: str = "Refusal gate calibration") -> Path:
    """PNG: the precision-recall curve with the chosen point, and F1 / precision / recall by threshold."""
    import matplotlib  # noqa: PLC0415 - loads when a plot is drawn

    matplotlib.use("Agg")  # no display; must precede pyplot
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    thr = [c["threshold"] for c in cal.curve]
    fig, (ax_pr, ax_t) = plt.subplots(1, 2, figsize=(10, 4.2))
    try:
        ax_pr.plot(
            [c["recall"] for c in cal.curve], [c["precision"] for c in cal.curve], marker=".", label="precision-recall"
        )
        ax_pr.scatter(
            [cal.recall],
            [cal.precision],
            s=90,
            color="tab:red",
            zorder=3,
            label=f"chosen: thr {cal.threshold:.3f}, F1 {cal.f1:.3f}",
        )
        ax_pr.set_xlabel("recall (good questions answered)")
        ax_pr.set_ylabel("precision")
        ax_pr.set_xlim(-0.02, 1.02)
        ax_pr.set_ylim(-0.02, 1.05)
        ax_pr.legend(loc="lower left")
        ax_pr.set_title(f"{cal.n_good} good / {cal.n_bad} bad questions")
        ax_t.plot(thr, [c["precision"] for c in cal.curve], marker=".", label="precision")
        ax_t.plot(thr, [c["recall"] for c in cal.curve], marker=".", label="recall")
        ax_t.plot(thr, [c["f1"] for c in cal.curve], marker=".", label="F1")
        ax_t.axvline(cal.threshold, color="tab:red", linestyle="--", label=f"threshold {cal.threshold:.3f}")
        ax_t.set_xlabel("score threshold (mean best cosine)")
        ax_t.set_ylim(-0.02, 1.05)
        ax_t.legend(loc="lower left")
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out, dpi=110)
    finally:
        plt.close(fig)
    return out
