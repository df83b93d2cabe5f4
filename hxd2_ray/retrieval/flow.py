"""The query flow: every query mode of every entry point (CLI, evaluation job, Serve) is a path of this object.

Built only by :func:`hxd2_ray.wiring.build_pipeline`; its parts sit behind the seams of
:mod:`hxd2_ray.retrieval.parts`, so Serve runs this same object with the planner, executor and verifier in their
own deployments.

Modes (:data:`MODES`):

* ``auto`` (HuixiangDou2, paper section 7, Figure 4; Algorithm 4): intent -> refusal gate -> logic form ->
  verifier (``multistage.verifier_mode``, pre-check by default) -> answer, degrading to dual-level retrieval:

  1. **intent**: greeting / identity / off_topic are answered by the LLM without retrieval (path ``direct``);
  2. **refusal gate**: dual-level retrieval runs first (its one keyword call), and the gate scores those
     keywords; below the threshold the polite refusal is the answer (path ``refused``). The retrieval is kept
     for the fallback, so a query makes ONE keyword call;
  3. **logic form**: plan (one LLM call, one repair) and execute over the graph under a deadline
     (:mod:`hxd2_ray.retrieval.logic_form`), then the verifier on question + evidence; YES: the answer is
     generated from the evidence (path ``logic_form``);
  4. **fallback** to dual-level generation (path ``dual_level``, ``fallback_reason`` set) on verifier NO (an
     unclear reply counts as NO), a failed or empty plan, an executor failure, any exception, a timeout, or an
     empty logic-form answer: the paper's semantics (the reference produced nothing on NO).

  With ``multistage.overlap_steps`` the plan and execution (3) and the gate's retrieval (2) start together with
  the intent call (1), since all three depend on the question alone, and the answer from the evidence is
  generated while the pre-check verifier decides (sent only after YES). The decisions are still taken in the
  order above, so the answer is the same and the latency is the longest of the overlapped steps instead of their
  sum (the price: a question answered directly or refused has spent its planning call for nothing, a direct
  one its keyword call too, and a NO its answer's first tokens).

* ``auto_post``: ``auto`` with the post-check verifier (ablation, paper Table 7): generate from the evidence
  first, then check question + evidence + answer; the answer is streamed only once it passed.
* ``logic``: the logic form alone (paper Table 6): no intent, no gate, no fallback; the verifier, when
  configured, runs and is recorded but does not gate; a failed plan is answered with a message naming the reason
  (path ``logic_form_failed``).
* ``dual``: dual-level retrieval and a grounded answer (path ``dual_level``).
* ``graphflow``: the learned graph walk alone (:mod:`hxd2_ray.retrieval.graph_walk`): the ranked entities it
  reaches are the answer (no LLM), a passage policy's chunks the references; nothing reached is answered with the
  reason (path ``graphflow_failed``). With ``multistage.graph_walk`` the walk is also a step of ``auto`` between
  the logic form and the dual-level fallback.
* ``llm_only``: the question to the LLM, no retrieval (the paper's baseline).
* ``chunk_vector`` / ``dual_retrieval``: retrieval only, no generation (passage recall): the question's
  embedding against the chunk vectors, or dual-level retrieval's budgeted chunks; references in rank order.

Every run streams :class:`~hxd2_ray.retrieval.results.QueryEvent` s: ``progress`` events as steps finish,
``delta`` events with answer text, then one ``final`` event with the :class:`~hxd2_ray.retrieval.results.Answer`
(path, fallback reason, refusal, references, usage and the JSON-ready trace).
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.config import MultiStageConfig
from hxd2_ray.embedding.base import Embedder
from hxd2_ray.errors import HxdError
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.llm.streaming import StreamOutcome, stream_completion
from hxd2_ray.retrieval.budget import ContextLimits
from hxd2_ray.retrieval.conversation import record_rewrite, standalone_question
from hxd2_ray.retrieval.graph_walk import GraphWalkStep
from hxd2_ray.retrieval.index import OpenIndex
from hxd2_ray.retrieval.intent import Intent, IntentClassifier, MultiStagePromptSet, fill, system_text
from hxd2_ray.retrieval.logic_form import LogicFormStep, PendingLogic
from hxd2_ray.retrieval.pipeline import QueryPipeline
from hxd2_ray.retrieval.refusal import RefusalGate, RefusalScore
from hxd2_ray.retrieval.results import (
    Answer,
    EmptyQuestionError,
    QueryEvent,
    RetrievalResult,
    final_answer,
)
from hxd2_ray.retrieval.run_trace import RunTrace
from hxd2_ray.retrieval.single_paths import SinglePaths
from hxd2_ray.retrieval.speculation import BackgroundGenerator

__all__ = ["MODES", "PATHS", "RETRIEVAL_ONLY_MODES", "ModeUnavailableError", "QueryFlow"]

MODES = ("auto", "auto_post", "logic", "dual", "llm_only", "chunk_vector", "dual_retrieval", "graphflow")
RETRIEVAL_ONLY_MODES = ("chunk_vector", "dual_retrieval")
PATHS = (
    "direct",
    "refused",
    "logic_form",
    "dual_level",
    "logic_form_failed",
    "llm_only",
    "chunk_vector",
    "dual_retrieval",
    "graphflow",
    "graphflow_failed",
)


class ModeUnavailableError(HxdError, ValueError):
    """The mode needs a part this flow was built without (an index, an LLM, the logic-form parts)."""


class QueryFlow:
    """See the module docstring. Thread-safe when its parts are (as :func:`~hxd2_ray.wiring.build_pipeline`
    builds them); ``close()`` stops the logic-form worker threads."""

    def __init__(
        self,
        *,
        mode: str,
        llm: LLMClient | None,
        limits: ContextLimits,
        temperature: float = 0.0,
        dual: QueryPipeline | None = None,
        index: OpenIndex | None = None,
        embedder: Embedder | None = None,
        logic: LogicFormStep | None = None,
        walk: GraphWalkStep | None = None,
        intent: IntentClassifier | None = None,
        refusal_gate: RefusalGate | None = None,
        cfg: MultiStageConfig | None = None,
        prompts: MultiStagePromptSet,
        prompt_versions: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.cfg = cfg or MultiStageConfig()
        self.llm = llm
        self.limits = limits
        self.temperature = temperature
        self.dual = dual
        self.index = index
        self.embedder = embedder
        self.logic = logic
        self.walk = walk
        self.intent = intent
        self.refusal_gate = refusal_gate
        self.prompts = prompts
        self.prompt_versions = dict(prompt_versions or {})
        self.clock = clock
        # Overlapping steps pays only when their LLM calls can run at once; behind one lock they would just queue.
        self.overlap = self.cfg.overlap_steps == "on" or (
            self.cfg.overlap_steps == "auto" and llm is not None and llm.thread_safe
        )
        self._side: ThreadPoolExecutor | None = None
        self._side_lock = threading.Lock()
        self.paths = SinglePaths(
            limits=limits,
            prompts=prompts,
            prompt_versions=self.prompt_versions,
            temperature=temperature,
            llm=llm,
            dual=dual,
            index=index,
            embedder=embedder,
            walk=walk,
        )
        self.modes = tuple(m for m in MODES if not self._missing(m))
        self.mode = self.check_mode(mode)

    def close(self) -> None:
        if self.logic is not None:
            self.logic.close()
        if self._side is not None:
            self._side.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "QueryFlow":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------- modes

    def _missing(self, mode: str) -> str:
        """What ``mode`` needs that this flow lacks ("" when it can run)."""
        parts: dict[str, list[tuple[str, object]]] = {
            "llm_only": [("an LLM", self.llm)],
            "chunk_vector": [("an index", self.index), ("an embedder", self.embedder)],
            "dual": [("an index", self.dual)],
            "dual_retrieval": [("an index", self.dual)],
            "logic": [("an index", self.dual), ("the logic-form parts", self.logic)],
            "auto": [("an index", self.dual), ("the logic-form parts", self.logic)],
            "auto_post": [("an index", self.dual), ("the logic-form parts", self.logic)],
            "graphflow": [
                ("an index", self.index),
                (
                    "a GraphFlow policy for the index (--policy DIR, or graphflow.policy in the config; "
                    "train one with hxd2 graphflow train)",
                    self.walk,
                ),
            ],
        }
        missing = [what for what, part in parts[mode] if part is None]
        if mode in ("auto", "auto_post", "logic") and self.logic is not None:
            check = "post" if mode == "auto_post" else self.cfg.verifier_mode
            if check != "none" and check not in self.logic.verifiers:
                missing.append(f"a {check}-check verifier")
        return " and ".join(missing)

    def check_mode(self, mode: str | None) -> str:
        mode = mode or getattr(self, "mode", None) or "auto"
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        missing = self._missing(mode)
        if missing:
            raise ModeUnavailableError(
                f"mode {mode!r} needs {missing}; this pipeline answers {', '.join(self.modes) or 'nothing'}"
            )
        return mode

    # ------------------------------------------------------------------------------------------ public

    def answer(
        self,
        question: str,
        *,
        mode: str | None = None,
        generation_question: str | None = None,
        on_delta: Callable[[str], None] | None = None,
        topic: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> Answer:
        events = self.answer_stream(
            question, mode=mode, generation_question=generation_question, topic=topic, history=history
        )
        return final_answer(events, on_delta)

    def answer_stream(
        self,
        question: str,
        *,
        mode: str | None = None,
        generation_question: str | None = None,
        topic: str | None = None,
        history: Sequence[Mapping[str, Any]] = (),
    ) -> Iterator[QueryEvent]:
        """``progress`` and ``delta`` events, then exactly one ``final`` with the :class:`Answer`.

        ``question`` drives intent, the gate, retrieval and planning; ``generation_question`` (default: the
        question) is what the answer prompt carries, e.g. an evaluation's instruction + question; ``topic``: the
        question's topic entity when known (a benchmark's, ``--topic``, the API's), the start of retrieval and walk;
        ``history``: a conversation's earlier messages (``role``, ``content``), read to rewrite the question so it
        stands alone (:mod:`hxd2_ray.retrieval.conversation`).
        Raises :class:`EmptyQuestionError` for an empty question, ValueError for an unknown or unavailable mode;
        a backend failure of the last answer itself propagates (there is nothing left to answer with).
        """
        mode = self.check_mode(mode)
        if question is None or not str(question).strip():
            raise EmptyQuestionError("the question is empty; ask something")
        q = str(question).strip()
        language = detect_language(q)
        started, prompts = self.clock(), self.prompts.for_language(language)
        rewrite = standalone_question(self.llm, prompts, self.cfg, q, history, self.temperature) if history else None
        q = rewrite.question if rewrite is not None else q
        gen_q = str(generation_question).strip() if generation_question and str(generation_question).strip() else q
        trace = RunTrace(q, mode, language, gen_q, clock=self.clock, topic=topic)
        if rewrite is not None:
            record_rewrite(trace, rewrite, self.clock() - started)
        match mode:
            case "dual":
                yield from self._dual_path(trace, q, gen_q, None, "mode dual: dual-level retrieval only")
            case "logic":
                yield from self._logic_mode(trace, q, gen_q, language)
            case "auto":
                yield from self._auto(trace, q, gen_q, language, self.cfg.verifier_mode)
            case "auto_post":
                yield from self._auto(trace, q, gen_q, language, "post")
            case "llm_only":
                yield from self.paths.llm_only(trace, q, gen_q, language)
            case "chunk_vector":
                yield self.paths.chunk_vector(trace, q, language)
            case "dual_retrieval":
                yield self.paths.dual_retrieval(trace, q)
            case "graphflow":
                yield from self.paths.graphflow(trace, q, gen_q, language)

    # ---------------------------------------------------------------------------------------- auto

    def _auto(self, trace: RunTrace, q: str, gen_q: str, language: str, verifier_mode: str) -> Iterator[QueryEvent]:
        cfg = self.cfg
        assert self.dual is not None and self.logic is not None
        # overlap_steps: the plan and the gate's retrieval depend on the question alone, so they start now and the
        # steps below only wait for them; every decision is still taken in the paper's order.
        pending: PendingLogic | None = None
        early_retrieval: Future[RetrievalResult] | None = None
        # Work started ahead records into its own trace, adopted only when used: an abandoned retrieval still
        # running must not write into a trace that went out with the answer.
        retrieval_trace = trace.scratch()
        if self.overlap:
            pending = self.logic.start(q, language)
            if cfg.refusal_enabled and self.refusal_gate is not None:
                early_retrieval = self._side_pool().submit(
                    contextvars.copy_context().run, self._retrieve, retrieval_trace, q
                )
        if cfg.intent_enabled and self.intent is not None:
            with trace.timed("intent"):
                intent = self.intent.classify(q, language)
            trace["intent"] = intent.to_dict()
            if intent.source == "llm" or intent.raw:
                trace.tokens("intent", intent.prompt_tokens, intent.completion_tokens)
            yield QueryEvent("progress", step="intent", detail={"label": intent.label, "source": intent.source})
            if not intent.needs_retrieval:
                if pending is not None:
                    pending.abandon()
                yield from self._direct_path(trace, q, language, intent)
                return
        else:
            trace["intent"] = {"label": "question", "source": "disabled"}

        retrieval: RetrievalResult | None = None
        if cfg.refusal_enabled and self.refusal_gate is not None:
            score: RefusalScore | None = None
            try:
                if early_retrieval is not None:
                    retrieval = early_retrieval.result()
                    trace.adopt(retrieval_trace)
                else:
                    retrieval = self._retrieve(trace, q)
                trace.keywords(retrieval.keywords)
                with trace.timed("refusal"):
                    score = self.refusal_gate.score(q, retrieval.keywords, topic=trace.topic)
            except Exception as exc:  # noqa: BLE001 - the gate fails open; the logic form may still answer
                why = f"{type(exc).__name__}: {exc}"
                trace["refusal"] = {"enabled": True, "skipped": True, "error": why}
                trace.notice(f"the refusal gate was skipped ({why})")
            if score is not None:
                trace["refusal"] = score.to_dict()
                yield QueryEvent(
                    "progress",
                    step="refusal",
                    detail={"score": round(score.score, 4), "threshold": score.threshold, "refused": score.refused},
                )
                if score.refused:
                    assert retrieval is not None
                    if pending is not None:
                        pending.abandon()
                    yield from self.paths.refused(trace, q, language, retrieval, score)
                    return
        else:
            trace["refusal"] = {"enabled": False}

        logic = self.logic.finish(trace, pending) if pending is not None else self.logic.run(trace, q, language)
        failure = logic.failure(cfg.max_plan_steps)
        yield QueryEvent(
            "progress",
            step="logic_form",
            detail={"ok": not failure, "failure": failure, "seconds": round(logic.seconds, 3)},
        )
        if failure:
            trace["verifier"] = {"mode": verifier_mode, "ran": False}
            yield from self._after_logic(trace, q, gen_q, language, retrieval, failure)
            return

        evidence = logic.evidence
        if verifier_mode == "post":
            yield from self._post_checked(trace, q, gen_q, language, evidence, retrieval)
            return
        answer_trace: RunTrace | None = None
        ahead: BackgroundGenerator[QueryEvent, tuple[str, StreamOutcome, tuple[str, ...]]] | None = None
        if verifier_mode == "pre":
            if self.overlap:
                # The answer is generated while the verifier decides; it is sent only after YES. Its own trace
                # keeps an abandoned answer's records out of the fallback's.
                answer_trace = trace.scratch()
                ahead = BackgroundGenerator(
                    self._side_pool(),
                    functools.partial(self.logic.answer_stream, answer_trace, gen_q, language, evidence),
                )
            verdict, why = self.logic.verify(trace, "pre", q, evidence, None, language, gating=True)
            yield QueryEvent("progress", step="verifier", detail={"supported": verdict, "reason": why})
            if not verdict:
                if ahead is not None:
                    ahead.abandon()
                yield from self._after_logic(trace, q, gen_q, language, retrieval, why)
                return
            why = "pre-check verifier said yes"
        else:
            trace["verifier"] = {"mode": "none", "ran": False}
            why = "the plan executed (no verifier)"
        if ahead is not None and answer_trace is not None:
            text, outcome, notices = yield from ahead.replay()
            trace.adopt(answer_trace)
        else:
            text, outcome, notices = yield from self.logic.answer_stream(trace, gen_q, language, evidence)
        if not text:
            empty = "the logic-form answer was empty"
            yield from self._dual_path(trace, q, gen_q, retrieval, f"fallback: {empty}", fallback=empty)
            return
        trace["path_reason"] = why
        answer = self.paths.plain(
            gen_q, language, text, notices=notices, outcome=outcome, references=self.logic.references(evidence)
        )
        yield self.paths.final(trace, answer, "logic_form")

    def _retrieve(self, trace: RunTrace, q: str) -> RetrievalResult:
        assert self.dual is not None
        with trace.timed("retrieve"):
            return self.dual.retrieve(q, topic=trace.topic)

    def _side_pool(self) -> ThreadPoolExecutor:
        """Threads for the gate's retrieval and the answer generated ahead under ``overlap_steps`` (made on first
        use)."""
        with self._side_lock:
            if self._side is None:
                # Each query in flight holds at most two (its retrieval, its answer), mostly waiting on a remote call.
                self._side = ThreadPoolExecutor(
                    max_workers=max(8, 8 * self.cfg.logic_workers), thread_name_prefix="hxd2-side"
                )
            return self._side

    def _post_checked(
        self, trace: RunTrace, q: str, gen_q: str, language: str, evidence: Any, retrieval: RetrievalResult | None
    ) -> Iterator[QueryEvent]:
        assert self.logic is not None
        try:
            with trace.timed("generate_logic"):
                text, outcome = self.logic.answer_text(gen_q, language, evidence)
            trace.tokens("answer_logic", outcome.prompt_tokens, outcome.completion_tokens)
        except Exception as exc:  # noqa: BLE001 - fall back, never fail the query here
            reason = f"exception: {type(exc).__name__}: {exc}"
            yield from self._dual_path(trace, q, gen_q, retrieval, f"fallback: {reason}", fallback=reason)
            return
        if not text:
            empty = "the logic-form answer was empty"
            yield from self._dual_path(trace, q, gen_q, retrieval, f"fallback: {empty}", fallback=empty)
            return
        verdict, why = self.logic.verify(trace, "post", q, evidence, text, language, gating=True)
        yield QueryEvent("progress", step="verifier", detail={"supported": verdict, "reason": why})
        if not verdict:
            trace["rejected_logic_answer"] = text
            yield from self._dual_path(trace, q, gen_q, retrieval, f"fallback: {why}", fallback=why)
            return
        yield QueryEvent("delta", text=text)
        trace["path_reason"] = "post-check verifier said yes"
        answer = self.paths.plain(gen_q, language, text, outcome=outcome, references=self.logic.references(evidence))
        yield self.paths.final(trace, answer, "logic_form")

    def _after_logic(
        self, trace: RunTrace, q: str, gen_q: str, language: str, retrieval: RetrievalResult | None, failure: str
    ) -> Iterator[QueryEvent]:
        """The logic form could not answer: the graph walk when configured, else (or then) dual-level."""
        if self.cfg.graph_walk and self.walk is not None:
            assert self.logic is not None
            outcome = self.walk.run(trace, q)
            yield QueryEvent(
                "progress", step="graph_walk", detail={"ok": not outcome.failure, "failure": outcome.failure}
            )
            if not outcome.failure and outcome.entity_names:
                evidence = outcome.evidence(self.walk.evidence_targets)
                verdict, why = self.logic.verify(trace, "pre", q, evidence, None, language, gating=True)
                yield QueryEvent(
                    "progress", step="verifier", detail={"supported": verdict, "reason": why, "checked": "graph_walk"}
                )
                if verdict:
                    text, outcome_llm, notices = yield from self.logic.answer_stream(trace, gen_q, language, evidence)
                    if text:
                        trace["path_reason"] = f"the logic form failed ({failure}); the graph walk's paths: {why}"
                        answer = self.paths.plain(
                            gen_q,
                            language,
                            text,
                            notices=notices,
                            outcome=outcome_llm,
                            candidates=outcome.entity_names,
                            references=self.walk.references([t.key for t in evidence.targets if t.kind == "chunk"]),
                        )
                        yield self.paths.final(trace, answer, "graphflow")
                        return
                    why = "the answer from the graph walk's paths was empty"
                failure = f"{failure}; graph walk: {why}"
            else:
                failure = f"{failure}; graph walk: {outcome.failure or 'it reached passages, not answers'}"
        yield from self._dual_path(trace, q, gen_q, retrieval, f"fallback: {failure}", fallback=failure)

    # ---------------------------------------------------------------------------------------- logic

    def _logic_mode(self, trace: RunTrace, q: str, gen_q: str, language: str) -> Iterator[QueryEvent]:
        assert self.logic is not None
        trace["intent"] = {"label": "question", "source": "disabled"}
        trace["refusal"] = {"enabled": False}
        verifier_mode = self.cfg.verifier_mode
        logic = self.logic.run(trace, q, language)
        failure = logic.failure(self.cfg.max_plan_steps)
        yield QueryEvent(
            "progress",
            step="logic_form",
            detail={"ok": not failure, "failure": failure, "seconds": round(logic.seconds, 3)},
        )
        if not failure and verifier_mode == "pre":
            verdict, why = self.logic.verify(trace, "pre", q, logic.evidence, None, language, gating=False)
            yield QueryEvent("progress", step="verifier", detail={"supported": verdict, "reason": why, "gating": False})
        if not failure:
            text, outcome, notices = yield from self.logic.answer_stream(trace, gen_q, language, logic.evidence)
            if text:
                if verifier_mode == "post":
                    verdict, why = self.logic.verify(trace, "post", q, logic.evidence, text, language, gating=False)
                    yield QueryEvent(
                        "progress", step="verifier", detail={"supported": verdict, "reason": why, "gating": False}
                    )
                trace["path_reason"] = "mode logic: the plan executed"
                answer = self.paths.plain(
                    gen_q,
                    language,
                    text,
                    notices=notices,
                    outcome=outcome,
                    references=self.logic.references(logic.evidence),
                )
                yield self.paths.final(trace, answer, "logic_form")
                return
            failure = "the logic-form answer was empty"
        if verifier_mode != "none" and trace["verifier"] is None:
            trace["verifier"] = {"mode": verifier_mode, "ran": False}
        text = fill(self.prompts.for_language(language).logic_failed, reason=failure)
        trace["failure_reason"] = failure
        trace["path_reason"] = f"mode logic: no fallback; the logic form failed ({failure})"
        yield QueryEvent("delta", text=text)
        answer = self.paths.plain(gen_q, language, text, notices=(f"logic form failed: {failure}",))
        yield self.paths.final(trace, answer, "logic_form_failed")

    # ---------------------------------------------------------------------------------------- paths

    def _direct_path(self, trace: RunTrace, q: str, language: str, intent: Intent) -> Iterator[QueryEvent]:
        lp = self.prompts.for_language(language)
        kb = lp.kb_line(self.cfg.knowledge_base_description)
        request = LLMRequest(
            messages=(
                {"role": "system", "content": system_text(lp.direct_system, kb)},
                {"role": "user", "content": fill(lp.direct_user, question=q)},
            ),
            max_tokens=self.cfg.direct_max_tokens,
            temperature=self.temperature,
            tag="direct",
        )
        outcome = StreamOutcome()
        notices: list[str] = []
        streamed = ""
        assert self.llm is not None
        with trace.timed("generate"):
            try:
                for delta in stream_completion(self.llm, request, outcome):
                    streamed += delta
                    yield QueryEvent("delta", text=delta)
            except Exception as exc:  # noqa: BLE001 - a greeting must not fail the query
                notices.append(f"the direct reply failed ({type(exc).__name__}: {exc})")
                outcome.text, outcome.finish_reason = streamed, "error"
        trace.tokens("answer", outcome.prompt_tokens, outcome.completion_tokens)
        text = outcome.text.strip()
        if not text:
            # Nothing (or only whitespace) went out: the fixed reply follows it.
            text = lp.greeting_reply
            notices.append("the direct reply was empty; a fixed reply was used")
            yield QueryEvent("delta", text=text)
        trace["path_reason"] = f"intent {intent.label} ({intent.source}): answered without retrieval"
        yield self.paths.final(
            trace, self.paths.plain(q, language, text, notices=tuple(notices), outcome=outcome), "direct"
        )

    def _dual_path(
        self,
        trace: RunTrace,
        q: str,
        gen_q: str,
        retrieval: RetrievalResult | None,
        reason: str,
        fallback: str | None = None,
    ) -> Iterator[QueryEvent]:
        assert self.dual is not None
        if fallback is not None:
            trace["fallback_reason"] = fallback
            yield QueryEvent("progress", step="fallback", detail={"reason": fallback})
        if retrieval is None:
            with trace.timed("retrieve"):
                retrieval = self.dual.retrieve(q, topic=trace.topic)
            trace.keywords(retrieval.keywords)
        final: Answer | None = None
        with trace.timed("generate"):
            for event in self.dual.generate_stream(gen_q, retrieval):
                if event.kind == "delta":
                    yield event
                elif event.kind == "final":
                    final = event.answer
        assert final is not None
        trace.tokens("answer", final.prompt_tokens, final.completion_tokens)
        if not final.text.strip():
            text = self.prompts.for_language(final.language).empty_answer
            yield QueryEvent("delta", text=text)
            final = replace(
                final, text=text, notices=(*final.notices, "the generated answer was empty; a fixed reply was used")
            )
        trace["retrieval"] = final.retrieval.trace()
        trace["path_reason"] = reason
        yield self.paths.final(trace, replace(final, fallback_reason=fallback), "dual_level")
