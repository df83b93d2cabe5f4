"""Facts read off the graph's edges, numbers read off entity names, and plan predicates matched to graph ones.

Graph conventions the logic form relies on (see :mod:`hxd2_ray.logic.metaqa`):

* ``RELATED`` is stored once per unordered pair, so an edge's direction is not in the graph structure. A
  directed fact ``S --p--> O`` is recorded as a line ``"S --p--> O"`` in the edge description (one line per
  fact; ``p`` is also one of the edge's keywords). Edges without such lines (LLM-extracted edges) are
  undirected facts whose predicates are their keywords.
* Numbers are value entities: "Zhefu 802" --height_cm--> "85". :func:`parse_number` reads the number from the
  entity name ("85", "85 cm", "1,200", "7.5").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from rapidfuzz import fuzz

from hxd2_ray.embedding.base import Embedder
from hxd2_ray.extraction.merge import normalize_name

__all__ = ["ARROW_FMT", "Fact", "PredicateMatcher", "directed_fact_line", "edge_facts", "parse_number"]

ARROW_FMT = "{s} --{p}--> {o}"


def directed_fact_line(subject: str, predicate: str, obj: str) -> str:
    """The description line that records a directed fact on an (unordered) RELATED edge."""
    return ARROW_FMT.format(s=subject, p=predicate, o=obj)


@dataclass(frozen=True, slots=True)
class Fact:
    subject_key: str
    subject_name: str
    predicate: str  # "" when the edge has no keywords
    object_key: str
    object_name: str
    directed: bool  # False: an edge without direction lines; subject/object are just the two ends
    context: str = ""  # the edge description, for undirected edges (predicate matching, evidence)

    def other(self, key: str) -> tuple[str, str]:
        return (self.object_key, self.object_name) if key == self.subject_key else (self.subject_key, self.subject_name)

    def text(self) -> str:
        if self.directed:
            return directed_fact_line(self.subject_name, self.predicate, self.object_name)
        label = self.predicate or "related"
        ctx = f": {self.context[:160]}" if self.context else ""
        return f"{self.subject_name} --{label}-- {self.object_name}{ctx}"


def _same_entity(part: str, key: str, name: str) -> bool:
    norm = normalize_name(part)
    return norm == key or norm == normalize_name(name)


def edge_facts(
    a_key: str, a_name: str, b_key: str, b_name: str, description: str, keywords: Sequence[str]
) -> list[Fact]:
    """The facts one RELATED edge carries: directed ones from ``"S --p--> O"`` description lines whose ends
    are this edge's entities, undirected ones for keywords without such a line."""
    description = description or ""
    keywords = [k for k in (keywords or []) if k]
    lines = description.splitlines()
    facts: list[Fact] = []
    for kw in keywords:
        sep = f" --{kw}--> "
        directed = []
        for line in lines:
            parts = line.split(sep)
            if len(parts) != 2:
                continue
            left, right = parts
            if _same_entity(left, a_key, a_name) and _same_entity(right, b_key, b_name):
                directed.append(Fact(a_key, a_name, kw, b_key, b_name, True))
            elif _same_entity(left, b_key, b_name) and _same_entity(right, a_key, a_name):
                directed.append(Fact(b_key, b_name, kw, a_key, a_name, True))
        facts.extend(dict.fromkeys(directed))
        if not directed:
            facts.append(Fact(a_key, a_name, kw, b_key, b_name, False, description))
    if not keywords:
        facts.append(Fact(a_key, a_name, "", b_key, b_name, False, description))
    return facts


_NUMBER_RE = re.compile(
    r"^\s*(?P<num>[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?|[+-]?\.\d+)"
    r"\s*(?P<unit>%|[A-Za-z°]{1,6}\.?|[\u4e00-\u9fff]{1,3})?\s*$"
)


def parse_number(text: Any) -> int | float | None:
    """A number written as an entity name: "85", "-3", "1,200", "7.5", "85 cm", "120天"; None otherwise."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return text if math.isfinite(text) else None
    if not isinstance(text, str):
        return None
    m = _NUMBER_RE.match(text)
    if not m:
        return None
    raw = m.group("num").replace(",", "")
    try:
        if re.fullmatch(r"[+-]?\d+", raw):
            return int(raw)
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------------
# Predicates


def _norm_predicate(text: str) -> str:
    return normalize_name(re.sub(r"[_\-]+", " ", text))


_PREDICATE_STOPWORDS = frozenset("a an the by of in on at to is was has have had for with from as".split())
_SUFFIXES = ("ations", "ation", "ings", "ing", "ors", "ers", "ies", "ed", "or", "er", "en", "es", "s")


def _stem_tokens(norm: str) -> str:
    """Crude English stemming of a normalised predicate, stopwords dropped: "director" and "directed by"
    both become "direct", "starred actors" -> "starr act". Non-Latin tokens are kept as they are."""
    out = []
    for tok in norm.split():
        if tok in _PREDICATE_STOPWORDS:
            continue
        if tok.isascii() and tok.isalpha():
            for suf in _SUFFIXES:
                if len(tok) - len(suf) >= 3 and tok.endswith(suf):
                    tok = tok[: -len(suf)]
                    break
        out.append(tok)
    return " ".join(out)


class PredicateMatcher:
    """How well a plan predicate ("director", "directed by") names a graph predicate ("directed_by"), 0..100.

    Normalised equality is 100; otherwise rapidfuzz WRatio (which scores a predicate contained in a longer
    one at 90), and, with an embedder, 100 * cosine of the two strings. Edges without predicates (LLM-extracted
    edges with empty keywords) are matched against their description with partial_ratio.
    """

    def __init__(self, embedder: Embedder | None = None, cutoff: float = 75.0):
        self.embedder = embedder
        self.cutoff = cutoff
        self._vec: dict[str, np.ndarray] = {}

    def _embed(self, texts: Iterable[str]) -> None:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vec]
        if missing and self.embedder is not None:
            for t, v in zip(missing, self.embedder.embed(missing)):
                self._vec[t] = np.asarray(v, dtype=np.float32)

    def score(self, wanted: str, predicate: str, context: str = "") -> float:
        w = _norm_predicate(wanted)
        if not w:
            return 0.0
        if predicate:
            p = _norm_predicate(predicate)
            if w == p:
                return 100.0
            best = float(fuzz.WRatio(w, p))
            ws, ps = _stem_tokens(w), _stem_tokens(p)
            if ws and ps:
                best = max(best, float(fuzz.token_set_ratio(ws, ps)))
            if self.embedder is not None:
                self._embed([w, p])
                best = max(best, 100.0 * float(np.dot(self._vec[w], self._vec[p])))
            return best
        if context:
            return 0.9 * float(fuzz.partial_ratio(w, normalize_name(context)))
        return 0.0

    def select(self, wanted: str | None, facts: Sequence[Fact]) -> list[Fact]:
        """Facts whose predicate matches ``wanted`` (all when None): exact matches when there are any,
        else everything at or above the cutoff."""
        if wanted is None or not wanted.strip():
            return list(facts)
        scored = [(self.score(wanted, f.predicate, "" if f.directed else f.context), f) for f in facts]
        exact = [f for s, f in scored if s >= 100.0]
        if exact:
            return exact
        return [f for s, f in scored if s >= self.cutoff]
