"""What a query produces: frozen records from keywords to the final answer, plus their JSON form.

Channels name where a match came from, so a trace can say why a row is in the context:

* ``entity_name`` / ``entity_mix`` / ``relation_mix``: a keyword's vector matched that family;
* ``fuzzy``: a low-level keyword is a near-miss spelling of the entity name (rapidfuzz ratio);
* ``question:entity_mix`` / ``question:relation_mix`` / ``question:chunk``: the raw question's vector;
* entities that are endpoints of a matched relation, and relations that are 1-hop edges of a matched
  entity, carry no hits of their own: their ``origin`` says how they came in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping

from hxd2_ray.errors import HxdError
from hxd2_ray.ingest.formats import location_of

if TYPE_CHECKING:
    from hxd2_ray.graph.base import ChunkRow

SECTIONS = ("entities", "relations", "chunks")


class EmptyQuestionError(HxdError, ValueError):
    """The question is empty or only whitespace."""


@dataclass(frozen=True, slots=True)
class Keywords:
    low_level: tuple[str, ...] = ()  # entities, names, terms
    high_level: tuple[str, ...] = ()  # relations, themes
    parsed: bool = True  # False when nothing could be read from the reply (or the call failed)
    raw: str = ""  # the reply as the LLM gave it
    prompt_tokens: int = 0  # of the keyword call
    completion_tokens: int = 0
    # What the reply held that neither the question nor the index supports (hxd2_ray.retrieval.keyword_grounding)
    dropped: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.low_level and not self.high_level


@dataclass(frozen=True, slots=True)
class ChannelHit:
    channel: str
    query: str  # the keyword (or question) that matched
    score: float  # cosine for vector channels, ratio/100 for fuzzy


@dataclass(frozen=True, slots=True)
class ContextEntity:
    key: str
    name: str
    type: str
    description: str
    degree: int
    origin: Literal["matched", "endpoint"]  # a low-level match, or an endpoint of a matched relation
    score: float  # best hit score (0 for endpoints)
    hits: tuple[ChannelHit, ...] = ()


@dataclass(frozen=True, slots=True)
class ContextRelation:
    source_key: str
    target_key: str
    source_name: str
    target_name: str
    description: str
    keywords: tuple[str, ...]
    weight: float
    degree: int  # degree(source) + degree(target): LightRAG's edge rank
    origin: Literal["matched", "neighbor"]  # a high-level match, or a 1-hop edge of a matched entity
    score: float
    hits: tuple[ChannelHit, ...] = ()
    source_chunk_ids: tuple[str, ...] = ()

    @property
    def pair(self) -> tuple[str, str]:
        return (self.source_key, self.target_key)


@dataclass(frozen=True, slots=True)
class ContextChunk:
    id: str
    doc_id: str
    text: str
    header_path: str
    doc_title: str
    doc_source_id: str
    doc_source_path: str
    mentions: int  # how many context entities this chunk mentions
    first_entity_rank: int | None  # position of the best-ranked context entity it mentions
    score: float  # raw-question cosine (0 when the chunk channel did not find it)
    # Chunk ranking ``ppr`` (and the dense floor): the chunk's share of the walk's chunk mass, its dense probability
    # (softmax of the question cosines), and the larger of the two, which it is ranked by. None: not computed.
    graph_score: float | None = None
    dense_score: float | None = None
    rank_score: float | None = None
    rerank_score: float | None = None  # the reranker's score, when one reordered the chunk

    @classmethod
    def from_row(
        cls,
        row: ChunkRow,
        *,
        mentions: int = 0,
        first_entity_rank: int | None = None,
        score: float = 0.0,
        graph_score: float | None = None,
        dense_score: float | None = None,
        rank_score: float | None = None,
    ) -> ContextChunk:
        """The chunk the graph store read (text, header, its document's title and source), with how it ranked."""
        return cls(
            id=row["id"],
            doc_id=row["doc_id"],
            text=row["text"],
            header_path=row["header_path"],
            doc_title=row["doc_title"],
            doc_source_id=row["doc_source_id"],
            doc_source_path=row["doc_source_path"],
            mentions=mentions,
            first_entity_rank=first_entity_rank,
            score=score,
            graph_score=graph_score,
            dense_score=dense_score,
            rank_score=rank_score,
        )


@dataclass(frozen=True, slots=True)
class SectionTokens:
    """Tokens per prompt section, counted with the serving model's tokenizer."""

    instructions: int = 0
    question: int = 0
    entities: int = 0
    relations: int = 0
    chunks: int = 0

    @property
    def total(self) -> int:
        return self.instructions + self.question + self.entities + self.relations + self.chunks


@dataclass(frozen=True, slots=True)
class SectionCounts:
    entities: int = 0
    relations: int = 0
    chunks: int = 0


@dataclass(frozen=True, slots=True)
class Reference:
    """A document the answer's context drew on, with the chunks used from it (in context order)."""

    doc_id: str
    source_id: str
    title: str
    source_path: str
    chunk_ids: tuple[str, ...]
    # Where each chunk sits in its file ("page 2", "slide 3", "sheet Sales rows 2-21"; "" for text files),
    # aligned with chunk_ids: a reference reads "report.pdf, page 2".
    locations: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id,
            "source_id": self.source_id,
            "title": self.title,
            "source_path": self.source_path,
            "chunk_ids": list(self.chunk_ids),
            "locations": list(self.locations),
        }


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    question: str  # as retrieval used it (cut to the question budget)
    language: str  # "zh" or "en": the prompts' language
    keywords: Keywords
    entities: tuple[ContextEntity, ...]
    relations: tuple[ContextRelation, ...]
    chunks: tuple[ContextChunk, ...]
    tokens: SectionTokens
    input_cap: int  # most prompt tokens allowed: context length - answer reserve
    answer_max_tokens: int
    dropped: SectionCounts = SectionCounts()  # rows cut by the budgets, lowest-ranked first
    notices: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict, compare=False)
    # How the chunks were ranked: the ranking, its seeds and their weights, the walk's size, the reranker.
    ranking: dict[str, Any] = field(default_factory=dict, compare=False)

    def references(self) -> tuple[Reference, ...]:
        return references_of(self.chunks)

    def trace(self) -> dict[str, Any]:
        """Everything a person needs to see why the context looks as it does (JSON-ready)."""
        return {
            "question": self.question,
            "language": self.language,
            "keywords": {
                "low_level": list(self.keywords.low_level),
                "high_level": list(self.keywords.high_level),
                "parsed": self.keywords.parsed,
                "raw": self.keywords.raw,
                "dropped": list(self.keywords.dropped),
            },
            "entities": [
                {
                    "key": e.key,
                    "name": e.name,
                    "type": e.type,
                    "degree": e.degree,
                    "origin": e.origin,
                    "score": round(e.score, 4),
                    "hits": [_hit(h) for h in e.hits],
                }
                for e in self.entities
            ],
            "relations": [
                {
                    "source": r.source_key,
                    "target": r.target_key,
                    "source_name": r.source_name,
                    "target_name": r.target_name,
                    "weight": r.weight,
                    "degree": r.degree,
                    "origin": r.origin,
                    "score": round(r.score, 4),
                    "hits": [_hit(h) for h in r.hits],
                }
                for r in self.relations
            ],
            "chunks": [
                {
                    "rank": rank,
                    "id": c.id,
                    "doc_source_id": c.doc_source_id,
                    "title": c.doc_title,
                    "mentions": c.mentions,
                    "first_entity_rank": c.first_entity_rank,
                    "score": round(c.score, 4),
                    **{
                        name: round(v, 6)
                        for name, v in (
                            ("graph_score", c.graph_score),
                            ("dense_score", c.dense_score),
                            ("rank_score", c.rank_score),
                            ("rerank_score", c.rerank_score),
                        )
                        if v is not None
                    },
                }
                for rank, c in enumerate(self.chunks, 1)
            ],
            "ranking": self.ranking,
            "tokens": {
                "instructions": self.tokens.instructions,
                "question": self.tokens.question,
                "entities": self.tokens.entities,
                "relations": self.tokens.relations,
                "chunks": self.tokens.chunks,
                "total": self.tokens.total,
                "input_cap": self.input_cap,
            },
            "dropped": {
                "entities": self.dropped.entities,
                "relations": self.dropped.relations,
                "chunks": self.dropped.chunks,
            },
            "notices": list(self.notices),
            "timings_ms": {k: round(v, 2) for k, v in self.timings_ms.items()},
        }


@dataclass(frozen=True, slots=True)
class Answer:
    """The one answer type of every query mode: the text, what it rests on, and how it was reached.

    ``path`` says which part of the flow answered (``dual_level``, ``logic_form``, ``direct``, ``refused``,
    ``logic_form_failed``, ``llm_only``, a retrieval-only mode's name, ``graphflow``); ``fallback_reason`` says why
    the flow fell back to dual-level retrieval (None when it did not); ``trace`` is the JSON-ready record of the
    run (intent, refusal score, plan, each step's template and result, verifier decision, retrieval, timings).
    """

    question: str  # the generation question, as the prompt carried it
    text: str
    language: str
    references: tuple[Reference, ...]
    retrieval: RetrievalResult  # the context the prompt held (after the final fit); empty rows on other paths
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    notices: tuple[str, ...] = ()
    path: str = "dual_level"
    mode: str = "dual"
    fallback_reason: str | None = None
    refused: bool = False
    trace: Mapping[str, Any] = field(default_factory=dict, compare=False)
    candidates: tuple[str, ...] = ()  # ranked candidate answers, where the path ranks them (the graph walk)

    def to_dict(self, trace: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "question": self.question,
            "answer": self.text,
            "language": self.language,
            "path": self.path,
            "mode": self.mode,
            "fallback_reason": self.fallback_reason,
            "refused": self.refused,
            **({"candidates": list(self.candidates)} if self.candidates else {}),
            "references": [r.to_dict() for r in self.references],
            "notices": list(self.notices),
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "finish_reason": self.finish_reason,
            },
        }
        if trace:
            out["trace"] = dict(self.trace) if self.trace else {"retrieval": self.retrieval.trace()}
        return out


@dataclass(frozen=True, slots=True)
class QueryEvent:
    """One event of a streamed query: ``progress`` when a step of the flow finished (``step``, ``detail``),
    ``delta`` with answer text, then exactly one ``final`` carrying the whole :class:`Answer`."""

    kind: Literal["progress", "delta", "final"]
    text: str = ""
    step: str = ""
    detail: Mapping[str, Any] | None = None
    answer: Answer | None = None


def final_answer(events: Iterable[QueryEvent], on_delta: Callable[[str], None] | None = None) -> Answer:
    """The answer of the events' ``final``, each ``delta``'s text handed to ``on_delta`` on the way."""
    final: Answer | None = None
    for event in events:
        if event.kind == "delta" and on_delta is not None:
            on_delta(event.text)
        elif event.kind == "final":
            final = event.answer
    assert final is not None
    return final


def references_of(chunks: tuple[ContextChunk, ...] | list[ContextChunk]) -> tuple[Reference, ...]:
    """One reference per document, in the order its first chunk appears in the context."""
    order: list[str] = []
    by_doc: dict[str, list[ContextChunk]] = {}
    for c in chunks:
        doc = c.doc_id or c.id
        if doc not in by_doc:
            order.append(doc)
            by_doc[doc] = []
        by_doc[doc].append(c)
    refs = []
    for doc in order:
        first = by_doc[doc][0]
        refs.append(
            Reference(
                doc_id=first.doc_id,
                source_id=first.doc_source_id,
                title=first.doc_title,
                source_path=first.doc_source_path,
                chunk_ids=tuple(c.id for c in by_doc[doc]),
                locations=tuple(location_of(c.doc_source_path, c.header_path) for c in by_doc[doc]),
            )
        )
    return tuple(refs)


def _hit(h: ChannelHit) -> dict[str, Any]:
    return {"channel": h.channel, "query": h.query, "score": round(h.score, 4)}
