"""Where a GraphFlow walk starts: the question's topic entity, linked with the pipeline's own linkers.

* A topic given as a field of the question (``topic=``: a benchmark's topic entity, ``hxd2 query --topic``, the
  API's ``topic``) is linked exactly as if the question had carried it in brackets (:func:`mark_topic`), so a
  question scores the same whether its topic came in brackets or beside the text.
* A ``[bracketed]`` name (MetaQA marks its topic entity so) goes through the logic form's
  :class:`~hxd2_ray.logic.linking.EntityLinker` (exact key, fuzzy name, then the entity_name vectors).
* Otherwise the names the question spells out, found the way the ``ppr`` ranking and the refusal gate find them
  (:func:`~hxd2_ray.extraction.names.named_entities`: name-like word n-grams looked up exactly among the entity
  keys, longest first; a leading "the" may belong to the name, as in MetaQA's film titles), the best
  ``max_start_nodes`` kept: a typed question ("who directed The Public Eye") starts where its bracketed form
  would.
* Failing that, the question itself is matched the way dual-level retrieval's question channel matches it: its
  embedding against the entity_name and entity_mix families, hits at or above ``link_threshold`` ranked with
  :func:`~hxd2_ray.retrieval.ranking.rank_matches`, the best ``max_start_nodes`` kept.

This module only chooses between those linkers and maps keys to walk-graph nodes. The policy is conditioned on
``policy_text``: the question with each bracketed (or spelled-out) name replaced by :data:`TOPIC_PLACEHOLDER`
(``mask_topic``), so what it learns is the question's shape, not one entity's name.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.extraction.names import named_entities
from hxd2_ray.graphflow.walk_graph import WalkGraph
from hxd2_ray.logic.linking import EntityLinker
from hxd2_ray.logic.queries import GraphQueries
from hxd2_ray.retrieval.ranking import rank_matches, vector_hits

__all__ = ["LinkedQuestion", "StartLinker", "StartNode", "TOPIC_PLACEHOLDER", "mark_topic", "plain_question"]

TOPIC_PLACEHOLDER = "[entity]"
_BRACKETS = re.compile(r"\[([^\[\]]+)\]")


def plain_question(question: str) -> str:
    """The question without the brackets around names (what a person would type)."""
    return " ".join(_BRACKETS.sub(lambda m: m.group(1), question).split())


def mark_topic(question: str, topic: str | None) -> str:
    """``question`` with its topic entity in brackets, the form MetaQA's files use: the first occurrence of
    ``topic`` (case-insensitive, whitespace-normalised) is bracketed. A question that already has brackets, or no
    topic, is returned as it is; a topic the text does not spell out is left out of the text (the linker then links
    the topic by name and conditions the policy on the plain question)."""
    name = " ".join(str(topic or "").split())
    if not name or _BRACKETS.search(question):
        return question
    text = " ".join(question.split())
    at = text.lower().find(name.lower())
    if at < 0:
        return text
    return f"{text[:at]}[{text[at : at + len(name)]}]{text[at + len(name) :]}"


def bracketed_names(question: str) -> list[str]:
    return [m.group(1).strip() for m in _BRACKETS.finditer(question) if m.group(1).strip()]


NAME_MAX_WORDS = 10  # film titles run long ("Harry Potter and the Prisoner of Azkaban")
_ARTICLE = "the "


class _GraphKeys:
    """The walk graph's entity keys as the lookup :func:`named_entities` reads (``get_entities``); a key also
    answers for the name with a leading "the" (an n-gram never starts with a function word)."""

    def __init__(self, graph: WalkGraph):
        self.graph = graph

    def node(self, key: str) -> int | None:
        node = self.graph.node_of(key)
        if node is None and not key.startswith(_ARTICLE):
            node = self.graph.node_of(_ARTICLE + key)
        return node if node is not None and node < self.graph.n_entities else None

    def get_entities(self, keys: Sequence[str]) -> list[dict[str, str]]:
        return [{"key": k} for k in keys if self.node(k) is not None]


@dataclass(frozen=True, slots=True)
class StartNode:
    node: int
    key: str
    name: str
    method: str  # exact | fuzzy | vector (a bracketed name), question:name | question:entity_name | question:entity_mix
    score: float
    mention: str  # the bracketed or spelled-out name, or "" when linked from the whole question

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LinkedQuestion:
    question: str  # brackets removed
    policy_text: str  # what conditions the policy
    starts: tuple[StartNode, ...]
    reason: str = ""  # why there is no start node

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "policy_text": self.policy_text,
            "starts": [s.to_dict() for s in self.starts],
            "reason": self.reason,
        }


class StartLinker:
    """Start nodes of questions over one walk graph.

    ``entity_linker``: an :class:`~hxd2_ray.logic.linking.EntityLinker` over the index (for bracketed names).
    ``families``: the index's vector families (``entity_name``/``entity_mix``, whichever exist) and ``embedder``
    the index's embedder (for the question channel); without them a question without brackets links nothing.
    """

    def __init__(
        self,
        graph: WalkGraph,
        *,
        entity_linker: Any = None,
        families: dict[str, Any] | None = None,
        embedder: Any = None,
        mask_topic: bool = True,
        max_start_nodes: int = 3,
        link_threshold: float = 0.5,
        search_k: int = 30,
    ):
        self.graph = graph
        self.entity_linker = entity_linker
        self.families = dict(families or {})
        self.embedder = embedder
        self.mask_topic = mask_topic
        self.max_start_nodes = max_start_nodes
        self.link_threshold = link_threshold
        self.search_k = search_k
        self._keys = _GraphKeys(graph)

    @classmethod
    def for_index(cls, index: Any, graph: WalkGraph, embedder: Any, cfg: Any) -> "StartLinker":
        """Over an open index with its own embedder; ``cfg``: :class:`~hxd2_ray.config.GraphFlowConfig`."""
        families = {name: ix for name in ("entity_name", "entity_mix") if (ix := index.families.get(name)) is not None}
        linker = EntityLinker(
            GraphQueries(index.graph),
            embedder=embedder if "entity_name" in families else None,
            name_index=families.get("entity_name"),
        )
        return cls(
            graph,
            entity_linker=linker,
            families=families,
            embedder=embedder,
            mask_topic=cfg.mask_topic,
            max_start_nodes=cfg.max_start_nodes,
            link_threshold=cfg.link_threshold,
        )

    def policy_text(self, question: str) -> str:
        if self.mask_topic:
            return " ".join(_BRACKETS.sub(TOPIC_PLACEHOLDER, question).split())
        return plain_question(question)

    def link(self, question: str, topic: str | None = None) -> LinkedQuestion:
        """Start nodes of ``question``; ``topic``: the question's topic entity when the caller knows it (it is the
        start, whatever the text names)."""
        given = " ".join(str(topic or "").split())
        if given:
            question = mark_topic(question, given)
        names = bracketed_names(question)
        plain = plain_question(question)
        if given and given.lower() not in {n.lower() for n in names}:
            # the text does not spell the topic out: it is still the start; the policy sees the plain question
            starts = self._link_names([given])
            reason = "" if starts else f"no entity of the index matches the topic {given!r}"
            return LinkedQuestion(plain, plain, tuple(starts), reason)
        if names:
            starts = self._link_names(names)
            reason = "" if starts else f"no entity of the index matches {', '.join(map(repr, names))}"
            return LinkedQuestion(plain, self.policy_text(question), tuple(starts), reason)
        named = self._link_named(plain)
        if named:
            policy = plain
            if self.mask_topic:
                for mention in {s.mention for s in named}:
                    policy = re.sub(rf"(?i)(?:\bthe\s+)?{re.escape(mention)}", TOPIC_PLACEHOLDER, policy, count=1)
            return LinkedQuestion(plain, policy, tuple(named))
        starts = self._link_question(plain)
        reason = (
            ""
            if starts
            else (
                f"no entity vector scores >= {self.link_threshold} against the question"
                if self._can_link_question()
                else "no [topic entity] in the question and no entity vectors to match it against"
            )
        )
        return LinkedQuestion(plain, plain, tuple(starts), reason)

    def _link_names(self, names: Sequence[str]) -> list[StartNode]:
        out: dict[int, StartNode] = {}
        for name in names:
            if self.entity_linker is not None:
                result = self.entity_linker.link(name)
                pairs = [(k, result.method, float(result.score)) for k in result.keys]
            else:  # no index linker (synthetic graphs): exact key only
                pairs = [(normalize_name(name), "exact", 100.0)]
            for key, method, score in pairs:
                node = self.graph.node_of(key)
                if node is not None and node not in out:
                    out[node] = StartNode(node, key, self.graph.names[node], method, score, name)
        return list(out.values())

    def _link_named(self, question: str) -> list[StartNode]:
        out: list[StartNode] = []
        for match in named_entities(question, self._keys, None, max_words=NAME_MAX_WORDS):
            node = self._keys.node(match.key)
            if node is None or any(s.node == node for s in out):
                continue
            out.append(
                StartNode(node, self.graph.keys[node], self.graph.names[node], "question:name", match.score, match.text)
            )
            if len(out) == self.max_start_nodes:
                break
        return out

    def _can_link_question(self) -> bool:
        return self.embedder is not None and bool(self.families)

    def _link_question(self, question: str) -> list[StartNode]:
        if not self._can_link_question():
            return []
        vector = np.asarray(self.embedder.embed([question]), dtype=np.float32)
        hits = []
        for name, family in self.families.items():
            hits += vector_hits(
                family.search(vector, self.search_k), [question], f"question:{name}", self.link_threshold
            )
        out = []
        for match in rank_matches(hits, self.max_start_nodes * 4):
            node = self.graph.node_of(str(match.key))
            if node is None:
                continue
            out.append(
                StartNode(node, str(match.key), self.graph.names[node], match.hits[0].channel, float(match.score), "")
            )
            if len(out) == self.max_start_nodes:
                break
        return out
