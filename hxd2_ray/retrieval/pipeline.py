"""The query pipeline: question -> keywords -> dual-level matches -> graph context -> budgeted prompt -> answer.

The dual-level part of the query flow (:mod:`hxd2_ray.retrieval.flow`, built by
:func:`hxd2_ray.wiring.build_pipeline` for every mode and entry point). Retrieval and generation are separate calls
(:meth:`QueryPipeline.retrieve`, :meth:`QueryPipeline.generate`) so the flow can retrieve with one question text
and generate with another (the reference retrieves on the bare stem and generates with instruction + stem), or
build its own context and reuse generation.

Dual-level retrieval (paper 3.2.2; reference ``KnowledgeRetriever.explore``, with its bug fixed: the
reference extracted keywords and then searched with the raw question):

* low-level keywords -> entities through the entity_name and entity_mix vector families and fuzzy names;
* high-level keywords -> relations through the relation_mix family;
* the raw question -> entity_mix, relation_mix and chunk families, as one more channel;
* matched entities bring their 1-hop edges, matched relations their endpoints, entities their chunks.

Every graph access goes through :class:`~hxd2_ray.graph.base.GraphStore` with entity keys taken from the
index itself, and the store binds them as parameters: question text is never part of a query.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.config import RetrievalConfig
from hxd2_ray.embedding.base import Embedder
from hxd2_ray.errors import BackendError
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.extraction.names import named_entities
from hxd2_ray.graph.base import unique_in_order
from hxd2_ray.index_store.manifest import check_compatible
from hxd2_ray.llm.base import LLMClient, LLMRequest, Message
from hxd2_ray.llm.streaming import StreamOutcome, complete_one, stream_completion
from hxd2_ray.rerank.base import Reranker
from hxd2_ray.retrieval.budget import (
    DEFAULT_CONTEXT_LENGTH,
    ContextLimits,
    context_limits,
    cut_to_tokens,
    fit_rows,
    fit_total,
    table_tokens,
)
from hxd2_ray.retrieval.index import DUAL_LEVEL_FAMILIES, OpenIndex
from hxd2_ray.retrieval.keyword_grounding import ground_keywords
from hxd2_ray.retrieval.keywords import keyword_request, parse_keywords
from hxd2_ray.retrieval.ppr import EdgeWeights, PropagationGraph, graph_for
from hxd2_ray.retrieval.query_prompts import QueryLanguagePrompts, QueryPromptSet, load_query_prompts
from hxd2_ray.retrieval.ranking import (
    assemble_entities,
    assemble_relations,
    dense_first,
    rank_chunks,
    rank_matches,
    relation_pair_of_key,
    vector_hits,
)
from hxd2_ray.retrieval.render import (
    HEADERS,
    answer_messages,
    answer_request,
    chunk_rows,
    entity_rows,
    prompt_text,
    relation_rows,
)
from hxd2_ray.retrieval.results import (
    SECTIONS,
    Answer,
    ChannelHit,
    ContextChunk,
    ContextEntity,
    ContextRelation,
    EmptyQuestionError,
    Keywords,
    QueryEvent,
    RetrievalResult,
    SectionCounts,
    SectionTokens,
    final_answer,
    references_of,
)
from hxd2_ray.retrieval.walk_ranking import Matches, walk_rank

__all__ = ["QueryPipeline"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Fitted:
    entities: tuple[ContextEntity, ...]
    relations: tuple[ContextRelation, ...]
    chunks: tuple[ContextChunk, ...]
    tokens: SectionTokens
    dropped: SectionCounts
    messages: tuple[Message, ...]


def drop_copied_keywords(
    keywords: Keywords, question: str, prompts: QueryLanguagePrompts
) -> tuple[Keywords, list[str]]:
    """Keywords the model copied from the keyword prompt's own example: in the prompt, not in the question.

    A small model often answers with the example's keywords ("Rachel Osei", "Bergen", "Halden Institute") for an
    unrelated question; matched against the index they pull in whatever shares those names.
    """
    prompt = normalize_name(prompts.keywords_system + "\n" + prompts.keywords_user)
    asked = normalize_name(question)
    copied = [
        k
        for k in (*keywords.low_level, *keywords.high_level)
        if (n := normalize_name(k)) and n in prompt and n not in asked
    ]
    if not copied:
        return keywords, []
    keep = set(copied)
    return replace(
        keywords,
        low_level=tuple(k for k in keywords.low_level if k not in keep),
        high_level=tuple(k for k in keywords.high_level if k not in keep),
    ), copied


class QueryPipeline:
    """Dual-level retrieval and grounded answers over one open index. No Ray; safe to share across threads."""

    def __init__(
        self,
        index: OpenIndex,
        llm: LLMClient,
        embedder: Embedder,
        cfg: RetrievalConfig,
        prompts: QueryPromptSet | None = None,
        reranker: Reranker | None = None,  # wiring.build_reranker; None: no reranking
    ) -> None:
        # The embedder actually passed must be the one the index was built with, not just the configured one.
        check_compatible(index.manifest, embedder.model_id, embedder.dim)
        for family in DUAL_LEVEL_FAMILIES:
            index.family(family)  # fail now, not on the first question
        # Per-store caches the graph reads resolve against (Kùzu: node columns, one scan per table, kept
        # for the store's lifetime; idempotent), loaded now so the first question does not pay for them.
        warm = getattr(index.graph, "warm", None)
        if callable(warm):
            warm()
        self.index = index
        self.llm = llm
        self.embedder = embedder
        self.cfg = cfg
        self.prompts = prompts or load_query_prompts()
        context_length = cfg.context_length or llm.max_model_len or DEFAULT_CONTEXT_LENGTH
        self.limits: ContextLimits = context_limits(
            int(context_length), cfg.answer_reserve_tokens, cfg.answer_max_tokens
        )
        self._instruction_tokens: dict[str, int] = {}
        self.reranker = reranker
        # The walk graph of the ``ppr`` ranking, built once per open index (shared by every pipeline over it).
        self._walk: PropagationGraph | None = None
        if cfg.chunk_ranking == "ppr":
            self._walk = graph_for(
                index.graph,
                EdgeWeights(
                    mention=cfg.ppr_mention_weight,
                    related=cfg.ppr_related_weight,
                    synonym=cfg.ppr_synonym_weight,
                    title=cfg.ppr_title_weight,
                    mention_idf=cfg.ppr_mention_idf,
                ),
            )
            if self._walk is None:
                log.warning(
                    "retrieval.chunk_ranking=ppr needs the graph's read structures, and this index's graph is read "
                    "through Kùzu (retrieval.resident_graph=off, or an index written before them: run hxd2 index "
                    "reindex-reads), so chunks are ranked 'fused'"
                )

    # ------------------------------------------------------------------------------------ public

    def retrieve(self, question: str, topic: str | None = None) -> RetrievalResult:
        """Keywords, matches and the budgeted context for ``question`` (one LLM call: keyword extraction);
        ``topic``: the question's topic entity when the caller knows it, matched first when the index has it."""
        timings: dict[str, float] = {}
        started = clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = (now - clock) * 1000
            clock = now

        q, language, notices = self._prepare_question(question)
        prompts = self.prompts.for_language(language)
        lap("question")
        keywords, kw_notices = self.extract_keywords(q, prompts)
        notices += kw_notices
        lap("keywords")
        matches = self._match(keywords, q, timings, topic)
        clock = time.perf_counter()
        ranking: dict[str, Any] = {}
        entities, relations, chunks = self._expand(matches, q, ranking, timings)
        lap("graph")
        if ranking.get("notice"):
            notices.append(ranking["notice"])
        fitted = self._fit(q, language, entities, relations, chunks)
        lap("budget")
        if self.limits.notice:
            notices.append(self.limits.notice)
        timings["total"] = (time.perf_counter() - started) * 1000
        return RetrievalResult(
            question=q,
            language=language,
            keywords=keywords,
            entities=fitted.entities,
            relations=fitted.relations,
            chunks=fitted.chunks,
            tokens=fitted.tokens,
            input_cap=self.limits.input_cap,
            answer_max_tokens=self.limits.answer_max_tokens,
            dropped=fitted.dropped,
            notices=tuple(notices),
            timings_ms=timings,
            ranking=ranking,
        )

    def generate(
        self,
        question: str | None,
        context: RetrievalResult,
        stream: bool = False,
        on_delta: Callable[[str], None] | None = None,
    ) -> Answer:
        """Answer ``question`` (default: the retrieval question) from ``context``.

        With ``stream`` the reply is produced through the streaming path and each delta handed to ``on_delta``.
        """
        return final_answer(self._generate_events(question, context, stream=stream), on_delta)

    def generate_stream(self, question: str | None, context: RetrievalResult) -> Iterator[QueryEvent]:
        return self._generate_events(question, context, stream=True)

    def extract_keywords(self, question: str, prompts: QueryLanguagePrompts) -> tuple[Keywords, list[str]]:
        cfg = self.cfg
        request = keyword_request(question, prompts, cfg.keyword_max_tokens, cfg.temperature, cfg.max_keywords)
        try:
            response = complete_one(self.llm, request)
        except BackendError as exc:
            return Keywords(parsed=False), [f"keyword extraction failed ({exc}); searched with the question only"]
        keywords = replace(
            parse_keywords(response.text, cfg.max_keywords),
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
        )
        if not keywords.parsed:
            return keywords, ["the keyword reply could not be read; searched with the question only"]
        notices = []
        if cfg.keyword_grounding == "question_or_index":
            prompt = prompts.keywords_system + "\n" + prompts.keywords_user
            keywords, dropped = ground_keywords(keywords, question, prompt, self.index.names, cfg.keyword_name_score)
            if dropped:
                notices.append(
                    f"dropped {len(dropped)} keywords that neither the question nor the index's names support: "
                    + ", ".join(dropped)
                )
        elif cfg.drop_prompt_keywords:
            keywords, copied = drop_copied_keywords(keywords, question, prompts)
            if copied:
                notices.append(f"dropped {len(copied)} keywords copied from the prompt's example: " + ", ".join(copied))
        if keywords.empty:
            return keywords, [*notices, "the keyword reply held no keywords; searched with the question only"]
        return keywords, notices

    # --------------------------------------------------------------------------------- question

    def _prepare_question(self, question: str) -> tuple[str, str, list[str]]:
        if question is None or not str(question).strip():
            raise EmptyQuestionError("the question is empty; ask something")
        text = str(question).strip()
        language = detect_language(text)
        prompts = self.prompts.for_language(language)
        # The question must fit next to the instructions even when the tables get nothing.
        room = self.limits.input_cap - self._instructions(language, prompts)
        budget = max(1, min(self.cfg.question_budget_tokens, room))
        count = self.llm.count_tokens
        cut, was_cut = cut_to_tokens(text, budget, count, prompts.question_cut_marker)
        notices = []
        if was_cut:
            notices.append(
                f"the question was cut from {len(text):,} characters ({count(text):,} tokens) to "
                f"{count(cut):,} tokens (question budget {budget})"
            )
        return cut, language, notices

    def _instructions(self, language: str, prompts: QueryLanguagePrompts) -> int:
        if language not in self._instruction_tokens:
            self._instruction_tokens[language] = self.llm.count_tokens(
                prompt_text(answer_messages(prompts, [], [], [], ""))
            )
        return self._instruction_tokens[language]

    # ---------------------------------------------------------------------------------- matching

    def _match(self, keywords: Keywords, question: str, timings: dict[str, float], topic: str | None = None) -> Matches:
        cfg = self.cfg
        low, high = list(keywords.low_level), list(keywords.high_level)
        use_question = cfg.question_channel or keywords.empty
        texts = unique_in_order([*low, *high, *([question] if use_question else [])])
        t0 = time.perf_counter()
        vectors = self.embedder.embed(texts)
        row = {t: i for i, t in enumerate(texts)}
        t1 = time.perf_counter()
        timings["embed"] = (t1 - t0) * 1000

        def search(family: str, queries: list[str], k: int = cfg.search_k) -> list[list[tuple[str, float]]]:
            if not queries:
                return []
            return self.index.family(family).search(vectors[[row[t] for t in queries]], k)

        thr = cfg.similarity_threshold
        entity_hits: list[tuple[str, ChannelHit]] = []
        entity_hits += vector_hits(search("entity_name", low), low, "entity_name", thr)
        mix_queries = [*low, *([question] if use_question else [])]
        mix = search("entity_mix", mix_queries)
        entity_hits += vector_hits(mix[: len(low)], low, "entity_mix", thr)
        entity_hits += vector_hits(mix[len(low) :], mix_queries[len(low) :], "question:entity_mix", thr)

        rel_queries = [*high, *([question] if use_question else [])]
        rel = search("relation_mix", rel_queries)
        rel_hits = vector_hits(rel[: len(high)], high, "relation_mix", thr)
        rel_hits += vector_hits(rel[len(high) :], rel_queries[len(high) :], "question:relation_mix", thr)
        relation_hits = [(pair, hit) for key, hit in rel_hits if (pair := relation_pair_of_key(key)) is not None]

        chunk_scores: dict[str, float] = {}
        dense_hits: dict[str, float] = {}
        walk = cfg.chunk_ranking == "ppr" and self._walk is not None
        if use_question and (cfg.top_k_chunks or walk):
            k = max(cfg.search_k, cfg.ppr_dense_seeds) if walk else cfg.search_k
            hits = vector_hits(search("chunk", [question], k), [question], "question:chunk", thr)
            for cid, hit in hits:
                dense_hits.setdefault(cid, hit.score)
            for cid, hit in hits[: cfg.top_k_chunks]:
                chunk_scores.setdefault(cid, hit.score)
        t2 = time.perf_counter()
        timings["vector_search"] = (t2 - t1) * 1000

        if cfg.fuzzy_limit:
            for kw in low:
                for key, ratio in self.index.names.search(kw, cfg.fuzzy_score_cutoff, cfg.fuzzy_limit):
                    entity_hits.append((key, ChannelHit(channel="fuzzy", query=kw, score=ratio / 100.0)))
        if cfg.question_names:
            # Exact names only (a dictionary read per n-gram when the graph is resident); fuzzy n-gram matching
            # costs ~1-3 ms per n-gram at a million names, so it is left to the refusal gate.
            for named in named_entities(question, self.index.graph, None):
                entity_hits.append(
                    (named.key, ChannelHit(channel="question:name", query=named.text, score=named.score))
                )
        if topic:
            # A given topic is an exact match when the index has it, with the same weight as a name the question spells.
            for found in self.index.graph.get_entities([normalize_name(topic)]):
                entity_hits.append((str(found["key"]), ChannelHit(channel="topic", query=topic, score=1.0)))
        timings["fuzzy"] = (time.perf_counter() - t2) * 1000
        return Matches(
            rank_matches(entity_hits, cfg.top_k_entities),
            rank_matches(relation_hits, cfg.top_k_relations),
            chunk_scores,
            dense_hits,
        )

    # --------------------------------------------------------------------------------- expansion

    def _expand(
        self, matches: Matches, question: str, ranking: dict[str, Any], timings: dict[str, float]
    ) -> tuple[list[ContextEntity], list[ContextRelation], list[ContextChunk]]:
        """Context rows in rank order; ``ranking`` receives how the chunks were ranked (the trace's ``ranking``)."""
        graph, cfg = self.index.graph, self.cfg
        entity_matches, relation_matches = matches.entities, matches.relations
        entity_keys = [str(m.key) for m in entity_matches]
        pairs = [m.key for m in relation_matches]
        edges = graph.get_relations(pairs)  # type: ignore[arg-type]
        matched_edges = {(e["source_key"], e["target_key"]): e for e in edges}
        neighbor_edges = (
            graph.neighbors(entity_keys, limit_per_entity=cfg.max_neighbors_per_entity) if entity_keys else []
        )
        endpoint_keys = unique_in_order(k for m in relation_matches if m.key in matched_edges for k in m.key)
        wanted = unique_in_order(
            [*entity_keys, *endpoint_keys, *(k for e in neighbor_edges for k in (e["source_key"], e["target_key"]))]
        )
        rows = {r["key"]: r for r in graph.get_entities(wanted)}
        entities = assemble_entities(entity_matches, rows, endpoint_keys, rows)
        names = {k: r["name"] for k, r in rows.items()}
        relations = assemble_relations(relation_matches, matched_edges, neighbor_edges, names)

        context_keys = [e.key for e in entities]
        by_entity = graph.chunks_for_entities(context_keys) if context_keys else {}
        chosen = cfg.chunk_ranking
        if chosen == "ppr" and self._walk is None:
            chosen = "fused"
            ranking["notice"] = (
                "chunk ranking ppr needs the graph's read structures (retrieval.resident_graph=off, or an index "
                "written before them: run hxd2 index reindex-reads); ranked 'fused' instead"
            )
        ranking["chunk_ranking"] = chosen
        if chosen == "ppr":
            t0 = time.perf_counter()
            candidates = walk_rank(
                self.cfg, self._walk, self.index, matches, question, context_keys, by_entity, ranking
            )
            timings["walk"] = (time.perf_counter() - t0) * 1000
        else:
            candidates = rank_chunks(context_keys, by_entity, matches.chunk_scores, cfg.max_chunk_candidates, chosen)
            if cfg.dense_keep:
                candidates = dense_first(candidates, matches.chunk_scores, cfg.dense_keep)
                ranking["dense_keep"] = cfg.dense_keep
        fetched = {c["id"]: c for c in graph.get_chunks([c.id for c in candidates])}
        chunks = []
        for cand in candidates:
            c = fetched.get(cand.id)
            if c is None:
                continue
            chunks.append(
                ContextChunk.from_row(
                    c,
                    mentions=cand.mentions,
                    first_entity_rank=cand.first_entity_rank,
                    score=cand.score,
                    graph_score=cand.graph_score,
                    dense_score=cand.dense_score,
                    rank_score=cand.rank_score,
                )
            )
        if self.reranker is not None and cfg.rerank_top_n and chunks:
            t0 = time.perf_counter()
            chunks = self._rerank(self.reranker, question, chunks, ranking)
            timings["rerank"] = (time.perf_counter() - t0) * 1000
        return entities, relations, chunks

    def _rerank(
        self, reranker: Reranker, question: str, chunks: list[ContextChunk], ranking: dict[str, Any]
    ) -> list[ContextChunk]:
        """The first ``rerank_top_n`` chunks reordered by the reranker's score (stable on ties); the rest follow."""
        n = min(self.cfg.rerank_top_n, len(chunks))
        head, tail = chunks[:n], chunks[n:]
        scores = reranker.score(question, [c.text for c in head])
        order = sorted(range(n), key=lambda i: -scores[i])  # sorted is stable: ties keep the ranking's order
        ranking["rerank"] = {"model": getattr(reranker, "model_id", ""), "top_n": n}
        return [replace(head[i], rerank_score=float(scores[i])) for i in order] + tail

    # ------------------------------------------------------------------------------------ budget

    def _fit(
        self,
        question: str,
        language: str,
        entities: Sequence[ContextEntity],
        relations: Sequence[ContextRelation],
        chunks: Sequence[ContextChunk],
    ) -> _Fitted:
        """Per-section budgets, then the total input cap; rows are dropped lowest-ranked first."""
        count = self.llm.count_tokens
        cfg = self.cfg
        prompts = self.prompts.for_language(language)
        available = {"entities": len(entities), "relations": len(relations), "chunks": len(chunks)}
        rendered = {
            "entities": entity_rows(entities),
            "relations": relation_rows(relations),
            "chunks": chunk_rows(chunks),
        }
        # +1 per line for the newline that joins it to the table.
        row_tokens = {s: [count(r) + 1 for r in rendered[s]] for s in SECTIONS}
        header_tokens = {s: count(HEADERS[s]) + 1 for s in SECTIONS}
        budgets = {
            "entities": cfg.entity_budget_tokens,
            "relations": cfg.relation_budget_tokens,
            "chunks": cfg.chunk_budget_tokens,
        }
        kept = {s: fit_rows(row_tokens[s], header_tokens[s], budgets[s]) for s in SECTIONS}
        instructions = self._instructions(language, prompts)
        question_tokens = count(question)
        kept = fit_total(row_tokens, header_tokens, kept, self.limits.input_cap - instructions - question_tokens)

        def messages_for(k: dict[str, int]) -> tuple[Message, ...]:
            return answer_messages(
                prompts,
                rendered["entities"][: k["entities"]],
                rendered["relations"][: k["relations"]],
                rendered["chunks"][: k["chunks"]],
                question,
            )

        messages = messages_for(kept)
        # Row counts are summed per line; the joined prompt can tokenize a little differently. Check the
        # whole and drop the last row of the largest section until it fits.
        while count(prompt_text(messages)) > self.limits.input_cap and any(kept.values()):
            used = {s: table_tokens(row_tokens[s], header_tokens[s], kept[s]) for s in SECTIONS}
            largest = max((s for s in SECTIONS if kept[s]), key=lambda s: used[s])
            kept[largest] -= 1
            messages = messages_for(kept)
        tokens = SectionTokens(
            instructions=instructions,
            question=question_tokens,
            **{s: table_tokens(row_tokens[s], header_tokens[s], kept[s]) for s in SECTIONS},
        )
        dropped = SectionCounts(**{s: available[s] - kept[s] for s in SECTIONS})
        return _Fitted(
            entities=tuple(entities[: kept["entities"]]),
            relations=tuple(relations[: kept["relations"]]),
            chunks=tuple(chunks[: kept["chunks"]]),
            tokens=tokens,
            dropped=dropped,
            messages=messages,
        )

    # -------------------------------------------------------------------------------- generation

    def _generate_events(self, question: str | None, context: RetrievalResult, stream: bool) -> Iterator[QueryEvent]:
        notices = list(context.notices)
        if question is None or question == context.question:
            q, language = context.question, context.language
        else:
            q, language, q_notices = self._prepare_question(question)
            notices += q_notices
        fitted = self._fit(q, language, context.entities, context.relations, context.chunks)
        dropped = SectionCounts(**{s: getattr(context.dropped, s) + getattr(fitted.dropped, s) for s in SECTIONS})
        final_context = replace(
            context,
            entities=fitted.entities,
            relations=fitted.relations,
            chunks=fitted.chunks,
            tokens=fitted.tokens,
            dropped=dropped,
            notices=tuple(notices),
        )
        request: LLMRequest = answer_request(fitted.messages, self.limits.answer_max_tokens, self.cfg.temperature)
        outcome = StreamOutcome()
        if stream:
            for delta in stream_completion(self.llm, request, outcome):
                yield QueryEvent(kind="delta", text=delta)
        else:
            response = complete_one(self.llm, request)
            outcome.text, outcome.finish_reason = response.text, response.finish_reason
            outcome.prompt_tokens, outcome.completion_tokens = response.prompt_tokens, response.completion_tokens
        answer = Answer(
            question=q,
            text=outcome.text.strip(),
            language=language,
            references=references_of(fitted.chunks),
            retrieval=final_context,
            prompt_tokens=outcome.prompt_tokens or fitted.tokens.total,
            completion_tokens=outcome.completion_tokens,
            finish_reason=outcome.finish_reason,
            notices=tuple(notices),
        )
        yield QueryEvent(kind="final", answer=answer)
