"""The query flow (``build_pipeline``) over the tiny index with a scripted LLM (handler mode, keyed by request tag):
every path (direct, refused, logic_form, dual_level fallbacks, logic_form_failed), the modes, the post-check
ablation, the trace, streaming, never-empty answers, one keyword call per query, timeouts and injection."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator

import pytest

from hxd2_ray.config import MultiStageConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.llm.wrappers import SerializedLLM
from hxd2_ray.retrieval import Answer, EmptyQuestionError, ModeUnavailableError, QueryEvent, QueryFlow, open_index
from hxd2_ray.retrieval.flow import PATHS
from hxd2_ray.retrieval.intent import load_multistage_prompts
from hxd2_ray.retrieval.parts import FlowParts
from hxd2_ray.wiring import build_parts, build_pipeline
from tests.unit.retrieval_fixtures import DIM, HOSTILE, build_tiny_index, key, keyword_reply

QUESTION = "Which prize did Thomas Südhof win?"
PROMPTS = load_multistage_prompts()


def step(s, p, o, alias, text=""):
    return {"step": text, "action": {"op": "retrieval", "args": {"s": s, "p": p, "o": o}, "alias": alias}}


def output(*aliases):
    return {"step": "Answer.", "action": {"op": "output", "args": {"aliases": [f"${a}" for a in aliases]}}}


GOOD_PLAN = json.dumps(
    {"steps": [step("Thomas Südhof", "award", None, "prize", "Which prize did Südhof win?"), output("prize")]},
    ensure_ascii=False,
)
UNKNOWN_ENTITY_PLAN = json.dumps({"steps": [step("Nobody Atall Whatsoever", "award", None, "prize"), output("prize")]})
BAD_PLAN = '{"steps": [{"step": "x", "action": {"op": "teleport", "args": {}}}]}'

ON_TOPIC_KEYWORDS = keyword_reply(["Thomas Südhof", "Nobel Prize"], ["award"])
OFF_TOPIC_KEYWORDS = keyword_reply(["weather", "Paris"], ["forecast"])

DEFAULT_REPLIES: dict[str, Any] = {
    "intent": "question",
    "keywords": ON_TOPIC_KEYWORDS,
    "logic_plan": GOOD_PLAN,
    "logic_repair": GOOD_PLAN,
    "logic_verify_pre": "yes",
    "logic_verify_post": "yes",
    "logic_answer": "Thomas Südhof won the Nobel Prize (2013).",
    "answer": "From the documents: Südhof won the Nobel Prize.",
    "direct": "Hello! Ask me about the knowledge base.",
    "logic_deduce": "cannot be determined",
}


def scripted(**overrides: Any) -> ScriptedLLM:
    """Handler-mode ScriptedLLM: a reply (or a callable ``req -> reply``) per request tag."""
    replies = {**DEFAULT_REPLIES, **overrides}

    def handler(req: LLMRequest) -> str | LLMResponse:
        if req.tag not in replies:
            raise AssertionError(f"unexpected LLM request tag {req.tag!r}")
        reply = replies[req.tag]
        return reply(req) if callable(reply) else reply

    return ScriptedLLM(handler)


class StreamingScripted(ScriptedLLM):
    """A ScriptedLLM that streams its reply word by word (the StreamingLLM extension)."""

    def stream(self, request: LLMRequest) -> Iterator[str]:
        text = self.complete([request])[0].text
        words = text.split(" ")
        for i, word in enumerate(words):
            yield word + (" " if i < len(words) - 1 else "")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tiny = build_tiny_index(tmp_path_factory.mktemp("ms") / "index")
    index = open_index(tiny.root, tiny.cfg)
    yield tiny, index, HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
    index.close()


def with_multistage(cfg, **ms):
    return cfg.model_copy(update={"multistage": MultiStageConfig(**ms)})


@pytest.fixture
def make(tiny):
    """make(llm, **MultiStageConfig fields) -> the query flow over the tiny index (closed afterwards)."""
    t, index, embedder = tiny
    built: list[QueryFlow] = []

    def _make(llm, **ms) -> QueryFlow:
        pipeline = build_pipeline("auto", index, llm, embedder, with_multistage(t.cfg, **ms))
        built.append(pipeline)
        return pipeline

    yield _make
    for p in built:
        p.close()


def run(pipeline: QueryFlow, question: str = QUESTION, **kwargs) -> tuple[list[QueryEvent], Answer]:
    events = list(pipeline.answer_stream(question, **kwargs))
    finals = [e for e in events if e.kind == "final"]
    assert len(finals) == 1 and events[-1].kind == "final"
    answer = finals[0].answer
    assert isinstance(answer, Answer)
    deltas = "".join(e.text for e in events if e.kind == "delta")
    # never empty, and the streamed text is the answer
    assert answer.text.strip()
    assert deltas.strip() == answer.text.strip()
    assert answer.path in PATHS and answer.trace["path"] == answer.path
    return events, answer


def tags(llm: ScriptedLLM) -> list[str]:
    return [r.tag for r in llm.requests]


# ------------------------------------------------------------------------------------------- direct


def test_greeting_by_rule_is_answered_directly(make):
    llm = scripted()
    events, answer = run(make(llm), "hello")
    assert answer.path == "direct" and answer.text == DEFAULT_REPLIES["direct"]
    assert tags(llm) == ["direct"]  # no intent call (rule), no keywords, no plan
    assert answer.trace["intent"]["source"] == "rule" and answer.trace["intent"]["label"] == "greeting"
    assert "greeting" in answer.trace["path_reason"]
    req = llm.requests[0]
    assert "HuixiangDou2" in req.messages[0]["content"] and req.messages[-1]["content"] == "hello"
    assert req.max_tokens == MultiStageConfig().direct_max_tokens
    assert answer.references == ()


def test_off_topic_by_llm_is_answered_directly(make):
    llm = scripted(intent="off_topic", direct="Here is one: ...")
    _, answer = run(make(llm), "Tell me a joke about cats")
    assert answer.path == "direct" and answer.trace["intent"] == {
        **answer.trace["intent"],
        "label": "off_topic",
        "source": "llm",
    }
    assert tags(llm) == ["intent", "direct"]


def test_identity_and_kb_description(make):
    llm = scripted()
    _, answer = run(make(llm, knowledge_base_description="Stanford neuroscientists"), "你是谁？")
    assert answer.path == "direct" and answer.language == "zh"
    system = llm.requests[0].messages[0]["content"]
    assert "茴香豆2" in system and "知识库涵盖：Stanford neuroscientists" in system


class BrokenStream(ScriptedLLM):
    """Streams two words of its reply, then fails."""

    def stream(self, request: LLMRequest) -> Iterator[str]:
        text = self.complete([request])[0].text
        yield from (w + " " for w in text.split(" ")[:2])
        raise ConnectionError("stream cut")


def test_a_cut_stream_keeps_what_went_out(make):
    llm = BrokenStream(lambda req: {**DEFAULT_REPLIES}[req.tag])
    _, answer = run(make(llm), "hi")  # run() checks that the deltas are the final text
    assert answer.path == "direct" and answer.text == "Hello! Ask"
    assert any("stream cut" in n for n in answer.notices) and answer.finish_reason == "error"
    _, answer = run(make(llm))
    assert answer.path == "logic_form" and answer.text == "Thomas Südhof"
    assert any("cut by an error" in n for n in answer.notices)


def test_direct_reply_never_empty(make):
    for llm in (scripted(direct=""), scripted(direct=LLMResponse("", error="engine down", finish_reason="error"))):
        _, answer = run(make(llm), "hi")
        assert answer.path == "direct" and answer.text == PROMPTS.for_language("en").greeting_reply
        assert answer.notices


# ------------------------------------------------------------------------------------------ refused


def test_off_topic_question_below_threshold_is_refused(make):
    llm = scripted(keywords=OFF_TOPIC_KEYWORDS)
    events, answer = run(make(llm), "What is the weather forecast for Paris?")
    assert answer.path == "refused"
    assert answer.text == PROMPTS.for_language("en").refusal
    refusal = answer.trace["refusal"]
    assert refusal["refused"] and refusal["score"] < refusal["threshold"] == 0.25
    assert refusal["basis"] == "both"
    assert "threshold" in answer.trace["path_reason"]
    assert tags(llm) == ["intent", "keywords"]  # nothing after the gate
    assert any(e.kind == "progress" and e.step == "refusal" and e.detail["refused"] for e in events)
    assert answer.trace["keywords"]["low_level"] == ["weather", "Paris"]


def test_refusal_in_chinese(make):
    llm = scripted(keywords=keyword_reply(["天气", "上海"], ["预报"]))
    _, answer = run(make(llm), "明天上海的天气怎么样？")
    assert answer.path == "refused" and answer.language == "zh"
    assert answer.text == PROMPTS.for_language("zh").refusal


def test_refusal_rule_min_catches_made_up_keywords(make):
    llm = scripted()  # on-topic keywords for an off-topic question
    _, answer = run(make(llm, refusal_rule="min"), "How do I renew my passport?")
    assert answer.path == "refused" and answer.trace["refusal"]["rule"] == "min"
    assert answer.trace["refusal"]["keyword_score"] > 0.25 > answer.trace["refusal"]["question_score"]


def test_threshold_is_configurable(make):
    llm = scripted(keywords=OFF_TOPIC_KEYWORDS)
    _, answer = run(make(llm, refusal_threshold=-1.0), "What is the weather forecast for Paris?")
    assert answer.path != "refused"
    llm = scripted()
    _, answer = run(make(llm, refusal_threshold=0.99, refusal_names=False), QUESTION)
    assert answer.path == "refused"
    # ... but a question that names an entity of the index is never refused, whatever the threshold.
    _, answer = run(make(scripted(), refusal_threshold=0.99), QUESTION)
    assert answer.path != "refused"
    assert answer.trace["refusal"]["named"]["key"] == "thomas südhof" and not answer.trace["refusal"]["refused"]


def test_a_broken_gate_fails_open(make):
    llm = scripted()
    pipeline = make(llm)

    def broken(*args, **kwargs):
        raise OSError("faiss shard unreadable")

    pipeline.refusal_gate.score = broken
    _, answer = run(pipeline)
    assert answer.path == "logic_form"
    assert answer.trace["refusal"] == {"enabled": True, "skipped": True, "error": "OSError: faiss shard unreadable"}
    assert any("refusal gate was skipped" in n for n in answer.notices)


# ---------------------------------------------------------------------------------------- logic form


def test_logic_form_path_and_trace(make):
    llm = scripted()
    events, answer = run(make(llm))
    assert answer.path == "logic_form" and answer.mode == "auto"
    assert answer.text == DEFAULT_REPLIES["logic_answer"]
    assert tags(llm) == ["intent", "keywords", "logic_plan", "logic_verify_pre", "logic_answer"]
    assert tags(llm).count("keywords") == 1
    trace = answer.trace
    assert trace["intent"]["label"] == "question"
    assert trace["refusal"]["score"] >= trace["refusal"]["threshold"] == 0.25
    assert trace["verifier"] == {
        "mode": "pre",
        "ran": True,
        "gating": True,
        "supported": True,
        "raw": "yes",
        "reason": "yes",
    }
    assert trace["fallback_reason"] is None and trace["path_reason"] == "pre-check verifier said yes"
    plan_steps = trace["logic"]["plan"]["plan"]["steps"]
    assert plan_steps[0]["action"]["args"] == {"s": "Thomas Südhof", "p": "award", "o": None}
    first = trace["logic"]["evidence"]["steps"][0]
    assert first["queries"] and all({"template", "params", "rows"} <= set(q) for q in first["queries"])
    assert any(q["template"] == "lf_edges" and q["params"]["keys"] == [key("Thomas Südhof")] for q in first["queries"])
    assert first["value"]["names"] == ["Nobel Prize"] and first["sub_answer"] == "Nobel Prize"
    for stage in (
        "intent",
        "retrieve",
        "refusal",
        "logic_plan",
        "logic_execute",
        "logic_total",
        "verify",
        "generate",
        "total",
    ):
        assert stage in trace["timings_ms"], stage
    assert trace["tokens"]["plan"]["prompt"] > 0 and trace["tokens"]["answer"]["completion"] > 0
    assert trace["llm_calls"] == {"intent": 1, "keywords": 1, "plan": 1, "execute": 0, "verify": 1, "answer": 1}
    assert trace["tokens_total"]["prompt"] == sum(v["prompt"] for v in trace["tokens"].values())
    assert trace["prompt_versions"]["multistage"].startswith("v1-")
    # the evidence reached the answer prompt (steps + sub-answers), question last
    prompt = llm.requests_by_tag("logic_answer")[0].messages[-1]["content"]
    assert "Nobel Prize" in prompt and "Which prize did Südhof win?" in prompt and prompt.endswith(QUESTION)
    # references: documents of the chunks mentioning the entities used
    assert "thomas_sudhof.md" in [r.source_id for r in answer.references]
    out = answer.to_dict(trace=True)
    assert out["path"] == "logic_form" and out["mode"] == "auto" and out["answer"] == answer.text
    json.dumps(out, ensure_ascii=False)  # JSON-ready
    assert "trace" not in answer.to_dict()
    steps = [e.step for e in events if e.kind == "progress"]
    assert steps == ["intent", "refusal", "logic_form", "verifier"]


def test_relation_names_reach_the_planner(make, tiny):
    llm = scripted()
    pipeline = make(llm)
    assert set(pipeline.logic.relations) == {"employment", "award", "research topic", "discovery"}
    assert tiny[1].graph.top_relation_keywords(2) == ["employment", "award"]  # most frequent first (3, 2)
    run(pipeline)
    plan_prompt = llm.requests_by_tag("logic_plan")[0].messages[-1]["content"]
    assert "employment" in plan_prompt and "research topic" in plan_prompt


def test_streaming_backend_streams_the_logic_answer(make):
    llm = StreamingScripted(lambda req: {**DEFAULT_REPLIES}[req.tag])
    events, answer = run(make(llm))
    assert answer.path == "logic_form"
    assert len([e for e in events if e.kind == "delta"]) == len(DEFAULT_REPLIES["logic_answer"].split(" "))


def test_chinese_question_gets_a_chinese_logic_prompt(make):
    plan = json.dumps(
        {"steps": [step("Thomas Südhof", "award", None, "p", "苏德霍夫获得了什么奖？"), output("p")]},
        ensure_ascii=False,
    )
    llm = scripted(logic_plan=plan, logic_answer="托马斯·苏德霍夫获得了诺贝尔奖。")
    _, answer = run(make(llm), "Thomas Südhof 获得了什么奖项？")
    assert answer.path == "logic_form" and answer.language == "zh"
    system = llm.requests_by_tag("logic_answer")[0].messages[0]["content"]
    assert "用中文回答" in system


# ------------------------------------------------------------------------------------------ fallback


@pytest.mark.parametrize("reply,why", [("no", "said no"), ("NO.", "said no"), ("maybe", "unclear"), ("", "unclear")])
def test_verifier_no_or_unclear_falls_back(make, reply, why):
    llm = scripted(logic_verify_pre=reply)
    _, answer = run(make(llm))
    assert answer.path == "dual_level" and answer.text == DEFAULT_REPLIES["answer"]
    assert why in answer.trace["fallback_reason"] and answer.trace["verifier"]["supported"] is False
    assert answer.trace["verifier"]["raw"] == reply
    assert tags(llm) == ["intent", "keywords", "logic_plan", "logic_verify_pre", "answer"]  # keywords reused
    assert answer.trace["path_reason"].startswith("fallback:")
    assert answer.trace["retrieval"]["keywords"]["low_level"] == ["Thomas Südhof", "Nobel Prize"]
    assert answer.references  # the dual-level context's documents


def test_invalid_plan_twice_falls_back(make):
    llm = scripted(logic_plan=BAD_PLAN, logic_repair="still not a plan")
    _, answer = run(make(llm))
    assert answer.path == "dual_level"
    assert answer.trace["fallback_reason"].startswith("plan failed: invalid plan after one repair")
    assert tags(llm) == ["intent", "keywords", "logic_plan", "logic_repair", "answer"]
    assert answer.trace["logic"]["plan"]["replies"] == [BAD_PLAN, "still not a plan"]
    assert answer.trace["verifier"] == {"mode": "pre", "ran": False}


def test_repaired_plan_is_used(make):
    llm = scripted(logic_plan=BAD_PLAN, logic_repair=GOOD_PLAN)
    _, answer = run(make(llm))
    assert answer.path == "logic_form" and answer.trace["logic"]["plan"]["repaired"] is True


def test_executor_failure_falls_back(make):
    llm = scripted(logic_plan=UNKNOWN_ENTITY_PLAN)
    _, answer = run(make(llm))
    assert answer.path == "dual_level"
    assert answer.trace["fallback_reason"].startswith("executor failed: step 1 (retrieval)")
    assert answer.trace["logic"]["evidence"]["failed"] is True
    assert "logic_verify_pre" not in tags(llm)


def test_exception_in_planning_falls_back(make):
    def boom(req):
        raise RuntimeError("planner exploded")

    llm = scripted(logic_plan=boom)
    _, answer = run(make(llm))
    assert answer.path == "dual_level"
    assert answer.trace["fallback_reason"] == "exception: RuntimeError: planner exploded"


def test_exception_in_the_verifier_falls_back(make):
    def boom(req):
        raise ValueError("verifier exploded")

    llm = scripted(logic_verify_pre=boom)
    _, answer = run(make(llm))
    assert answer.path == "dual_level" and "verifier exploded" in answer.trace["fallback_reason"]


def test_failed_llm_call_in_planning_falls_back(make):
    llm = scripted(logic_plan=LLMResponse("", error="CUDA out of memory", finish_reason="error"))
    _, answer = run(make(llm))
    assert answer.path == "dual_level" and "CUDA out of memory" in answer.trace["fallback_reason"]


def test_timeout_falls_back_and_cancels_the_worker(make):
    release = threading.Event()
    plan_returned = threading.Event()

    def slow_plan(req):
        release.wait(60)
        plan_returned.set()
        return BAD_PLAN  # invalid: a live worker would now ask for a repair

    llm = scripted(logic_plan=slow_plan)
    pipeline = make(llm, logic_timeout_s=0.3)
    collected = []
    for event in pipeline.answer_stream(QUESTION):
        collected.append(event)
        if event.kind == "progress" and event.step == "fallback":
            # The flow fell back while the planner's LLM call was still stuck: it did not wait for the worker.
            assert not plan_returned.is_set()
            # the fallback answer waits for the guarded LLM: let the stuck call finish now
            release.set()
    answer = collected[-1].answer
    assert answer.path == "dual_level" and answer.text == DEFAULT_REPLIES["answer"]
    assert answer.trace["fallback_reason"].startswith("timeout")
    assert answer.trace["logic"]["timed_out"] is True
    assert answer.trace["timings_ms"]["logic_total"] >= 250  # never before the deadline
    pipeline.logic._pool.shutdown(wait=True)  # the abandoned worker has finished
    assert plan_returned.is_set()
    assert "logic_repair" not in tags(llm)  # its next LLM call was cancelled
    assert tags(llm).count("answer") == 1


def test_timeout_with_a_sleeping_handler(make):
    def sleepy(req):
        time.sleep(0.6)
        return GOOD_PLAN

    llm = scripted(logic_plan=sleepy)
    _, answer = run(make(llm, logic_timeout_s=0.1))
    assert answer.path == "dual_level" and answer.trace["fallback_reason"].startswith("timeout")
    assert answer.trace["logic"]["evidence"] is None


def test_empty_logic_answer_falls_back(make):
    llm = scripted(logic_answer="   ")
    _, answer = run(make(llm))
    assert answer.path == "dual_level" and answer.trace["fallback_reason"] == "the logic-form answer was empty"


def test_empty_dual_answer_is_replaced(make):
    llm = scripted(logic_verify_pre="no", answer="")
    _, answer = run(make(llm))
    assert answer.path == "dual_level" and answer.text == PROMPTS.for_language("en").empty_answer
    assert any("empty" in n for n in answer.notices)


def test_one_keyword_call_without_the_gate(make):
    llm = scripted(logic_verify_pre="no")
    _, answer = run(make(llm, refusal_enabled=False, intent_enabled=False))
    assert answer.path == "dual_level"
    assert tags(llm) == ["logic_plan", "logic_verify_pre", "keywords", "answer"]
    assert answer.trace["refusal"] == {"enabled": False} and answer.trace["intent"]["source"] == "disabled"


def test_generation_question_is_what_the_answer_prompt_carries(make):
    instruction = "Answer with one name only. " + QUESTION
    llm = scripted(logic_verify_pre="no")
    _, answer = run(make(llm), QUESTION, generation_question=instruction)
    assert llm.requests_by_tag("logic_plan")[0].messages[-1]["content"].endswith(QUESTION)
    assert llm.requests_by_tag("answer")[0].messages[-1]["content"].endswith(instruction)
    assert llm.requests_by_tag("keywords")[0].messages[-1]["content"].endswith(QUESTION)
    assert answer.trace["generation_question"] == instruction
    llm = scripted()
    _, answer = run(make(llm), QUESTION, generation_question=instruction)
    assert llm.requests_by_tag("logic_answer")[0].messages[-1]["content"].endswith(instruction)


# ------------------------------------------------------------------------------------ verifier modes


def test_post_check_yes(make):
    llm = scripted()
    events, answer = run(make(llm, verifier_mode="post"))
    assert answer.path == "logic_form" and answer.text == DEFAULT_REPLIES["logic_answer"]
    assert tags(llm) == ["intent", "keywords", "logic_plan", "logic_answer", "logic_verify_post"]
    verify = llm.requests_by_tag("logic_verify_post")[0].messages[-1]["content"]
    assert DEFAULT_REPLIES["logic_answer"] in verify  # the answer is checked together with the evidence
    assert answer.trace["verifier"]["mode"] == "post" and answer.trace["path_reason"] == "post-check verifier said yes"
    # nothing is streamed before the check passed: one delta, after the verifier stage
    kinds = [(e.kind, e.step) for e in events]
    assert kinds.index(("progress", "verifier")) < kinds.index(("delta", ""))
    assert len([e for e in events if e.kind == "delta"]) == 1


def test_post_check_no_falls_back(make):
    llm = scripted(logic_verify_post="no")
    _, answer = run(make(llm, verifier_mode="post"))
    assert answer.path == "dual_level" and answer.text == DEFAULT_REPLIES["answer"]
    assert answer.trace["rejected_logic_answer"] == DEFAULT_REPLIES["logic_answer"]
    assert "post-check verifier said no" in answer.trace["fallback_reason"]


def test_no_verifier(make):
    llm = scripted()
    _, answer = run(make(llm, verifier_mode="none"))
    assert answer.path == "logic_form" and not [t for t in tags(llm) if t.startswith("logic_verify")]
    assert answer.trace["verifier"] == {"mode": "none", "ran": False}


def test_modes_need_their_parts(tiny):
    t, index, embedder = tiny
    llm = scripted()
    full = build_parts(index, llm, embedder, t.cfg)
    # Without a post-check verifier the post-check modes are unavailable, and they say what they lack.
    pre_only = FlowParts(planner=full.planner, executor=full.executor, verifiers={"pre": full.verifiers["pre"]})
    with build_pipeline("auto", index, llm, embedder, t.cfg, pre_only) as flow:
        assert "auto_post" not in flow.modes and "auto" in flow.modes
        with pytest.raises(ModeUnavailableError, match="auto_post.*post-check verifier"):
            flow.answer(QUESTION, mode="auto_post")
    with pytest.raises(ModeUnavailableError, match="pre-check verifier"):
        build_pipeline("auto", index, llm, embedder, t.cfg, FlowParts(planner=full.planner, executor=full.executor))
    # Without an index only llm_only can run; without an LLM only chunk_vector.
    with build_pipeline("llm_only", None, llm, None, t.cfg) as flow:
        assert flow.modes == ("llm_only",)
        with pytest.raises(ModeUnavailableError, match="needs an index"):
            flow.answer(QUESTION, mode="dual")
    with build_pipeline("chunk_vector", index, None, embedder, t.cfg) as flow:
        assert flow.modes == ("chunk_vector",)
        assert flow.answer(QUESTION).references


# --------------------------------------------------------------------------------------------- modes


def test_mode_dual(make):
    llm = scripted()
    events, answer = run(make(llm), mode="dual")
    assert answer.path == "dual_level" and answer.mode == "dual"
    assert tags(llm) == ["keywords", "answer"]
    assert answer.trace["path_reason"] == "mode dual: dual-level retrieval only"
    assert answer.trace["fallback_reason"] is None and not [e for e in events if e.kind == "progress"]


def test_mode_logic_success_records_the_verifier_without_gating(make):
    llm = scripted(logic_verify_pre="no")
    _, answer = run(make(llm), mode="logic")
    assert answer.path == "logic_form" and answer.text == DEFAULT_REPLIES["logic_answer"]
    assert tags(llm) == ["logic_plan", "logic_verify_pre", "logic_answer"]
    assert answer.trace["verifier"]["gating"] is False and answer.trace["verifier"]["supported"] is False


@pytest.mark.parametrize(
    "overrides,reason",
    [
        ({"logic_plan": UNKNOWN_ENTITY_PLAN}, "executor failed"),
        ({"logic_plan": BAD_PLAN, "logic_repair": BAD_PLAN}, "plan failed"),
        ({"logic_answer": ""}, "the logic-form answer was empty"),
    ],
)
def test_mode_logic_failure_never_falls_back(make, overrides, reason):
    llm = scripted(**overrides)
    _, answer = run(make(llm, verifier_mode="none"), mode="logic")
    assert answer.path == "logic_form_failed"
    assert answer.text.startswith("The logic-form retrieval could not answer this question (")
    assert reason in answer.text and reason in answer.trace["failure_reason"]
    assert "answer" not in tags(llm) and "keywords" not in tags(llm)


def test_mode_logic_failure_in_chinese(make):
    llm = scripted(logic_plan=UNKNOWN_ENTITY_PLAN)
    _, answer = run(make(llm), "诺贝尔奖得主是谁？", mode="logic")
    assert answer.path == "logic_form_failed" and answer.text.startswith("逻辑形式检索无法回答这个问题")


def test_bad_input(make):
    pipeline = make(scripted())
    with pytest.raises(EmptyQuestionError):
        list(pipeline.answer_stream("   "))
    with pytest.raises(ValueError, match="unknown mode"):
        list(pipeline.answer_stream(QUESTION, mode="fast"))
    with pytest.raises(Exception, match="extra"):
        MultiStageConfig(verifier="pre")
    with pytest.raises(Exception):
        MultiStageConfig(verifier_mode="sometimes")


def test_answer_collects_deltas(make):
    got: list[str] = []
    answer = make(scripted()).answer(QUESTION, on_delta=got.append)
    assert "".join(got) == answer.text and answer.path == "logic_form"


# ------------------------------------------------------------------------------------------ security


def test_cypher_injection_through_the_whole_pipeline(tmp_path):
    tiny = build_tiny_index(tmp_path / "hostile", hostile=True)
    index = open_index(tiny.root, tiny.cfg)
    embedder = HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
    before = index.graph.counts()
    hostile_plan = json.dumps({"steps": [step(HOSTILE, HOSTILE, None, "x"), output("x")]})
    try:
        for overrides, mode in (
            ({"keywords": keyword_reply([HOSTILE], [HOSTILE]), "logic_plan": hostile_plan}, "auto"),
            (
                {"keywords": keyword_reply([HOSTILE], [HOSTILE]), "logic_plan": hostile_plan, "logic_verify_pre": "no"},
                "auto",
            ),
            ({"logic_plan": hostile_plan}, "logic"),
            ({"keywords": keyword_reply([HOSTILE], [])}, "dual"),
        ):
            llm = scripted(**overrides)
            pipeline = build_pipeline("auto", index, llm, embedder, with_multistage(tiny.cfg, refusal_threshold=-1.0))
            try:
                _, answer = run(pipeline, HOSTILE, mode=mode)
            finally:
                pipeline.close()
            assert answer.text.strip()
            assert index.graph.counts() == before
            if mode != "dual":
                # the hostile name was linked as data (a bound parameter) to the hostile entity, which has no
                # edges: the step fails cleanly (auto falls back, logic mode says why)
                steps = answer.trace["logic"]["evidence"]["steps"]
                assert any(key(HOSTILE) in (q["params"].get("keys") or []) for q in steps[0]["queries"])
                assert answer.path in ("dual_level", "logic_form_failed")
    finally:
        index.close()
    reopened = open_index(tiny.root, tiny.cfg)
    try:
        assert reopened.graph.counts() == before == tiny.counts | before
    finally:
        reopened.close()


# ---------------------------------------------------------------------------------------- the guard


def test_serialized_llm_passes_through_and_cancels():
    inner = ScriptedLLM(lambda req: "ok")
    guard = SerializedLLM(inner)
    assert guard.model_id == inner.model_id and guard.count_tokens("a b") == inner.count_tokens("a b")
    assert guard.supports_json_schema is True and guard.requests is inner.requests
    assert not callable(getattr(guard, "stream", None))  # the inner client cannot stream
    assert callable(getattr(SerializedLLM(StreamingScripted(lambda r: "a b")), "stream", None))
    req = LLMRequest(messages=({"role": "user", "content": "x"},), tag="t")
    assert guard.complete([req])[0].text == "ok"
    event = threading.Event()
    with guard.cancel_on(event):
        assert guard.complete([req])[0].text == "ok"
        event.set()
        resp = guard.complete([req, req])
        assert [r.error.startswith("cancelled") for r in resp] == [True, True]
    assert guard.complete([req])[0].text == "ok"  # other calls of this thread are not affected afterwards
    assert len(inner.requests) == 3


def test_serialized_llm_runs_one_call_at_a_time():
    active = []
    peak = []

    def handler(req):
        active.append(1)
        peak.append(len(active))
        time.sleep(0.05)
        active.pop()
        return "ok"

    guard = SerializedLLM(ScriptedLLM(handler))
    req = LLMRequest(messages=({"role": "user", "content": "x"},))
    threads = [threading.Thread(target=guard.complete, args=([req],)) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert max(peak) == 1 and len(peak) == 4


def test_close_is_safe(make):
    pipeline = make(scripted())
    pipeline.close()
    _, answer = run(pipeline)  # a closed worker pool: the logic stage fails, the query still answers
    assert answer.path == "dual_level" and answer.trace["fallback_reason"].startswith("exception")


class _CountingLLM:
    """Records the most calls in flight at once. Each call waits a little so overlaps can happen; a thread-safe
    one waits until all four calls are inside at once (which a lock would make impossible)."""

    model_id = "counting"
    supports_json_schema = False
    max_model_len = None

    def __init__(self, thread_safe: bool):
        self.thread_safe = thread_safe
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        self._all_inside = threading.Barrier(4, timeout=30)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def complete(self, requests):
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        if self.thread_safe:
            self._all_inside.wait()
        else:
            time.sleep(0.05)
        with self._lock:
            self.in_flight -= 1
        return [LLMResponse("ok") for _ in requests]


@pytest.mark.parametrize("thread_safe, expected_peak", [(False, 1), (True, 4)])
def test_serialized_llm_locks_only_backends_that_are_not_thread_safe(thread_safe, expected_peak):
    inner = _CountingLLM(thread_safe)
    guarded = SerializedLLM(inner)
    start = threading.Barrier(4)

    def call() -> None:
        start.wait()
        assert guarded.complete([LLMRequest(messages=({"role": "user", "content": "q"},))])[0].text == "ok"

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert inner.peak == expected_peak


# ------------------------------------------------------------------------------------------ graph walk


class FakeWalk:
    """A GraphRetriever (the seam GraphFlow's retriever satisfies) with fixed targets: records the questions."""

    def __init__(self, targets=(), reason="", fail: Exception | None = None):
        self.targets, self.reason, self.fail, self.questions = tuple(targets), reason, fail, []
        self.topics: list[str | None] = []

    def retrieve(self, question, topic=None):
        from types import SimpleNamespace

        self.questions.append(question)
        self.topics.append(topic)
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(
            question=question,
            targets=self.targets,
            reason=self.reason,
            to_dict=lambda: {"targets": [t.name for t in self.targets], "reason": self.reason},
        )


def _target(name, kind="entity", key=None, score=0.5, via="award"):
    from types import SimpleNamespace

    step = SimpleNamespace(source="Thomas Südhof", relation=via, target=name)
    return SimpleNamespace(key=key or name.lower(), name=name, kind=kind, score=score, path=(step,))


@pytest.fixture
def with_walk(tiny):
    t, index, embedder = tiny
    built: list[QueryFlow] = []

    def _make(llm, walk, **ms) -> QueryFlow:
        cfg = with_multistage(t.cfg, **ms)
        parts = build_parts(index, llm, embedder, cfg)
        flow = build_pipeline(
            "auto",
            index,
            llm,
            embedder,
            cfg,
            FlowParts(parts.planner, parts.executor, parts.verifiers, graph_retriever=walk),
        )
        built.append(flow)
        return flow

    yield _make
    for f in built:
        f.close()


def test_mode_graphflow_answers_with_the_ranked_entities_and_no_llm(with_walk):
    llm = scripted()
    walk = FakeWalk(
        [
            _target("Nobel Prize", score=0.7),
            _target("Neurexin", score=0.2),
            _target("Thomas Südhof", kind="chunk", key="c1"),
        ]
    )
    events, answer = run(with_walk(llm, walk), mode="graphflow")
    assert answer.path == "graphflow" and answer.text == "Nobel Prize | Neurexin"
    assert answer.candidates == ("Nobel Prize", "Neurexin")
    assert [r.source_id for r in answer.references] == ["thomas_sudhof.md"]  # the chunk the walk reached
    assert llm.requests == [] and walk.questions == [QUESTION]
    assert answer.trace["graphflow"]["targets"] == ["Nobel Prize", "Neurexin", "Thomas Südhof"]
    assert answer.to_dict()["candidates"] == ["Nobel Prize", "Neurexin"]


def test_a_given_topic_reaches_the_walk_and_dual_level_retrieval(with_walk):
    walk = FakeWalk([_target("Nobel Prize")])
    _, answer = run(with_walk(scripted(), walk), mode="graphflow", topic="Thomas Südhof")
    assert walk.topics == ["Thomas Südhof"] and answer.trace["topic"] == "Thomas Südhof"
    _, answer = run(with_walk(scripted(), walk), mode="dual", topic="thomas  südhof")
    channels = {h.channel for e in answer.retrieval.entities for h in e.hits}
    assert "topic" in channels, channels  # the topic is an exact match of its own channel


@pytest.mark.parametrize(
    "walk,reason",
    [
        (FakeWalk(reason="no linkable start node in the question"), "no linkable start node"),
        (FakeWalk(fail=RuntimeError("policy exploded")), "policy exploded"),
    ],
)
def test_mode_graphflow_without_targets_says_why(with_walk, walk, reason):
    _, answer = run(with_walk(scripted(), walk), mode="graphflow")
    assert answer.path == "graphflow_failed" and reason in answer.text and reason in answer.trace["failure_reason"]


def test_auto_walks_the_graph_after_a_failed_logic_form(with_walk):
    llm = scripted(logic_plan=UNKNOWN_ENTITY_PLAN, logic_answer="Nobel Prize, by the walk.")
    walk = FakeWalk([_target("Nobel Prize"), _target("Thomas Südhof", kind="chunk", key="c1")])
    events, answer = run(with_walk(llm, walk, graph_walk=True))
    assert answer.path == "graphflow" and answer.text == "Nobel Prize, by the walk."
    # the references are the walk's chunks the answer was written from, not dual-level's context
    assert [(r.source_id, r.chunk_ids) for r in answer.references] == [("thomas_sudhof.md", ("c1",))]
    assert "executor failed" in answer.trace["path_reason"]
    assert [e.step for e in events if e.kind == "progress"] == [
        "intent",
        "refusal",
        "logic_form",
        "graph_walk",
        "verifier",
    ]
    evidence = llm.requests_by_tag("logic_verify_pre")[0].messages[-1]["content"]
    assert "Thomas Südhof --award--> Nobel Prize" in evidence  # the walk's path is what the verifier checked
    assert tags(llm) == ["intent", "keywords", "logic_plan", "logic_verify_pre", "logic_answer"]


def test_auto_falls_back_to_dual_level_when_the_walk_fails_too(with_walk):
    llm = scripted(logic_plan=UNKNOWN_ENTITY_PLAN)
    _, answer = run(with_walk(llm, FakeWalk(reason="no linkable start node"), graph_walk=True))
    assert answer.path == "dual_level"
    assert (
        answer.fallback_reason.startswith("executor failed")
        and "graph walk: no linkable start node" in answer.fallback_reason
    )
    # Off by default: the walk is not tried.
    walk = FakeWalk([_target("Nobel Prize")])
    _, answer = run(with_walk(scripted(logic_plan=UNKNOWN_ENTITY_PLAN), walk))
    assert answer.path == "dual_level" and walk.questions == []
