"""Logic-form plans: validation with reasons, JSON schema."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.logic.plan import Plan, PlanError, Ref, parse_plan_json
from hxd2_ray.logic.plan_validation import plan_json_schema, validate_plan


def step(op, args, alias=None, text="sub-question"):
    action = {"op": op, "args": args}
    if alias is not None:
        action["alias"] = alias
    return {"step": text, "action": action}


def ret(s, p, o, alias, **extra):
    return step("retrieval", {"s": s, "p": p, "o": o, **extra}, alias)


def out(*aliases):
    return step("output", {"aliases": [f"${a}" for a in aliases]})


TWO_HOP = [
    ret("The Lookout", "directed_by", None, "d"),
    ret(None, "directed_by", "$d", "films", exclude=["The Lookout"]),
    ret("$films", "has_genre", None, "genres"),
    out("genres"),
]

EVERY_OP = [
    ret(None, "type", "early indica", "v"),
    step("filter", {"items": "$v", "p": "height_cm", "value": 84, "cmp": "gt"}, "tall"),
    step("sort", {"items": "$tall", "p": "height_cm", "order": "desc", "limit": 2}, "top"),
    step("count", {"items": "$top"}, "n"),
    step("sum", {"items": "$top", "p": "height_cm"}, "total"),
    step("sum", {"values": ["$n", 2.5, "$total"]}, "s2"),
    step("compare", {"left": "$total", "right": 100, "op": "greater"}, "big"),
    step("math", {"expr": "($total - $n) / 2"}, "m"),
    step("deduce", {"question": "Which is best?", "inputs": ["$top", "$m"]}, "why"),
    out("m", "big", "why"),
]


def reason(raw) -> str:
    result = validate_plan(raw)
    assert isinstance(result, PlanError), f"expected a rejection, got {result}"
    return str(result)


# ------------------------------------------------------------------------------------------- valid


def test_valid_plan_normalises_references_and_kinds():
    plan = validate_plan({"steps": TWO_HOP})
    assert isinstance(plan, Plan)
    assert [s.op for s in plan.steps] == ["retrieval", "retrieval", "retrieval", "output"]
    assert plan.steps[1].args["o"] == Ref("d")
    assert plan.steps[1].args["exclude"] == ("The Lookout",)
    assert plan.steps[0].args["hops"] == 1
    assert plan.steps[2].refs() == ("films",)
    assert plan.output_aliases == ("genres",)
    assert dict(plan.kinds) == {"d": "entities", "films": "entities", "genres": "entities"}


def test_every_operator_validates_and_round_trips():
    plan = validate_plan(EVERY_OP)  # a bare list is accepted too
    assert isinstance(plan, Plan), plan
    assert plan.kinds["n"] == "number" and plan.kinds["big"] == "boolean" and plan.kinds["why"] == "text"
    assert plan.steps[7].refs() == ("total", "n")
    again = validate_plan(plan.dumps())
    assert again == plan
    assert validate_plan(plan) == plan


def test_output_is_optional_then_last_alias_answers():
    plan = validate_plan(TWO_HOP[:3])
    assert isinstance(plan, Plan)
    assert plan.output_aliases == ("genres",)


def test_reply_with_chatter_and_code_fence_is_read():
    text = "Here is the plan:\n```json\n" + json.dumps({"steps": TWO_HOP}) + "\n```\nDone."
    assert isinstance(validate_plan(text), Plan)
    assert parse_plan_json("no json here") is None
    assert parse_plan_json('{"steps": [1, 2') is None  # truncated: not repaired


def test_numbers_in_retrieval_are_value_entity_names():
    plan = validate_plan([ret(None, "release_year", 1971, "m"), ret(None, "height_cm", 102.5, "v")])
    assert isinstance(plan, Plan)
    assert plan.steps[0].args["o"] == "1971" and plan.steps[1].args["o"] == "102.5"


def test_escaped_dollar_is_a_literal():
    plan = validate_plan([ret("$$", "directed_by", None, "d")])  # the MetaQA movie named "$"
    assert isinstance(plan, Plan)
    assert plan.steps[0].args["s"] == "$"
    assert validate_plan(plan.dumps()) == plan


# ---------------------------------------------------------------------------------------- rejected


def test_empty_plan_rejected():
    assert "empty plan" in reason([])
    assert "empty plan" in reason({"steps": []})
    assert "not JSON" in reason("")
    assert "not JSON" in reason("I cannot decompose this question.")


def test_unknown_operator_rejected():
    r = reason([step("get_spo", {"s": "x"}, "a")])
    assert "unknown operator" in r and "get_spo" in r and "step 1" in r


def test_missing_alias_rejected():
    assert "missing alias" in reason([ret("X", "p", None, None)])
    assert "takes no alias" in reason([ret("X", "p", None, "a"), step("output", {"aliases": ["$a"]}, "b")])


def test_undefined_alias_rejected():
    r = reason([ret("X", "p", None, "a"), ret("$nope", "p", None, "b")])
    assert "$nope is not defined" in r and "step 2" in r


def test_alias_used_before_definition_rejected():
    r = reason([ret("$b", "p", None, "a"), ret("X", "p", None, "b")])
    assert "before it is defined" in r and "step 1" in r


def test_cycles_rejected():
    assert "cycle" in reason([ret("$a", "p", None, "a")])  # self-reference
    r = reason([ret("$b", "p", None, "a"), ret("$a", "p", None, "b")])
    assert "cycle" in r and "$a" in r and "$b" in r
    r = reason([step("math", {"expr": "$m + 1"}, "m")])
    assert "cycle" in r


def test_duplicate_alias_rejected():
    assert "already defined" in reason([ret("X", "p", None, "a"), ret("Y", "p", None, "a")])


@pytest.mark.parametrize(
    "bad_step, words",
    [
        (ret(["X"], "p", None, "a"), "retrieval.s must be a name, number, null or $alias, got list"),
        (ret({"name": "X"}, "p", None, "a"), "got object"),
        (ret(None, "p", None, "a"), "s or o must be known"),
        (ret("X", ["p"], None, "a"), "retrieval.p must be a string"),
        (ret("X", "p", None, "a", hops=3), "hops must be between 1 and 2"),
        (ret("X", "p", None, "a", hops="2"), "hops must be an integer"),
        (ret("X", "p", None, "a", exclude="Y"), "exclude must be a list"),
        (ret("X", "p", None, "a", depth=2), "unknown argument depth"),
        (step("retrieval", ["X", "p", None], "a"), "args must be an object"),
        (step("retrieval", {"s": "X", "o": None}, "a"), "missing argument 'p'"),
        (ret("$1bad", "p", None, "a"), "not a valid $alias"),
        (ret("X", "p", None, "bad alias"), "must be an identifier"),
        (ret("X", "p", None, 7), "alias must be a string"),
        (step("compare", {"left": 1, "right": 2, "op": "bigger"}, "c"), "op must be one of"),
        (step("compare", {"left": True, "right": 2, "op": "equal"}, "c"), "boolean"),
        (step("math", {"expr": 42}, "m"), "string expression"),
        (step("math", {"expr": "__import__('os')"}, "m"), "not allowed"),
        (step("sum", {}, "s"), "either values"),
        (step("sum", {"values": ["abc"]}, "s"), "must be a number or $alias"),
        (step("filter", {"items": "X", "p": "q", "value": 1}, "f"), "$alias reference"),
        (step("sort", {"items": "$x", "order": "up"}, "s"), "order must be one of"),
        (step("sort", {"items": "$x", "limit": 0}, "s"), "limit must be between"),
        (step("output", {"aliases": []}), "at least 1 item"),
        ({"step": "no action"}, "'action' must be an object"),
        ("just a string", "a step must be an object"),
    ],
)
def test_wrong_argument_types_rejected(bad_step, words):
    plan = [ret("X", "p", None, "x"), bad_step] if "$x" in json.dumps(bad_step) else [bad_step]
    assert words in reason(plan)


def test_alias_kind_mismatch_rejected():
    plan = [ret("X", "p", None, "a"), step("count", {"items": "$a"}, "n"), step("count", {"items": "$n"}, "n2")]
    r = reason(plan)
    assert "$n holds number" in r and "count.items" in r
    r = reason(
        [
            ret("X", "p", None, "a"),
            step("compare", {"left": "$a", "right": 1, "op": "less"}, "c"),
            step("math", {"expr": "$c + 1"}, "m"),
        ]
    )
    assert "$c holds boolean" in r


def test_output_must_be_last_and_unique():
    assert "must be the last step" in reason([ret("X", "p", None, "a"), out("a"), ret("Y", "p", None, "b")])
    assert "more than one output" in reason([ret("X", "p", None, "a"), out("a"), out("a")])
    assert "not defined" in reason([out("a")])


def test_too_many_steps_rejected():
    steps = [ret("X", "p", None, f"a{i}") for i in range(13)]
    assert "at most 12" in reason(steps)


# -------------------------------------------------------------------------------------- JSON schema


def test_json_schema_accepts_valid_plans_and_rejects_unknown_ops():
    jsonschema = pytest.importorskip("jsonschema")
    schema = plan_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for raw in (TWO_HOP, EVERY_OP):
        plan = validate_plan(raw)
        assert isinstance(plan, Plan)
        jsonschema.validate(plan.to_json(), schema)
        jsonschema.validate({"steps": raw}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"steps": [step("get_spo", {"s": "x"}, "a")]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"steps": []}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"steps": [ret("X", "p", None, "bad alias")]}, schema)


def test_json_schema_shape_without_jsonschema():
    schema = plan_json_schema(max_steps=5)
    assert schema["required"] == ["steps"]
    steps = schema["properties"]["steps"]
    assert steps["maxItems"] == 5 and steps["minItems"] == 1
    ops = [a["properties"]["op"]["enum"][0] for a in steps["items"]["properties"]["action"]["anyOf"]]
    assert ops == ["retrieval", "filter", "sort", "count", "sum", "compare", "math", "deduce", "output"]
    json.dumps(schema)  # serialisable as is


def test_json_schema_text_cap():
    jsonschema = pytest.importorskip("jsonschema")
    short = plan_json_schema(max_text_chars=12)
    jsonschema.validate({"steps": [ret("Ron Howard", "directed_by", None, "a")]}, short)
    with pytest.raises(jsonschema.ValidationError):  # a name over the cap
        jsonschema.validate({"steps": [ret("Ron Howard and friends", "directed_by", None, "a")]}, short)
    with pytest.raises(jsonschema.ValidationError):  # a step text over the cap
        jsonschema.validate({"steps": [{**ret("X", "p", None, "a"), "step": "s" * 13}]}, short)
    # never above the validator's own limit
    assert '"maxLength": 512' in json.dumps(plan_json_schema(max_text_chars=10_000))
    assert '"maxLength": 513' not in json.dumps(plan_json_schema(max_text_chars=10_000))


# -------------------------------------------------------------------------------------------- math


def test_math_validation_happens_in_validate_plan():
    assert "name 'os' is not allowed" in reason([step("math", {"expr": "os"}, "m")])
    assert "attribute access" in reason([step("math", {"expr": "(1).real"}, "m")])
