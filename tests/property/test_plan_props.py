"""Properties of logic-form plan parsing and validation (``hxd2_ray/logic/plan.py``): plans come from an LLM."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from hxd2_ray.logic.plan import Plan, PlanError, parse_plan_json
from hxd2_ray.logic.plan_validation import validate_plan
from hxd2_ray.logic.safe_math import MathError, evaluate_math
from tests.property.strategies import any_text, hostile_text, is_valid_unicode, json_text, small_json

OPS = ["retrieval", "filter", "sort", "count", "sum", "compare", "math", "deduce", "output", "nope"]
aliases = st.sampled_from(["a", "b", "films", "x1", "", "1bad", "$a", None])
refs = st.sampled_from(["$a", "$b", "$films", "$x1", "$missing", "$$lit", "plain"])
arg_values = st.one_of(refs, small_json, st.lists(refs, max_size=3))
steps = st.fixed_dictionaries(
    {
        "step": st.one_of(any_text(20), small_json),
        "action": st.fixed_dictionaries(
            {
                "op": st.one_of(st.sampled_from(OPS), small_json),
                "args": st.one_of(
                    st.dictionaries(
                        st.sampled_from(
                            [
                                "s",
                                "p",
                                "o",
                                "items",
                                "value",
                                "cmp",
                                "order",
                                "limit",
                                "values",
                                "left",
                                "right",
                                "op",
                                "expr",
                                "question",
                                "inputs",
                                "aliases",
                                "hops",
                                "exclude",
                            ]
                        ),
                        arg_values,
                        max_size=5,
                    ),
                    small_json,
                ),
                "alias": aliases,
            }
        ),
    }
)


def _check(result):
    assert isinstance(result, (Plan, PlanError))
    if isinstance(result, PlanError):
        assert result.reason and str(result)
    else:
        # Every string in an accepted plan can reach Kùzu as a parameter (valid Unicode).
        assert is_valid_unicode(json.dumps(result.to_json(), ensure_ascii=False))
        # A valid plan survives its own round trip unchanged.
        again = validate_plan(result.dumps())
        assert isinstance(again, Plan) and again.to_json() == result.to_json()
    return result


@given(hostile_text)
def test_any_text_is_a_plan_or_a_reason(text):
    _check(validate_plan(text))
    parse_plan_json(text)  # never raises


@given(json_text())
def test_any_json_is_a_plan_or_a_reason(text):
    _check(validate_plan(text))


@given(st.lists(steps, max_size=6), st.booleans())
def test_step_lists_with_hostile_arguments(items, wrapped):
    raw = {"steps": items} if wrapped else items
    _check(validate_plan(raw))
    _check(validate_plan(json.dumps(raw)))


@given(
    st.text(alphabet="0123456789+-*/().$ab_ e%", max_size=40),
    st.dictionaries(st.sampled_from(["a", "b"]), st.one_of(st.integers(), st.floats()), max_size=2),
)
def test_math_either_evaluates_or_raises_math_error(expr, values):
    try:
        result = evaluate_math(expr, values)
    except MathError as exc:
        assert str(exc)
    else:
        assert isinstance(result, (int, float)) and not isinstance(result, bool)
