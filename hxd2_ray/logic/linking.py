"""Entity linking: a name from a plan -> entity keys (exact key, then rapidfuzz over entity names, then vectors)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rapidfuzz import fuzz, process

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.embedding.base import Embedder
from hxd2_ray.extraction.merge import entity_key, normalize_name
from hxd2_ray.graph.templates import LF_ENTITY_NAMES
from hxd2_ray.logic.queries import GraphQueries
from hxd2_ray.vectors.base import VectorIndex

__all__ = ["EntityLinker", "LinkResult"]


@dataclass(frozen=True, slots=True)
class LinkResult:
    name: str
    keys: tuple[str, ...]
    method: str  # exact | fuzzy | vector | none
    score: float = 0.0


def _clean_name(name: str) -> str:
    name = name.strip()
    for opener, closer in (("[", "]"), ('"', '"'), ("'", "'"), ("“", "”"), ("《", "》"), ("「", "」")):
        if len(name) >= 2 and name.startswith(opener) and name.endswith(closer):
            name = name[1:-1].strip()
    return name


class EntityLinker:
    """Literal name -> entity keys: exact key, then rapidfuzz over entity names, then vector search.

    * exact: ``entity_key(name)`` (the merge stage's normaliser) is a node key;
    * fuzzy: best ``fuzz.ratio`` over the normalised names of all entities, >= ``fuzzy_cutoff`` (the name
      list is read once, paged, through the ``lf_entity_names`` template; skipped above ``max_fuzzy_names``,
      known before any page is read when ``entity_count`` is given: at 10M entities a process would otherwise page
      half a million names through the graph engine, on its first name that is not a key, only to drop them);
    * vector: the name's embedding against the entity_name family (``name_index``, keys = entity keys),
      best hit with cosine >= ``vector_threshold``.
    """

    def __init__(
        self,
        graph: GraphQueries,
        *,
        embedder: Embedder | None = None,
        name_index: VectorIndex | None = None,
        key_fn: Callable[[str], str] | None = None,
        fuzzy_cutoff: float = 90.0,
        vector_threshold: float = 0.8,
        max_fuzzy_names: int = 500_000,
        page_size: int = 50_000,
        entity_count: int | None = None,
    ):
        self.graph = graph
        self.embedder = embedder
        self.name_index = name_index
        cfg = ExtractionConfig()
        self.key_fn = key_fn or (lambda name: entity_key(name, cfg))
        self.fuzzy_cutoff = fuzzy_cutoff
        self.vector_threshold = vector_threshold
        self.max_fuzzy_names = max_fuzzy_names
        self.page_size = page_size
        self.entity_count = entity_count  # the index's entities (its manifest's count), when the caller knows it
        self._names: tuple[list[str], list[str]] | None = None  # (keys, normalised names)
        self._cache: dict[str, LinkResult] = {}

    def _name_table(self) -> tuple[list[str], list[str]]:
        if self._names is None and self.entity_count is not None and self.entity_count > self.max_fuzzy_names:
            self._names = ([], [])  # too many names to scan per query; the vector stage covers it
        if self._names is None:
            keys: list[str] = []
            names: list[str] = []
            skip = 0
            while len(keys) <= self.max_fuzzy_names:
                rows = self.graph.run_template(LF_ENTITY_NAMES, {"skip": skip, "limit": self.page_size})
                for r in rows:
                    keys.append(r["key"])
                    names.append(normalize_name(r["name"] or r["key"]))
                if len(rows) < self.page_size:
                    break
                skip += self.page_size
            if len(keys) > self.max_fuzzy_names:
                keys, names = [], []  # too many names to scan per query; the vector stage covers it
            self._names = (keys, names)
        return self._names

    def link(self, name: str) -> LinkResult:
        cleaned = _clean_name(name)
        if cleaned in self._cache:
            return self._cache[cleaned]
        result = self._link(cleaned)
        self._cache[cleaned] = result
        return result

    def _link(self, name: str) -> LinkResult:
        if not name:
            return LinkResult(name, (), "none")
        key = self.key_fn(name)
        if key and self.graph.get_entities([key]):
            return LinkResult(name, (key,), "exact", 100.0)
        if self.fuzzy_cutoff <= 100:
            keys, names = self._name_table()
            if names:
                hit = process.extractOne(normalize_name(name), names, scorer=fuzz.ratio, score_cutoff=self.fuzzy_cutoff)
                if hit is not None:
                    _, score, idx = hit
                    return LinkResult(name, (keys[idx],), "fuzzy", float(score))
        if self.embedder is not None and self.name_index is not None:
            hits = self.name_index.search(self.embedder.embed([name]), 1)[0]
            if hits and hits[0][1] >= self.vector_threshold:
                return LinkResult(name, (hits[0][0],), "vector", float(hits[0][1]))
        return LinkResult(name, (), "none")
