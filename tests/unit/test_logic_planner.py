"""Logic-form planner: structured output, one repair round with the validator's reason, prompt data."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.llm.base import LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.logic.plan import Plan
from hxd2_ray.logic.plan_validation import plan_json_schema
from hxd2_ray.logic.planner import LogicFormPlanner, load_logic_prompts, parse_logic_prompts

VALID = {
    "steps": [
        {
            "step": "Who directed The Lookout?",
            "action": {"op": "retrieval", "args": {"s": "The Lookout", "p": "directed_by", "o": None}, "alias": "d"},
        },
        {
            "step": "Which other films did they direct?",
            "action": {
                "op": "retrieval",
                "args": {"s": None, "p": "directed_by", "o": "$d", "exclude": ["The Lookout"]},
                "alias": "films",
            },
        },
        {"step": "How many?", "action": {"op": "count", "args": {"items": "$films"}, "alias": "n"}},
        {"step": "Answer", "action": {"op": "output", "args": {"aliases": ["$n"]}}},
    ]
}
UNKNOWN_OP = {"steps": [{"step": "x", "action": {"op": "get_spo", "args": {"s": "The Lookout"}, "alias": "a"}}]}
UNDEFINED = {"steps": [{"step": "x", "action": {"op": "count", "args": {"items": "$films"}, "alias": "n"}}]}
QUESTION = "How many other films did the director of The Lookout direct?"


def test_valid_plan_in_one_call():
    llm = ScriptedLLM([json.dumps(VALID)])
    result = LogicFormPlanner(llm).plan(QUESTION)
    assert result.ok and isinstance(result.plan, Plan)
    assert [s.op for s in result.plan.steps] == ["retrieval", "retrieval", "count", "output"]
    assert result.calls == 1 and llm.complete_calls == 1 and not result.repaired
    assert result.prompt_tokens > 0 and result.completion_tokens > 0
    assert result.replies == (json.dumps(VALID),)
    req = llm.requests[0]
    assert req.tag == "logic_plan"
    assert req.json_schema == plan_json_schema()  # ScriptedLLM supports structured output
    assert req.messages[0]["role"] == "system" and "retrieval" in req.messages[0]["content"]
    assert req.messages[-1]["content"].endswith(QUESTION)
    assert result.language == "en" and result.prompt_version.startswith("v1-")


def test_invalid_plan_then_repaired_takes_exactly_two_calls():
    llm = ScriptedLLM([json.dumps(UNKNOWN_OP), json.dumps(VALID)])
    result = LogicFormPlanner(llm).plan(QUESTION)
    assert result.ok and result.repaired
    assert result.calls == 2 and llm.complete_calls == 2
    assert "unknown operator" in result.first_error
    repair = llm.requests[1]
    assert repair.tag == "logic_repair"
    assert [m["role"] for m in repair.messages] == ["system", "user", "assistant", "user"]
    assert repair.messages[2]["content"] == json.dumps(UNKNOWN_OP)
    assert "unknown operator" in repair.messages[3]["content"] and "get_spo" in repair.messages[3]["content"]


def test_invalid_plan_twice_fails_with_reason():
    llm = ScriptedLLM([json.dumps(UNKNOWN_OP), json.dumps(UNDEFINED)])
    result = LogicFormPlanner(llm).plan(QUESTION)
    assert not result.ok and result.plan is None
    assert result.calls == 2 and llm.complete_calls == 2
    assert "invalid plan after one repair" in result.error
    assert "$films is not defined" in result.error and "unknown operator" in result.error
    assert len(result.replies) == 2


def test_not_json_then_fenced_plan_without_structured_output():
    class PlainLLM(ScriptedLLM):
        supports_json_schema = False

    reply = "Sure! Here is the plan:\n```json\n" + json.dumps(VALID) + "\n```"
    llm = PlainLLM(["I think the director is someone.", reply])
    result = LogicFormPlanner(llm).plan(QUESTION)
    assert result.ok and result.repaired
    assert "not JSON" in result.first_error
    assert all(r.json_schema is None for r in llm.requests)


def test_llm_error_fails_without_repair():
    llm = ScriptedLLM([json.dumps(VALID)], fail_first_n=1)
    result = LogicFormPlanner(llm).plan(QUESTION)
    assert not result.ok and "LLM error" in result.error and result.calls == 1


def test_chinese_question_uses_chinese_prompt_and_relation_hint():
    llm = ScriptedLLM(lambda req: json.dumps(VALID))
    result = LogicFormPlanner(llm).plan("浙辅802比它的亲本高多少？", relations=["亲本", "株高厘米", "亲本"])
    assert result.ok and result.language == "zh"
    system, user = (m["content"] for m in llm.requests[0].messages)
    assert "算子" in system and "示例" in system
    assert "图谱中的关系名：亲本, 株高厘米" in user
    assert user.endswith("问题：浙辅802比它的亲本高多少？")
    en = LogicFormPlanner(ScriptedLLM([json.dumps(VALID)])).messages("q", "en", relations=[])
    assert en[1]["content"] == "Question: q"  # no hint line when no relations are given


def test_prompt_examples_are_valid_plans_and_broken_examples_fail_loading():
    prompts = load_logic_prompts()
    for lang in ("en", "zh"):
        lp = prompts.for_language(lang)
        ops = {s.op for _, plan in lp.examples for s in plan.steps}
        assert {"retrieval", "count", "math", "output"} <= ops
        assert any(len([s for s in plan.steps if s.op == "retrieval"]) >= 2 for _, plan in lp.examples)
    assert prompts.for_language("fr") is prompts.for_language("en")
    import importlib.resources as res

    raw = res.files("hxd2_ray.logic").joinpath("prompts", "logic_v1.yaml").read_text(encoding="utf-8")
    broken = raw.replace("expr: $h1 - $h2}, alias: diff}", "expr: os.system}, alias: diff}", 1)
    assert broken != raw
    with pytest.raises(ValueError, match="not a valid plan"):
        parse_logic_prompts(broken.encode("utf-8"), "v1")


def test_repair_reply_can_come_back_as_llm_response():
    replies = iter([LLMResponse(json.dumps(UNKNOWN_OP), 10, 5), LLMResponse(json.dumps(VALID), 12, 7)])
    llm = ScriptedLLM(lambda req: next(replies))
    result = LogicFormPlanner(llm).plan(QUESTION)
    assert result.ok and result.prompt_tokens == 22 and result.completion_tokens == 12
