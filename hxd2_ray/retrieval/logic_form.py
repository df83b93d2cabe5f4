"""The logic-form part of the query flow: plan and execute under a deadline, verify, answer from the evidence.

Planning and execution run in a worker thread with a deadline (``logic_timeout_s``, on a monotonic clock): a
worker still waiting on the LLM when its deadline passes cannot be killed, so every :class:`SerializedLLM` the
planner and executor call through is told to fail that thread's next call (``cancel_on``), and an abandoned plan
stops at its next LLM call. In Serve the planner and executor are handle adapters whose calls are bounded by the
request's own deadline instead.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Mapping, Sequence

from hxd2_ray.config import MultiStageConfig
from hxd2_ray.graph.base import GraphStore, unique_in_order
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.llm.streaming import StreamOutcome, stream_completion
from hxd2_ray.llm.wrappers import SerializedLLM
from hxd2_ray.retrieval.budget import ContextLimits, cut_to_tokens
from hxd2_ray.retrieval.intent import MultiStagePromptSet, fill
from hxd2_ray.retrieval.parts import PlanExecutor, Planner, Verifier
from hxd2_ray.retrieval.results import ContextChunk, QueryEvent, Reference, references_of
from hxd2_ray.retrieval.run_trace import RunTrace

log = logging.getLogger(__name__)

REFERENCE_CHUNKS = 5  # chunks cited for a logic-form answer (those mentioning the entities it used)


@dataclass
class LogicRun:
    """What planning and execution produced (a snapshot: a timed-out worker may still write into its own box)."""

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


@dataclass
class PendingLogic:
    """A plan + execution started by :meth:`LogicFormStep.start`; ``abandon()`` when its answer is not wanted."""

    box: LogicRun
    cancel: threading.Event
    future: Future[None]
    started: float

    def abandon(self) -> None:
        """Not needed after all (a direct reply, a refusal): the worker stops at its next LLM call, if it has one."""
        self.cancel.set()
        self.future.cancel()


class LogicFormStep:
    """Plan → execute → verify → answer from the evidence, over the flow's seams (see the module docstring)."""

    def __init__(
        self,
        planner: Planner,
        executor: PlanExecutor,
        verifiers: Mapping[str, Verifier],
        llm: LLMClient,
        graph: GraphStore,
        limits: ContextLimits,
        cfg: MultiStageConfig,
        prompts: MultiStagePromptSet,
        *,
        relations: Sequence[str] = (),
        temperature: float = 0.0,
        guards: Sequence[SerializedLLM] = (),
        clock: Callable[[], float] = time.monotonic,
    ):
        self.planner = planner
        self.executor = executor
        self.verifiers = dict(verifiers)
        self.llm = llm
        self.graph = graph
        self.limits = limits
        self.cfg = cfg
        self.prompts = prompts
        self.relations = tuple(relations)
        self.temperature = temperature
        self.guards = tuple(guards)
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=cfg.logic_workers, thread_name_prefix="hxd2-logic")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------------- plan + execute

    def run(self, trace: RunTrace, q: str, language: str) -> LogicRun:
        """Plan + execute in a worker thread, with a deadline; never raises."""
        return self.finish(trace, self.start(q, language), started_early=False)

    def start(self, q: str, language: str) -> "PendingLogic":
        """Start planning + execution in a worker thread and return at once; :meth:`finish` waits for it.

        The deadline (``logic_timeout_s``) counts from here, so a plan started early has used its time by then.
        """
        box = LogicRun()
        cancel = threading.Event()
        clock = self.clock

        def work() -> None:
            with contextlib.ExitStack() as stack:
                for guard in self.guards:
                    stack.enter_context(guard.cancel_on(cancel))
                if cancel.is_set():
                    return
                t0 = clock()
                plan = self.planner.plan(q, language=language, relations=self.relations)
                box.plan, box.plan_s = plan, clock() - t0
                if cancel.is_set() or not plan.ok or plan.plan is None:
                    return
                steps = plan.plan.steps
                if not steps or len(steps) > self.cfg.max_plan_steps:
                    return
                t1 = clock()
                evidence = self.executor.execute(plan.plan, q)
                box.evidence, box.execute_s = evidence, clock() - t1

        started = clock()
        # The caller's context (a Serve request's deadline, the evaluation job's error tally) follows the work.
        future: Future[None]
        try:
            future = self._pool.submit(contextvars.copy_context().run, work)
        except RuntimeError as exc:  # a closed step: the logic form fails, the flow falls back
            future = Future()
            future.set_exception(exc)
        return PendingLogic(box=box, cancel=cancel, future=future, started=started)

    def finish(self, trace: RunTrace, pending: "PendingLogic", *, started_early: bool = True) -> LogicRun:
        """Wait for a started plan (at most what is left of its deadline) and record it in the trace."""
        box, clock = pending.box, self.clock
        try:
            left = self.cfg.logic_timeout_s
            if started_early:
                left -= clock() - pending.started
            pending.future.result(timeout=max(0.0, left))
        except FuturesTimeout:
            pending.cancel.set()
            box.timed_out = True
        except Exception as exc:  # noqa: BLE001 - any failure falls back
            box.error = exc
        box.seconds = clock() - pending.started
        snap = LogicRun(
            plan=box.plan,
            evidence=box.evidence if not box.timed_out else None,
            plan_s=box.plan_s,
            execute_s=box.execute_s,
            error=box.error,
            timed_out=box.timed_out,
            seconds=box.seconds,
        )
        trace["logic"] = snap.to_dict()
        trace["timings_ms"]["logic_plan"] = round(snap.plan_s * 1000, 2)
        trace["timings_ms"]["logic_execute"] = round(snap.execute_s * 1000, 2)
        trace["timings_ms"]["logic_total"] = round(snap.seconds * 1000, 2)
        if snap.plan is not None:
            trace.tokens("plan", snap.plan.prompt_tokens, snap.plan.completion_tokens, snap.plan.calls)
        if snap.evidence is not None:
            trace.tokens(
                "execute", snap.evidence.prompt_tokens, snap.evidence.completion_tokens, snap.evidence.llm_calls
            )
        return snap

    # ----------------------------------------------------------------------------------------- verify

    def verify(
        self, trace: RunTrace, mode: str, q: str, evidence: Any, answer: str | None, language: str, gating: bool
    ) -> tuple[bool, str]:
        """(supported, why); an exception or an unclear reply is NO."""
        try:
            with trace.timed("verify"):
                verdict = self.verifiers[mode].verify(q, evidence, answer, language=language)
        except Exception as exc:  # noqa: BLE001
            why = f"exception in the {mode}-check verifier: {type(exc).__name__}: {exc}"
            trace["verifier"] = {
                "mode": mode,
                "ran": True,
                "gating": gating,
                "supported": False,
                "raw": "",
                "reason": why,
            }
            return False, why
        trace.tokens("verify", verdict.prompt_tokens, verdict.completion_tokens)
        trace["verifier"] = {
            "mode": mode,
            "ran": True,
            "gating": gating,
            "supported": verdict.supported,
            "raw": verdict.raw,
            "reason": verdict.reason,
        }
        if verdict.supported:
            return True, f"{mode}-check verifier said yes"
        if verdict.reason == "no":
            return False, f"the {mode}-check verifier said no"
        if verdict.reason == "unclear reply":
            return False, f"the {mode}-check verifier's reply was unclear ({verdict.raw[:80]!r}); counted as no"
        return False, f"the {mode}-check verifier failed ({verdict.reason}); counted as no"

    # ----------------------------------------------------------------------------------------- answer

    def request(self, gen_q: str, language: str, evidence: Any) -> LLMRequest:
        lp = self.prompts.for_language(language)
        count = self.llm.count_tokens
        limits = self.limits
        fixed = count(lp.logic_answer_system) + count(fill(lp.logic_answer_user, evidence="", question=gen_q))
        budget = max(1, limits.input_cap - fixed)
        evidence_text, _ = cut_to_tokens(evidence.format(), budget, count, "\n[...]\n")
        user = fill(lp.logic_answer_user, evidence=evidence_text, question=gen_q)
        # Never above the dual-level answer cap: the input budget above leaves exactly that much room.
        max_tokens = min(self.cfg.logic_answer_max_tokens or limits.answer_max_tokens, limits.answer_max_tokens)
        return LLMRequest(
            messages=({"role": "system", "content": lp.logic_answer_system}, {"role": "user", "content": user}),
            max_tokens=max_tokens,
            temperature=self.temperature,
            tag="logic_answer",
        )

    def answer_text(self, gen_q: str, language: str, evidence: Any) -> tuple[str, StreamOutcome]:
        outcome = StreamOutcome()
        for _ in stream_completion(self.llm, self.request(gen_q, language, evidence), outcome):
            pass
        return outcome.text.strip(), outcome

    def answer_stream(
        self, trace: RunTrace, gen_q: str, language: str, evidence: Any
    ) -> Generator[QueryEvent, None, tuple[str, StreamOutcome, tuple[str, ...]]]:
        """Yields the deltas of the answer from the evidence; returns ``(text, outcome, notices)``, where the text
        is "" when nothing was produced (an empty reply, or a failure before any text): the caller falls back."""
        outcome = StreamOutcome()
        notices: list[str] = []
        streamed = ""
        with trace.timed("generate"):
            try:
                for delta in stream_completion(self.llm, self.request(gen_q, language, evidence), outcome):
                    streamed += delta
                    yield QueryEvent("delta", text=delta)
            except Exception as exc:  # noqa: BLE001
                if not streamed.strip():
                    trace.notice(f"the logic-form answer failed ({type(exc).__name__}: {exc})")
                    return "", outcome, ()
                # Text already went out: keep it, say it was cut.
                outcome.text, outcome.finish_reason = streamed, "error"
                notices.append(f"the logic-form answer was cut by an error ({type(exc).__name__}: {exc})")
        trace.tokens("answer", outcome.prompt_tokens, outcome.completion_tokens)
        return outcome.text.strip(), outcome, tuple(notices)

    def references(self, evidence: Any) -> tuple[Reference, ...]:
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
        try:
            by_entity = self.graph.chunks_for_entities(keys)
            chunk_ids = unique_in_order(c for k in keys for c in by_entity.get(k, ()))[:REFERENCE_CHUNKS]
            rows = self.graph.get_chunks(chunk_ids)
        except Exception as exc:  # noqa: BLE001 - references are a courtesy; never fail an answer for them
            log.warning("the logic-form answer goes without references: %s: %s", type(exc).__name__, exc)
            return ()
        chunks = [replace(ContextChunk.from_row(c), text="") for c in rows]
        return references_of(chunks)
