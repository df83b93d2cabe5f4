"""The multi-stage pipeline (paper section 7, Figure 4; Algorithm 4): intent -> refusal gate -> logic form ->
verifier -> answer, degrading to dual-level retrieval, always streaming, never an empty answer.

``mode="auto"`` (HuixiangDou2):

1. **intent** (:class:`~hxd2_ray.retrieval.intent.IntentClassifier`): greeting / identity / off_topic are
   answered by the LLM without retrieval under a short identity prompt (path ``direct``);
2. **refusal gate** (:class:`~hxd2_ray.retrieval.refusal.RefusalGate`): dual-level retrieval runs first (its
   one keyword call), and the gate scores those keywords; below the threshold the polite refusal is the
   answer (path ``refused``). The retrieval is kept for the fallback, so a query makes ONE keyword call;
3. **logic form**: plan (one LLM call, one repair) and execute over the graph in a worker thread with a
   deadline (``logic_timeout_s``, ``time.monotonic``), then the **pre-check** verifier (paper's choice) on
   question + evidence; YES: the answer is generated from the evidence (sub-questions, sub-answers, facts) in
   the question's language (path ``logic_form``);
4. **fallback** to dual-level generation (path ``dual_level``) on verifier NO (an unclear reply counts as NO),
   a failed or empty plan, an executor failure, any exception, a timeout, or an empty logic-form answer: the
   paper's semantics (the reference produced nothing on NO; see the reference notes 2.7).

``verifier_mode="post"`` (ablation, paper Table 7): generate from the evidence first, then check question +
evidence + answer; the answer is streamed only once it passed (as one delta), otherwise the query falls back.
``"none"`` trusts any executed plan.

``mode="logic"`` is the logic-form retriever alone (paper Table 6 ablation): no intent, no gate, no
fallback. An executed plan is answered from its evidence (the verifier, when configured, runs and is recorded
but does not gate); a failed one is answered with a clear message naming the reason (path
``logic_form_failed``). ``mode="dual"`` is dual-level retrieval alone (path ``dual_level``).

Every run streams :class:`StageEvent` s: ``stage`` events as stages finish, ``delta`` events with answer text,
then one ``final`` event carrying a :class:`MultiStageAnswer`: the :class:`~hxd2_ray.retrieval.results.Answer`
plus ``path`` and a JSON-ready ``trace`` (intent, refusal score and threshold, the plan and each step's query
templates, parameters and results, the verifier's decision and raw reply, the fallback reason, which path
answered and why, timings per stage, tokens and LLM calls per stage).

Thread safety with a timeout: a worker still waiting on the LLM when its deadline passes cannot be killed.
:func:`build_multistage` therefore wraps the LLM in a :class:`SerializedLLM` (one call at a time, as the
offline vLLM engine is not safe for concurrent calls; a ``thread_safe`` backend is not serialized) whose calls
from a timed-out worker return an error without reaching the backend, so an abandoned plan stops at its next
LLM call.
"""

from __future__ import annotations

from hxd2_ray.config import MultiStageConfig

import contextlib
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence


from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.errors import BackendError
from hxd2_ray.graph.base import unique_in_order
from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, LLMWrapper
from hxd2_ray.logic.plan import MAX_STEPS
from hxd2_ray.retrieval.budget import cut_to_tokens
from hxd2_ray.retrieval.generation import StreamOutcome, stream_completion
from hxd2_ray.retrieval.intent import (
    Intent,
    IntentClassifier,
    MultiStagePromptSet,
    fill,
    load_multistage_prompts,
    load_multistage_prompts_file,
    system_text,
)
from hxd2_ray.retrieval.pipeline import QueryPipeline
from hxd2_ray.retrieval.refusal import RefusalGate, RefusalScore
from hxd2_ray.retrieval.results import (
    Answer,
    ContextChunk,
    EmptyQuestionError,
    Keywords,
    Reference,
    RetrievalResult,
    SectionTokens,
    references_of,
)

__all__ = [
    "MODES",
    "PATHS",
    "MultiStageAnswer",
    "MultiStageConfig",
    "MultiStagePipeline",
    "SerializedLLM",
    "StageEvent",
    "build_multistage",
    "load_multistage_prompts",
    "load_multistage_prompts_file",
    "relation_hints",
]

MODES = ("auto", "logic", "dual")
PATHS = ("direct", "refused", "logic_form", "dual_level", "logic_form_failed")
REFERENCE_CHUNKS = 5  # chunks cited for a logic-form answer (those mentioning the entities it used)


# ------------------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class MultiStageAnswer:
    """The answer (:class:`Answer`: text, references, usage) plus which path produced it and the trace."""

    answer: Answer
    path: str  # one of PATHS
    mode: str  # one of MODES
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.answer.text

    @property
    def question(self) -> str:
        return self.answer.question

    @property
    def language(self) -> str:
        return self.answer.language

    @property
    def references(self) -> tuple[Reference, ...]:
        return self.answer.references

    @property
    def notices(self) -> tuple[str, ...]:
        return self.answer.notices

    def to_dict(self, trace: bool = False) -> dict[str, Any]:
        out = self.answer.to_dict(trace=False)
        out["path"] = self.path
        out["mode"] = self.mode
        if trace:
            out["trace"] = self.trace
        return out


@dataclass(frozen=True, slots=True)
class StageEvent:
    """``stage``: a stage finished (``stage``, ``detail``); ``delta``: answer text; ``final``: the whole answer."""

    kind: Literal["stage", "delta", "final"]
    text: str = ""
    stage: str = ""
    detail: Mapping[str, Any] | None = None
    answer: MultiStageAnswer | None = None


# ---------------------------------------------------------------------------------------- LLM guard


class SerializedLLM(LLMWrapper):
    """An :class:`LLMClient` wrapper: one call at a time (unless the backend says ``thread_safe``), and
    cancellable per thread.

    ``cancel_on(event)`` (a context manager, per thread) makes every call from that thread return an error
    response, without reaching the backend, once ``event`` is set: how a timed-out logic-form worker is
    stopped at its next LLM call.
    """

    def __init__(self, inner: LLMClient):
        super().__init__(inner)
        # A thread-safe backend (ThreadedVllmLLM) batches concurrent calls; serializing them would undo that.
        self._lock = contextlib.nullcontext() if self.thread_safe else threading.Lock()
        self._local = threading.local()

    @contextlib.contextmanager
    def cancel_on(self, event: threading.Event) -> Iterator[None]:
        previous = getattr(self._local, "cancel", None)
        self._local.cancel = event
        try:
            yield
        finally:
            self._local.cancel = previous

    def _cancelled(self) -> bool:
        event = getattr(self._local, "cancel", None)
        return event is not None and event.is_set()

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        if self._cancelled():
            return [_cancelled_response() for _ in requests]
        with self._lock:
            if self._cancelled():
                return [_cancelled_response() for _ in requests]
            return self.inner.complete(requests)

    def _stream(self, request: LLMRequest) -> Iterator[str]:
        if self._cancelled():
            raise BackendError("cancelled: the logic-form deadline passed")
        with self._lock:
            yield from self.inner.stream(request)  # type: ignore[attr-defined]


def _cancelled_response() -> LLMResponse:
    return LLMResponse("", finish_reason="error", error="cancelled: the logic-form deadline passed")


# ------------------------------------------------------------------------------------------ helpers

def relation_hints(graph: Any, limit: int = 64) -> list[str]:
    """The ``limit`` most frequent relation keywords of the graph (the planner's relation-name hint): one
    aggregate scan of the edges, done once, when the pipeline is built. [] for a store without the read."""
    if limit <= 0:
        return []
    top = getattr(graph, "top_relation_keywords", None)
    if not callable(top):
        return []
    return [k for k in top(int(limit)) if k.strip()]


@dataclass
class _LogicRun:
    plan: Any = None  # PlanResult
    evidence: Any = None  # LogicFormEvidence
    plan_s: float = 0.0
    execute_s: float = 0.0
    error: BaseException | None = None
    timed_out: bool = False
    seconds: float = 0.0  # monotonic, around plan + execute (queueing for a worker included)

    def failure(self, max_steps: int) -> str:
        """Why the logic form cannot answer ("" when it can)."""
        if self.timed_out:
            return f"timeout: planning and execution took longer than {self.seconds:.1f} s"
        if self.error is not None:
            return f"exception: {type(self.error).__name__}: {self.error}"
        if self.plan is None:
            return "exception: the planner returned nothing"
        if not self.plan.ok:
            return f"plan failed: {self.plan.error}"
        steps = self.plan.plan.steps
        if not steps or all(s.op == "output" for s in steps):
            return "plan failed: the plan is empty"
        if len(steps) > max_steps:
            return f"plan failed: {len(steps)} steps, more than max_plan_steps={max_steps}"
        if self.evidence is None:
            return "exception: the executor returned nothing"
        if self.evidence.failed:
            return f"executor failed: {self.evidence.failure}"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "evidence": self.evidence.to_dict() if self.evidence is not None else None,
            "timed_out": self.timed_out,
            "error": f"{type(self.error).__name__}: {self.error}" if self.error is not None else "",
            "seconds": round(self.seconds, 4),
        }


class _Run:
    """Mutable state of one query: the trace under construction and stage timings."""

    def __init__(self, question: str, mode: str, language: str, generation_question: str):
        self.started = time.perf_counter()
        self.trace: dict[str, Any] = {
            "mode": mode,
            "question": question,
            "generation_question": generation_question,
            "language": language,
            "intent": None,
            "refusal": None,
            "keywords": None,
            "logic": None,
            "verifier": None,
            "fallback_reason": None,
            "path": None,
            "path_reason": None,
            "timings_ms": {},
            "tokens": {},
            "llm_calls": {},
            "notices": [],
        }

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.trace["timings_ms"][stage] = round((time.perf_counter() - t0) * 1000, 2)

    def tokens(self, stage: str, prompt: int, completion: int, calls: int = 1) -> None:
        self.trace["tokens"][stage] = {"prompt": int(prompt), "completion": int(completion)}
        self.trace["llm_calls"][stage] = int(calls)

    def notice(self, text: str) -> None:
        self.trace["notices"].append(text)


# ------------------------------------------------------------------------------------------ pipeline


class MultiStagePipeline:
    """See the module docstring. Thread-safe when its parts are (they are, as :func:`build_multistage` builds
    them); ``close()`` stops the logic-form worker threads."""

    def __init__(
        self,
        dual: QueryPipeline,
        planner: Any,  # LogicFormPlanner
        executor: Any,  # LogicFormExecutor
        verifier: Any | None,  # EvidenceVerifier with mode == cfg.verifier_mode, or None for "none"
        intent: IntentClassifier | None,
        refusal_gate: RefusalGate | None,
        cfg: MultiStageConfig | None = None,
        *,
        prompts: MultiStagePromptSet | None = None,
        relations: Sequence[str] = (),
    ):
        self.cfg = cfg or MultiStageConfig()
        if self.cfg.verifier_mode != "none":
            if verifier is None:
                raise ValueError(f"verifier_mode={self.cfg.verifier_mode!r} needs a verifier")
            if getattr(verifier, "mode", self.cfg.verifier_mode) != self.cfg.verifier_mode:
                raise ValueError(f"the verifier checks in mode {verifier.mode!r} but verifier_mode is "
                                 f"{self.cfg.verifier_mode!r}")
        self.dual = dual
        self.planner = planner
        self.executor = executor
        self.verifier = verifier
        self.intent = intent
        self.refusal_gate = refusal_gate
        self.prompts = prompts or load_multistage_prompts(self.cfg.prompt_version)
        self.relations = tuple(relations)
        self._guards = tuple(unique_in_order(
            g for g in (getattr(planner, "llm", None), getattr(executor, "llm", None))
            if isinstance(g, SerializedLLM)
        ))
        self._pool = ThreadPoolExecutor(max_workers=self.cfg.logic_workers, thread_name_prefix="hxd2-logic")

    @property
    def llm(self) -> LLMClient:
        return self.dual.llm

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "MultiStagePipeline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ public

    def answer(self, question: str, mode: str = "auto", generation_question: str | None = None,
               on_delta: Callable[[str], None] | None = None) -> MultiStageAnswer:
        final: MultiStageAnswer | None = None
        for event in self.answer_stream(question, mode=mode, generation_question=generation_question):
            if event.kind == "delta" and on_delta is not None:
                on_delta(event.text)
            elif event.kind == "final":
                final = event.answer
        assert final is not None
        return final

    def answer_stream(self, question: str, mode: str = "auto", generation_question: str | None = None
                      ) -> Iterator[StageEvent]:
        """``stage`` and ``delta`` events, then exactly one ``final`` with the :class:`MultiStageAnswer`.

        ``question`` drives intent, the gate, retrieval and planning; ``generation_question`` (default: the
        question) is what the answer prompt carries, e.g. an evaluation's instruction + question.
        Raises :class:`EmptyQuestionError` for an empty question and ValueError for an unknown mode; a
        backend failure of the dual-level answer itself propagates (there is nothing left to answer with).
        """
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        if question is None or not str(question).strip():
            raise EmptyQuestionError("the question is empty; ask something")
        q = str(question).strip()
        gen_q = str(generation_question).strip() if generation_question and str(generation_question).strip() else q
        language = detect_language(q)
        run = _Run(q, mode, language, gen_q)
        if mode == "dual":
            yield from self._dual_path(run, q, gen_q, None, "mode dual: dual-level retrieval only")
        elif mode == "logic":
            yield from self._logic_mode(run, q, gen_q, language)
        else:
            yield from self._auto(run, q, gen_q, language)

    # ------------------------------------------------------------------------------------- modes

    def _auto(self, run: _Run, q: str, gen_q: str, language: str) -> Iterator[StageEvent]:
        cfg = self.cfg
        if cfg.intent_enabled and self.intent is not None:
            with run.timed("intent"):
                intent = self.intent.classify(q, language)
            run.trace["intent"] = intent.to_dict()
            if intent.source == "llm" or intent.raw:
                run.tokens("intent", intent.prompt_tokens, intent.completion_tokens)
            yield StageEvent("stage", stage="intent", detail={"label": intent.label, "source": intent.source})
            if not intent.needs_retrieval:
                yield from self._direct_path(run, q, language, intent)
                return
        else:
            run.trace["intent"] = {"label": "question", "source": "disabled"}

        retrieval: RetrievalResult | None = None
        if cfg.refusal_enabled and self.refusal_gate is not None:
            score: RefusalScore | None = None
            try:
                with run.timed("retrieve"):
                    retrieval = self.dual.retrieve(q)
                run.trace["keywords"] = _keywords_dict(retrieval.keywords)
                run.trace["llm_calls"]["keywords"] = 1
                with run.timed("refusal"):
                    score = self.refusal_gate.score(q, retrieval.keywords)
            except Exception as exc:  # noqa: BLE001 - the gate fails open; the logic form may still answer
                why = f"{type(exc).__name__}: {exc}"
                run.trace["refusal"] = {"enabled": True, "skipped": True, "error": why}
                run.notice(f"the refusal gate was skipped ({why})")
            if score is not None:
                run.trace["refusal"] = score.to_dict()
                yield StageEvent("stage", stage="refusal", detail={"score": round(score.score, 4),
                                                                    "threshold": score.threshold,
                                                                    "refused": score.refused})
                if score.refused:
                    yield from self._refused_path(run, q, language, retrieval, score)  # type: ignore[arg-type]
                    return
        else:
            run.trace["refusal"] = {"enabled": False}

        logic = self._run_logic(run, q, language)
        failure = logic.failure(cfg.max_plan_steps)
        yield StageEvent("stage", stage="logic_form",
                         detail={"ok": not failure, "failure": failure, "seconds": round(logic.seconds, 3)})
        if failure:
            run.trace["verifier"] = {"mode": cfg.verifier_mode, "ran": False}
            yield from self._dual_path(run, q, gen_q, retrieval, f"fallback: {failure}", fallback=failure)
            return

        evidence = logic.evidence
        if cfg.verifier_mode == "pre":
            verdict, why = self._verify(run, q, evidence, None, language, gating=True)
            yield StageEvent("stage", stage="verifier", detail={"supported": verdict, "reason": why})
            if not verdict:
                yield from self._dual_path(run, q, gen_q, retrieval, f"fallback: {why}", fallback=why)
                return
            produced = yield from self._logic_answer_stream(run, gen_q, language, evidence,
                                                            "pre-check verifier said yes")
            if produced is None:
                yield from self._dual_path(run, q, gen_q, retrieval, "fallback: the logic-form answer was empty",
                                           fallback="the logic-form answer was empty")
            else:
                yield self._final(run, produced, "logic_form")
            return

        if cfg.verifier_mode == "post":
            try:
                with run.timed("generate_logic"):
                    text, outcome = self._logic_answer_text(gen_q, language, evidence)
                run.tokens("answer_logic", outcome.prompt_tokens, outcome.completion_tokens)
            except Exception as exc:  # noqa: BLE001 - fall back, never fail the query here
                reason = f"exception: {type(exc).__name__}: {exc}"
                yield from self._dual_path(run, q, gen_q, retrieval, f"fallback: {reason}", fallback=reason)
                return
            if not text:
                yield from self._dual_path(run, q, gen_q, retrieval, "fallback: the logic-form answer was empty",
                                           fallback="the logic-form answer was empty")
                return
            verdict, why = self._verify(run, q, evidence, text, language, gating=True)
            yield StageEvent("stage", stage="verifier", detail={"supported": verdict, "reason": why})
            if not verdict:
                run.trace["rejected_logic_answer"] = text
                yield from self._dual_path(run, q, gen_q, retrieval, f"fallback: {why}", fallback=why)
                return
            yield StageEvent("delta", text=text)
            answer = self._logic_answer_record(gen_q, language, evidence, text, outcome)
            run.trace["path_reason"] = "post-check verifier said yes"
            yield self._final(run, answer, "logic_form")
            return

        run.trace["verifier"] = {"mode": "none", "ran": False}
        produced = yield from self._logic_answer_stream(run, gen_q, language, evidence,
                                                        "the plan executed (no verifier)")
        if produced is None:
            yield from self._dual_path(run, q, gen_q, retrieval, "fallback: the logic-form answer was empty",
                                       fallback="the logic-form answer was empty")
        else:
            yield self._final(run, produced, "logic_form")

    def _logic_mode(self, run: _Run, q: str, gen_q: str, language: str) -> Iterator[StageEvent]:
        run.trace["intent"] = {"label": "question", "source": "disabled"}
        run.trace["refusal"] = {"enabled": False}
        logic = self._run_logic(run, q, language)
        failure = logic.failure(self.cfg.max_plan_steps)
        yield StageEvent("stage", stage="logic_form",
                         detail={"ok": not failure, "failure": failure, "seconds": round(logic.seconds, 3)})
        if not failure and self.cfg.verifier_mode == "pre":
            verdict, why = self._verify(run, q, logic.evidence, None, language, gating=False)
            yield StageEvent("stage", stage="verifier", detail={"supported": verdict, "reason": why, "gating": False})
        if not failure:
            produced = yield from self._logic_answer_stream(run, gen_q, language, logic.evidence,
                                                            "mode logic: the plan executed")
            if produced is not None:
                if self.cfg.verifier_mode == "post":
                    verdict, why = self._verify(run, q, logic.evidence, produced.text, language, gating=False)
                    yield StageEvent("stage", stage="verifier",
                                     detail={"supported": verdict, "reason": why, "gating": False})
                yield self._final(run, produced, "logic_form")
                return
            failure = "the logic-form answer was empty"
        if self.cfg.verifier_mode != "none" and run.trace["verifier"] is None:
            run.trace["verifier"] = {"mode": self.cfg.verifier_mode, "ran": False}
        lp = self.prompts.for_language(language)
        text = fill(lp.logic_failed, reason=failure)
        run.trace["failure_reason"] = failure
        run.trace["path_reason"] = f"mode logic: no fallback; the logic form failed ({failure})"
        yield StageEvent("delta", text=text)
        answer = self._plain_answer(gen_q, language, text, None, notices=(f"logic form failed: {failure}",))
        yield self._final(run, answer, "logic_form_failed")

    # ------------------------------------------------------------------------------------- paths

    def _direct_path(self, run: _Run, q: str, language: str, intent: Intent) -> Iterator[StageEvent]:
        lp = self.prompts.for_language(language)
        kb = lp.kb_line(self.cfg.knowledge_base_description)
        request = LLMRequest(
            messages=({"role": "system", "content": system_text(lp.direct_system, kb)},
                      {"role": "user", "content": fill(lp.direct_user, question=q)}),
            max_tokens=self.cfg.direct_max_tokens,
            temperature=self.dual.cfg.temperature,
            tag="direct",
        )
        outcome = StreamOutcome()
        notices: list[str] = []
        streamed = ""
        with run.timed("generate"):
            try:
                for delta in stream_completion(self.llm, request, outcome):
                    streamed += delta
                    yield StageEvent("delta", text=delta)
            except Exception as exc:  # noqa: BLE001 - a greeting must not fail the query
                notices.append(f"the direct reply failed ({type(exc).__name__}: {exc})")
                outcome.text, outcome.finish_reason = streamed, "error"
        run.tokens("answer", outcome.prompt_tokens, outcome.completion_tokens)
        text = outcome.text.strip()
        if not text:
            # Nothing (or only whitespace) went out: the fixed reply follows it.
            text = lp.greeting_reply
            notices.append("the direct reply was empty; a fixed reply was used")
            yield StageEvent("delta", text=text)
        run.trace["path_reason"] = f"intent {intent.label} ({intent.source}): answered without retrieval"
        answer = self._plain_answer(q, language, text, None, notices=tuple(notices), outcome=outcome)
        yield self._final(run, answer, "direct")

    def _refused_path(self, run: _Run, q: str, language: str, retrieval: RetrievalResult,
                      score: RefusalScore) -> Iterator[StageEvent]:
        text = self.prompts.for_language(language).refusal
        run.trace["path_reason"] = f"refusal score {score.score:.4f} < threshold {score.threshold:.4f} ({score.basis})"
        yield StageEvent("delta", text=text)
        answer = self._plain_answer(q, language, text, retrieval.keywords,
                                    notices=(f"refused: the question scored {score.score:.3f}, below the "
                                             f"threshold {score.threshold:.3f}",))
        yield self._final(run, answer, "refused")

    def _dual_path(self, run: _Run, q: str, gen_q: str, retrieval: RetrievalResult | None, reason: str,
                   fallback: str | None = None) -> Iterator[StageEvent]:
        if fallback is not None:
            run.trace["fallback_reason"] = fallback
            yield StageEvent("stage", stage="fallback", detail={"reason": fallback})
        if retrieval is None:
            with run.timed("retrieve"):
                retrieval = self.dual.retrieve(q)
            run.trace["keywords"] = _keywords_dict(retrieval.keywords)
            run.trace["llm_calls"]["keywords"] = run.trace["llm_calls"].get("keywords", 0) + 1
        final: Answer | None = None
        with run.timed("generate"):
            for event in self.dual.generate_stream(gen_q, retrieval):
                if event.kind == "delta":
                    yield StageEvent("delta", text=event.text)
                elif event.kind == "final":
                    final = event.answer
        assert final is not None
        run.tokens("answer", final.prompt_tokens, final.completion_tokens)
        if not final.text.strip():
            text = self.prompts.for_language(final.language).empty_answer
            yield StageEvent("delta", text=text)
            final = replace(final, text=text, notices=(*final.notices, "the generated answer was empty; "
                                                       "a fixed reply was used"))
        run.trace["retrieval"] = final.retrieval.trace()
        run.trace["path_reason"] = reason
        yield self._final(run, final, "dual_level")

    # ------------------------------------------------------------------------------- logic form

    def _run_logic(self, run: _Run, q: str, language: str) -> _LogicRun:
        """Plan + execute in a worker thread, with a deadline; never raises."""
        box = _LogicRun()
        cancel = threading.Event()
        guards = self._guards

        def work() -> None:
            with contextlib.ExitStack() as stack:
                for guard in guards:
                    stack.enter_context(guard.cancel_on(cancel))
                t0 = time.monotonic()
                plan = self.planner.plan(q, language=language, relations=self.relations)
                box.plan, box.plan_s = plan, time.monotonic() - t0
                if cancel.is_set() or not plan.ok:
                    return
                steps = plan.plan.steps
                if not steps or len(steps) > self.cfg.max_plan_steps:
                    return
                t1 = time.monotonic()
                evidence = self.executor.execute(plan.plan, q)
                box.evidence, box.execute_s = evidence, time.monotonic() - t1

        started = time.monotonic()
        try:
            # The caller's context (e.g. the evaluation job's per-question error tally) follows the work.
            future = self._pool.submit(contextvars.copy_context().run, work)
            future.result(timeout=self.cfg.logic_timeout_s)
        except FuturesTimeout:
            cancel.set()
            box.timed_out = True
        except Exception as exc:  # noqa: BLE001 - any failure falls back
            box.error = exc
        box.seconds = time.monotonic() - started
        # Snapshot: a timed-out worker may still write into ``box`` later.
        snap = _LogicRun(plan=box.plan, evidence=box.evidence if not box.timed_out else None, plan_s=box.plan_s,
                         execute_s=box.execute_s, error=box.error, timed_out=box.timed_out, seconds=box.seconds)
        run.trace["logic"] = snap.to_dict()
        run.trace["timings_ms"]["logic_plan"] = round(snap.plan_s * 1000, 2)
        run.trace["timings_ms"]["logic_execute"] = round(snap.execute_s * 1000, 2)
        run.trace["timings_ms"]["logic_total"] = round(snap.seconds * 1000, 2)
        if snap.plan is not None:
            run.tokens("plan", snap.plan.prompt_tokens, snap.plan.completion_tokens, snap.plan.calls)
        if snap.evidence is not None:
            run.tokens("execute", snap.evidence.prompt_tokens, snap.evidence.completion_tokens,
                       snap.evidence.llm_calls)
        return snap

    def _verify(self, run: _Run, q: str, evidence: Any, answer: str | None, language: str, gating: bool
                ) -> tuple[bool, str]:
        """(supported, why); an exception or an unclear reply is NO."""
        mode = self.cfg.verifier_mode
        try:
            with run.timed("verify"):
                verdict = self.verifier.verify(q, evidence, answer, language=language)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001
            why = f"exception in the {mode}-check verifier: {type(exc).__name__}: {exc}"
            run.trace["verifier"] = {"mode": mode, "ran": True, "gating": gating, "supported": False, "raw": "",
                                     "reason": why}
            return False, why
        run.tokens("verify", verdict.prompt_tokens, verdict.completion_tokens)
        run.trace["verifier"] = {"mode": mode, "ran": True, "gating": gating, "supported": verdict.supported,
                                 "raw": verdict.raw, "reason": verdict.reason}
        if verdict.supported:
            return True, f"{mode}-check verifier said yes"
        if verdict.reason == "no":
            return False, f"the {mode}-check verifier said no"
        if verdict.reason == "unclear reply":
            return False, f"the {mode}-check verifier's reply was unclear ({verdict.raw[:80]!r}); counted as no"
        return False, f"the {mode}-check verifier failed ({verdict.reason}); counted as no"

    def _logic_request(self, gen_q: str, language: str, evidence: Any) -> LLMRequest:
        lp = self.prompts.for_language(language)
        count = self.llm.count_tokens
        limits = self.dual.limits
        evidence_text = evidence.format()
        fixed = count(lp.logic_answer_system) + count(fill(lp.logic_answer_user, evidence="", question=gen_q))
        budget = max(1, limits.input_cap - fixed)
        evidence_text, _ = cut_to_tokens(evidence_text, budget, count, "\n[...]\n")
        user = fill(lp.logic_answer_user, evidence=evidence_text, question=gen_q)
        # Never above the dual-level answer cap: the input budget above leaves exactly that much room.
        max_tokens = min(self.cfg.logic_answer_max_tokens or limits.answer_max_tokens, limits.answer_max_tokens)
        return LLMRequest(
            messages=({"role": "system", "content": lp.logic_answer_system}, {"role": "user", "content": user}),
            max_tokens=max_tokens,
            temperature=self.dual.cfg.temperature,
            tag="logic_answer",
        )

    def _logic_answer_text(self, gen_q: str, language: str, evidence: Any) -> tuple[str, StreamOutcome]:
        outcome = StreamOutcome()
        for _ in stream_completion(self.llm, self._logic_request(gen_q, language, evidence), outcome):
            pass
        return outcome.text.strip(), outcome

    def _logic_answer_stream(self, run: _Run, gen_q: str, language: str, evidence: Any, why: str
                             ) -> Iterator[StageEvent]:
        """Stream the answer from the evidence; returns the Answer, or None when nothing was produced
        (empty reply, or a failure before any text: the caller falls back)."""
        outcome = StreamOutcome()
        notices: list[str] = []
        streamed = ""
        with run.timed("generate"):
            try:
                for delta in stream_completion(self.llm, self._logic_request(gen_q, language, evidence), outcome):
                    streamed += delta
                    yield StageEvent("delta", text=delta)
            except Exception as exc:  # noqa: BLE001
                if not streamed.strip():
                    run.notice(f"the logic-form answer failed ({type(exc).__name__}: {exc})")
                    return None
                # Text already went out: keep it, say it was cut.
                outcome.text, outcome.finish_reason = streamed, "error"
                notices.append(f"the logic-form answer was cut by an error ({type(exc).__name__}: {exc})")
        run.tokens("answer", outcome.prompt_tokens, outcome.completion_tokens)
        text = outcome.text.strip()
        if not text:
            return None
        run.trace["path_reason"] = why
        return self._logic_answer_record(gen_q, language, evidence, text, outcome, tuple(notices))

    def _logic_answer_record(self, gen_q: str, language: str, evidence: Any, text: str, outcome: StreamOutcome,
                             notices: tuple[str, ...] = ()) -> Answer:
        refs = self._logic_references(evidence)
        return self._plain_answer(gen_q, language, text, None, notices=notices, outcome=outcome, references=refs)

    def _logic_references(self, evidence: Any) -> tuple[Reference, ...]:
        """Documents of the chunks that mention the entities the logic form linked or returned."""
        keys: list[str] = []
        for step in getattr(evidence, "steps", ()):
            for query in step.queries:
                value = query.params.get("keys") if isinstance(query.params, Mapping) else None
                if isinstance(value, list):
                    keys.extend(k for k in value if isinstance(k, str) and not k.startswith("... "))
            if step.value is not None and step.value.keys:
                keys.extend(step.value.keys)
        keys = unique_in_order(keys)[:20]
        if not keys:
            return ()
        graph = self.dual.index.graph
        try:
            by_entity = graph.chunks_for_entities(keys)
            chunk_ids = unique_in_order(c for k in keys for c in by_entity.get(k, ()))[:REFERENCE_CHUNKS]
            rows = graph.get_chunks(chunk_ids)
        except Exception:  # noqa: BLE001 - references are a courtesy; never fail an answer for them
            return ()
        chunks = [ContextChunk(id=c["id"], doc_id=c["doc_id"], text="", header_path=c["header_path"],
                               doc_title=c["doc_title"], doc_source_id=c["doc_source_id"],
                               doc_source_path=c["doc_source_path"], mentions=0, first_entity_rank=None, score=0.0)
                  for c in rows]
        return references_of(chunks)

    # ----------------------------------------------------------------------------------- records

    def _plain_answer(self, question: str, language: str, text: str, keywords: Keywords | None, *,
                      notices: tuple[str, ...] = (), outcome: StreamOutcome | None = None,
                      references: tuple[Reference, ...] = ()) -> Answer:
        """An Answer for a path that used no dual-level context (its ``retrieval`` holds no rows)."""
        limits = self.dual.limits
        context = RetrievalResult(
            question=question, language=language, keywords=keywords or Keywords(parsed=False),
            entities=(), relations=(), chunks=(), tokens=SectionTokens(), input_cap=limits.input_cap,
            answer_max_tokens=limits.answer_max_tokens, notices=notices,
        )
        outcome = outcome or StreamOutcome()
        return Answer(question=question, text=text, language=language, references=references, retrieval=context,
                      prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens,
                      finish_reason=outcome.finish_reason, notices=notices)

    def _final(self, run: _Run, answer: Answer, path: str) -> StageEvent:
        trace = run.trace
        trace["path"] = path
        trace["timings_ms"]["total"] = round((time.perf_counter() - run.started) * 1000, 2)
        trace["prompt_versions"] = {"multistage": self.prompts.version_hash,
                                    "logic": getattr(getattr(self.planner, "prompts", None), "version_hash", ""),
                                    "query": getattr(self.dual.prompts, "version_hash", "")}
        totals = {"prompt": sum(t["prompt"] for t in trace["tokens"].values()),
                  "completion": sum(t["completion"] for t in trace["tokens"].values())}
        trace["tokens_total"] = totals
        if trace["notices"]:
            answer = replace(answer, notices=(*answer.notices, *trace["notices"]))
        return StageEvent("final", answer=MultiStageAnswer(answer=answer, path=path, mode=trace["mode"],
                                                           trace=trace))


def _keywords_dict(kw: Keywords) -> dict[str, Any]:
    return {"low_level": list(kw.low_level), "high_level": list(kw.high_level), "parsed": kw.parsed,
            "raw": kw.raw}


# ------------------------------------------------------------------------------------------- factory


def build_multistage(index: Any, llm: LLMClient, embedder: Any, cfg: Any, ms_cfg: MultiStageConfig | None = None,
                     *, prompts: MultiStagePromptSet | None = None) -> MultiStagePipeline:
    """The whole pipeline over an open index: dual-level engine, planner, executor (EntityLinker with
    GraphQueries over the index graph and the embedder), verifier, intent classifier and refusal gate.

    ``cfg``: the HxdConfig (its ``retrieval`` section drives the dual-level engine). The LLM is wrapped in a
    :class:`SerializedLLM` (see the module docstring); relation keywords for the planner are read from the
    graph once, here.
    """
    from hxd2_ray.logic import (
        LOGIC_TEMPLATES,
        EntityLinker,
        EvidenceVerifier,
        GraphQueries,
        LogicFormExecutor,
        LogicFormPlanner,
        PredicateMatcher,
    )
    from hxd2_ray.wiring import build_reranker

    ms = ms_cfg or MultiStageConfig()
    guarded = llm if isinstance(llm, SerializedLLM) else SerializedLLM(llm)
    dual = QueryPipeline(index, guarded, embedder, cfg.retrieval, reranker=build_reranker(cfg.rerank))
    queries = GraphQueries(index.graph, LOGIC_TEMPLATES)
    name_index = index.families.get("entity_name") if hasattr(index, "families") else None
    linker = EntityLinker(queries, embedder=embedder if name_index is not None else None, name_index=name_index)
    executor = LogicFormExecutor(queries, linker, guarded, matcher=PredicateMatcher(embedder))
    relations: list[str] = []
    if ms.planner_relation_hints:
        try:
            relations = relation_hints(index.graph, ms.planner_relation_hints)
        except Exception:  # noqa: BLE001 - a hint, not a requirement
            relations = []
    planner = LogicFormPlanner(guarded, max_steps=ms.max_plan_steps, max_tokens=ms.plan_max_tokens,
                               max_relations_in_prompt=max(1, ms.planner_relation_hints),
                               max_text_chars=ms.plan_max_text_chars)
    verifier = EvidenceVerifier(guarded, mode=ms.verifier_mode) if ms.verifier_mode != "none" else None
    ms_prompts = prompts or load_multistage_prompts(ms.prompt_version)
    intent = IntentClassifier(guarded, ms_prompts, use_llm=ms.intent_use_llm,
                              kb_description=ms.knowledge_base_description) if ms.intent_enabled else None
    gate = RefusalGate.for_index(index, embedder, ms) if ms.refusal_enabled else None
    return MultiStagePipeline(dual, planner, executor, verifier, intent, gate, ms, prompts=ms_prompts,
                              relations=relations)
