"""The flow's paths that answer in one step, without the multi-stage pipeline: the LLM alone, the chunk vectors,
dual-level retrieval without generation, the GraphFlow walk; and how every path's answer is recorded (an answer
that did not generate from dual-level context, the final event with the query's trace and usage)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator

from hxd2_ray.embedding.base import Embedder
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.llm.streaming import StreamOutcome, stream_completion
from hxd2_ray.retrieval.budget import ContextLimits
from hxd2_ray.retrieval.graph_walk import GraphWalkStep, WalkOutcome
from hxd2_ray.retrieval.index import OpenIndex
from hxd2_ray.retrieval.intent import MultiStagePromptSet, fill
from hxd2_ray.retrieval.pipeline import QueryPipeline
from hxd2_ray.retrieval.refusal import RefusalScore
from hxd2_ray.retrieval.results import (
    Answer,
    ContextChunk,
    Keywords,
    QueryEvent,
    Reference,
    RetrievalResult,
    SectionTokens,
    references_of,
)
from hxd2_ray.retrieval.run_trace import RunTrace

CHUNK_VECTOR_K = 20  # chunks a chunk_vector query returns: enough for recall@k up to ~10 distinct passages


@dataclass
class SinglePaths:
    """The parts these paths use (each one asserts the part it needs), shared with the :class:`QueryFlow` that
    built them."""

    limits: ContextLimits
    prompts: MultiStagePromptSet
    prompt_versions: dict[str, str] = field(default_factory=dict)
    temperature: float = 0.0
    llm: LLMClient | None = None
    dual: QueryPipeline | None = None
    index: OpenIndex | None = None
    embedder: Embedder | None = None
    walk: GraphWalkStep | None = None

    def graphflow(self, trace: RunTrace, q: str, gen_q: str, language: str) -> Iterator[QueryEvent]:
        assert self.walk is not None
        outcome: WalkOutcome = self.walk.run(trace, q)
        yield QueryEvent("progress", step="graph_walk", detail={"ok": not outcome.failure, "failure": outcome.failure})
        if outcome.failure:
            text = fill(self.prompts.for_language(language).graph_walk_failed, reason=outcome.failure)
            trace["failure_reason"] = outcome.failure
            trace["path_reason"] = f"mode graphflow: the walk found nothing ({outcome.failure})"
            yield QueryEvent("delta", text=text)
            yield self.final(
                trace,
                self.plain(gen_q, language, text, notices=(f"graph walk: {outcome.failure}",)),
                "graphflow_failed",
            )
            return
        # The policy's ranking is the answer (MetaQA style: "first | second | ..."); chunks are the references.
        names = outcome.entity_names
        text = " | ".join(names)
        if text:
            yield QueryEvent("delta", text=text)
        trace["path_reason"] = "mode graphflow: the ranked targets of the policy's trajectories"
        answer = self.plain(q, language, text, references=self.walk.references(outcome.chunk_ids), candidates=names)
        yield self.final(trace, answer, "graphflow")

    def llm_only(self, trace: RunTrace, q: str, gen_q: str, language: str) -> Iterator[QueryEvent]:
        assert self.llm is not None
        request = LLMRequest(
            messages=({"role": "user", "content": gen_q},),
            max_tokens=self.limits.answer_max_tokens,
            temperature=self.temperature,
            tag="answer",
        )
        outcome = StreamOutcome()
        with trace.timed("generate"):
            for delta in stream_completion(self.llm, request, outcome):
                yield QueryEvent("delta", text=delta)
        trace.tokens("answer", outcome.prompt_tokens, outcome.completion_tokens)
        trace["path_reason"] = "mode llm_only: no retrieval"
        yield self.final(trace, self.plain(gen_q, language, outcome.text.strip(), outcome=outcome), "llm_only")

    def chunk_vector(self, trace: RunTrace, q: str, language: str) -> QueryEvent:
        assert self.index is not None and self.embedder is not None
        with trace.timed("retrieve"):
            vector = self.embedder.embed([q])
            hits = self.index.family("chunk").search(vector, CHUNK_VECTOR_K)[0]
            rows = {c["id"]: c for c in self.index.graph.get_chunks([key for key, _ in hits])}
        chunks = tuple(
            ContextChunk.from_row(c, score=float(score)) for key, score in hits if (c := rows.get(key)) is not None
        )
        trace["path_reason"] = "mode chunk_vector: the question's embedding against the chunk vectors"
        context = self.empty_context(q, language, None, chunks=chunks)
        answer = self.plain(q, language, "", references=references_of(chunks), context=context)
        return self.final(trace, answer, "chunk_vector")

    def dual_retrieval(self, trace: RunTrace, q: str) -> QueryEvent:
        assert self.dual is not None
        with trace.timed("retrieve"):
            context = self.dual.retrieve(q, topic=trace.topic)
        trace.keywords(context.keywords)
        trace["retrieval"] = context.trace()
        trace["path_reason"] = "mode dual_retrieval: the budgeted chunks of dual-level retrieval, no generation"
        answer = self.plain(
            q,
            context.language,
            "",
            context.keywords,
            notices=context.notices,
            references=references_of(context.chunks),
            context=context,
        )
        return self.final(trace, answer, "dual_retrieval")

    def refused(
        self, trace: RunTrace, q: str, language: str, retrieval: RetrievalResult, score: RefusalScore
    ) -> Iterator[QueryEvent]:
        text = self.prompts.for_language(language).refusal
        trace["path_reason"] = f"refusal score {score.score:.4f} < threshold {score.threshold:.4f} ({score.basis})"
        yield QueryEvent("delta", text=text)
        answer = self.plain(
            q,
            language,
            text,
            retrieval.keywords,
            notices=(f"refused: the question scored {score.score:.3f}, below the threshold {score.threshold:.3f}",),
        )
        yield self.final(trace, replace(answer, refused=True), "refused")

    # -------------------------------------------------------------------------------------- records

    def empty_context(
        self,
        question: str,
        language: str,
        keywords: Keywords | None,
        chunks: tuple[ContextChunk, ...] = (),
        notices: tuple[str, ...] = (),
    ) -> RetrievalResult:
        return RetrievalResult(
            question=question,
            language=language,
            keywords=keywords or Keywords(parsed=False),
            entities=(),
            relations=(),
            chunks=chunks,
            tokens=SectionTokens(),
            input_cap=self.limits.input_cap,
            answer_max_tokens=self.limits.answer_max_tokens,
            notices=notices,
        )

    def plain(
        self,
        question: str,
        language: str,
        text: str,
        keywords: Keywords | None = None,
        *,
        notices: tuple[str, ...] = (),
        outcome: StreamOutcome | None = None,
        references: tuple[Reference, ...] = (),
        context: RetrievalResult | None = None,
        candidates: tuple[str, ...] = (),
    ) -> Answer:
        """An Answer for a path that did not generate from dual-level context."""
        outcome = outcome or StreamOutcome()
        return Answer(
            question=question,
            text=text,
            language=language,
            references=references,
            retrieval=context or self.empty_context(question, language, keywords, notices=notices),
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            finish_reason=outcome.finish_reason,
            notices=notices,
            candidates=candidates,
        )

    def final(self, trace: RunTrace, answer: Answer, path: str) -> QueryEvent:
        """The answer with its path and trace; its usage is the whole query's (every LLM call it made)."""
        data = trace.finish(path, self.prompt_versions)
        totals = data["tokens_total"]
        answer = replace(
            answer,
            path=path,
            mode=data["mode"],
            fallback_reason=data["fallback_reason"],
            trace=data,
            notices=(*answer.notices, *data["notices"]),
            prompt_tokens=totals["prompt"],
            completion_tokens=totals["completion"],
        )
        return QueryEvent("final", answer=answer)
