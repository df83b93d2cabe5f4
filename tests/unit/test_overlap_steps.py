"""``multistage.overlap_steps``: the plan and the gate's retrieval start with the intent call, the decisions and
the answers stay those of the sequential flow, and a plan nobody needs (direct reply, refusal) leaves no trace."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.retrieval import open_index
from hxd2_ray.wiring import build_pipeline
from tests.unit.retrieval_fixtures import DIM, build_tiny_index
from tests.unit.test_query_flow import BAD_PLAN, DEFAULT_REPLIES, OFF_TOPIC_KEYWORDS, QUESTION, run, with_multistage


class ConcurrentScripted(ScriptedLLM):
    """Handler mode keyed by tag needs no arrival order, so calls may overlap (as a Serve handle's do)."""

    thread_safe = True


def concurrent_scripted(**overrides: Any) -> ConcurrentScripted:
    replies = {**DEFAULT_REPLIES, **overrides}

    def handler(req: LLMRequest) -> str | LLMResponse:
        reply = replies[req.tag]
        return reply(req) if callable(reply) else reply

    return ConcurrentScripted(handler)


@pytest.fixture(scope="module")
def make(tmp_path_factory):
    """make(llm, **MultiStageConfig fields) -> an auto flow over the tiny index (all closed with the module)."""
    tiny = build_tiny_index(tmp_path_factory.mktemp("overlap") / "index")
    embedder = HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
    with open_index(tiny.root, tiny.cfg) as index, contextlib.ExitStack() as flows:
        yield lambda llm, **ms: flows.enter_context(
            build_pipeline("auto", index, llm, embedder, with_multistage(tiny.cfg, **ms))
        )


SCENARIOS = {
    "logic form answers": {},
    "verifier says no": {"logic_verify_pre": "no"},
    "plan invalid": {"logic_plan": BAD_PLAN, "logic_repair": BAD_PLAN},
    "refused": {"keywords": OFF_TOPIC_KEYWORDS},
    "greeting": {"intent": "greeting"},
}
OFF_TOPIC = "What is the weather forecast for Paris?"
QUESTIONS = {"refused": OFF_TOPIC, "greeting": "hello there"}
DECISIONS = (
    "intent",
    "refusal",
    "keywords",
    "logic",
    "verifier",
    "fallback_reason",
    "path",
    "path_reason",
    "tokens",
    "llm_calls",
    "notices",
)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_overlap_takes_the_same_decisions_and_gives_the_same_answer(make, scenario):
    replies = SCENARIOS[scenario]
    question = QUESTIONS.get(scenario, QUESTION)
    _, sequential = run(make(concurrent_scripted(**replies), overlap_steps="off"), question)
    _, overlapped = run(make(concurrent_scripted(**replies), overlap_steps="on"), question)
    assert (overlapped.text, overlapped.path, overlapped.refused) == (
        sequential.text,
        sequential.path,
        sequential.refused,
    )
    assert overlapped.references == sequential.references
    for key in DECISIONS:
        assert untimed(overlapped.trace[key]) == untimed(sequential.trace[key]), key


def untimed(value: Any) -> Any:
    """The trace without how long each step took (``seconds``, ``ms``, ``*_ms``, ``*_s``): what it decided."""
    if isinstance(value, dict):
        return {
            k: untimed(v)
            for k, v in value.items()
            if not (k in ("seconds", "ms") or k.endswith("_ms") or k.endswith("_s"))
        }
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


@pytest.mark.parametrize("scenario", ["refused", "greeting"])
def test_an_abandoned_plan_leaves_no_trace(make, scenario):
    llm = concurrent_scripted(**SCENARIOS[scenario])
    _, answer = run(make(llm, overlap_steps="on"), QUESTIONS[scenario])
    assert answer.path == ("refused" if scenario == "refused" else "direct")
    assert answer.trace["logic"] is None
    assert "plan" not in answer.trace["llm_calls"] and "logic_total" not in answer.trace["timings_ms"]
    if scenario == "greeting":  # the gate's retrieval, started ahead, was not used either
        assert "retrieve" not in answer.trace["timings_ms"] and "keywords" not in answer.trace["llm_calls"]


def _plan_seen_during_intent(make, overlap: bool) -> bool:
    """Whether the planning call arrived while the intent call was still waiting (it waits up to 0.5 s)."""
    plan_arrived = threading.Event()
    seen: list[bool] = []

    def intent(_req: LLMRequest) -> str:
        seen.append(plan_arrived.wait(timeout=0.5))
        return "question"

    def plan(req: LLMRequest) -> str:
        plan_arrived.set()
        return DEFAULT_REPLIES["logic_plan"]

    _, answer = run(make(concurrent_scripted(intent=intent, logic_plan=plan), overlap_steps="on" if overlap else "off"))
    assert answer.path == "logic_form"
    return seen == [True]


def test_the_plan_runs_while_the_intent_is_classified(make):
    assert _plan_seen_during_intent(make, overlap=True)
    assert not _plan_seen_during_intent(make, overlap=False)


def test_the_logic_deadline_counts_from_the_start(make):
    """A plan started early has spent its time by the time the flow waits for it: the deadline is not renewed."""
    release = threading.Event()

    def slow_intent(_req: LLMRequest) -> str:
        release.wait(timeout=1.0)  # longer than the logic deadline below
        return "question"

    def plan(_req: LLMRequest) -> str:
        release.wait(timeout=5.0)
        return DEFAULT_REPLIES["logic_plan"]

    flow = make(concurrent_scripted(intent=slow_intent, logic_plan=plan), overlap_steps="on", logic_timeout_s=0.3)
    _, answer = run(flow)
    release.set()
    assert answer.path == "dual_level"
    assert answer.trace["fallback_reason"].startswith("timeout")
    assert answer.trace["logic"]["timed_out"] is True


def test_auto_overlaps_only_when_the_llm_takes_concurrent_calls(make):
    """A backend that is not thread-safe runs one call at a time: overlapping would only queue the calls."""
    assert make(concurrent_scripted(), overlap_steps="auto").overlap is True
    serial = ScriptedLLM(lambda req: DEFAULT_REPLIES[req.tag])
    assert make(serial, overlap_steps="auto").overlap is False
    assert make(serial, overlap_steps="on").overlap is True
    assert make(concurrent_scripted(), overlap_steps="off").overlap is False


def test_the_answer_is_generated_while_the_verifier_decides(make):
    """YES finds the answer under way; NO sends none of it (the dual-level answer instead)."""
    for verdict in ("yes", "no"):
        answer_started = threading.Event()
        seen: list[bool] = []

        def verify(_req: LLMRequest, verdict: str = verdict) -> str:
            seen.append(answer_started.wait(timeout=0.5))
            return verdict

        def logic_answer(_req: LLMRequest) -> str:
            answer_started.set()
            return DEFAULT_REPLIES["logic_answer"]

        _, answer = run(
            make(concurrent_scripted(logic_verify_pre=verify, logic_answer=logic_answer), overlap_steps="on")
        )
        assert seen == [True], verdict
        if verdict == "yes":
            assert answer.path == "logic_form" and answer.text == DEFAULT_REPLIES["logic_answer"]
            assert answer.trace["llm_calls"]["answer"] == 1 and "generate" in answer.trace["timings_ms"]
        else:
            assert answer.path == "dual_level" and answer.text == DEFAULT_REPLIES["answer"]
            assert answer.trace["fallback_reason"] == "the pre-check verifier said no"
