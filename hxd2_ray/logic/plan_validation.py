"""Validating a plan: its steps and arguments, aliases defined before use and without cycles, the kind each step
produces against what its consumers accept; and the JSON schema that constrains a model's plan."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Mapping

from hxd2_ray.logic.plan import (
    _ALIAS_RE,
    ALIAS_PATTERN,
    COMPARE_OPS,
    FILTER_CMPS,
    KIND_BOOLEAN,
    KIND_ENTITIES,
    KIND_NUMBER,
    KIND_STRINGS,
    KIND_TEXT,
    MAX_LIST_ITEMS,
    MAX_STEPS,
    MAX_TEXT_CHARS,
    OPERATORS,
    SORT_ORDERS,
    Plan,
    PlanError,
    PlanInvalid,
    Step,
    _iter_refs,
    parse_plan_json,
)
from hxd2_ray.logic.plan_arguments import (
    _parse_args,
    _text,
    _type_name,
)
from hxd2_ray.logic.safe_math import MAX_EXPR_CHARS, math_refs

# ---------------------------------------------------------------------------------------------------
# Validation


def validate_plan(raw: Any, *, max_steps: int = MAX_STEPS) -> Plan | PlanError:
    """Check a plan (JSON text, a list of steps or ``{"steps": [...]}``) and normalise it.

    Rejected, with a reason: unreadable JSON, an empty plan, too many steps, unknown operators, missing or
    badly typed arguments, missing/duplicate/invalid aliases, references to aliases that are never defined,
    used before they are defined, or that form a cycle, aliases of the wrong kind (counting a number…), an
    output step that is not last.
    """
    try:
        return _validate(raw, max_steps)
    except PlanInvalid as exc:
        return PlanError(exc.reason, exc.step)


def _validate(raw: Any, max_steps: int) -> Plan:
    if isinstance(raw, Plan):
        raw = raw.to_json()
    if isinstance(raw, (str, bytes)):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        parsed = parse_plan_json(text)
        if parsed is None:
            raise PlanInvalid('the reply is not JSON: a plan is {"steps": [...]} or a JSON list of steps')
        raw = parsed
    if isinstance(raw, Mapping):
        if "steps" not in raw:
            raise PlanInvalid('a plan object needs a "steps" list')
        raw = raw["steps"]
    if not isinstance(raw, (list, tuple)):
        raise PlanInvalid(f"a plan is a JSON list of steps, got {_type_name(raw)}")
    if not raw:
        raise PlanInvalid("empty plan: at least one step is needed")
    if len(raw) > max_steps:
        raise PlanInvalid(f"the plan has {len(raw)} steps; at most {max_steps} are allowed")

    steps: list[Step] = []
    for i, item in enumerate(raw):
        try:
            steps.append(_parse_step(i, item))
        except PlanInvalid as exc:
            raise PlanInvalid(exc.reason, i) from None

    defined: dict[str, int] = {}
    for step in steps:
        if step.alias is None:
            continue
        if step.alias in defined:
            raise PlanInvalid(f"alias {step.alias!r} is already defined by step {defined[step.alias] + 1}", step.index)
        defined[step.alias] = step.index
    for step in steps:
        for alias in step.refs():
            if alias not in defined:
                raise PlanInvalid(f"${alias} is not defined by any step", step.index)
    _check_cycles(steps, defined)
    for step in steps:
        for alias in step.refs():
            if defined[alias] > step.index:
                raise PlanInvalid(f"${alias} is used before it is defined (by step {defined[alias] + 1})", step.index)

    outputs = [s.index for s in steps if s.op == "output"]
    if len(outputs) > 1:
        raise PlanInvalid("more than one output step", outputs[1])
    if outputs and outputs[0] != len(steps) - 1:
        raise PlanInvalid("the output step must be the last step", outputs[0])

    kinds = _infer_kinds(steps)
    return Plan(steps=tuple(steps), kinds=MappingProxyType(kinds))


def _parse_step(i: int, item: Any) -> Step:
    if not isinstance(item, Mapping):
        raise PlanInvalid(f"a step must be an object with 'step' and 'action', got {_type_name(item)}")
    action = item.get("action")
    if action is None and "op" in item:
        action = item  # tolerate a flat step {"step":…, "op":…, "args":…, "alias":…}
    if not isinstance(action, Mapping):
        raise PlanInvalid(f"'action' must be an object with op, args and alias, got {_type_name(action)}")
    question = item.get("step", "")
    if question is None:
        question = ""
    question = _text(question, "step", allow_empty=True)
    op = action.get("op")
    if not isinstance(op, str) or op not in OPERATORS:
        raise PlanInvalid(f"unknown operator {json.dumps(op)[:40]} (known: {', '.join(OPERATORS)})")
    args = _parse_args(op, action.get("args"))
    alias = action.get("alias")
    if op == "output":
        if alias not in (None, ""):
            raise PlanInvalid("the output step takes no alias")
        alias = None
    else:
        if alias is None or alias == "":
            raise PlanInvalid(f"{op}: missing alias (every step except output names its result)")
        if not isinstance(alias, str):
            raise PlanInvalid(f"{op}: alias must be a string, got {_type_name(alias)}")
        if alias.startswith("$"):
            alias = alias[1:]
        if not _ALIAS_RE.match(alias):
            raise PlanInvalid(f"{op}: alias {alias[:40]!r} must be an identifier (letters, digits, _; at most 32)")
    return Step(index=i, question=question, op=op, args=MappingProxyType(args), alias=alias)


def _check_cycles(steps: list[Step], defined: Mapping[str, int]) -> None:
    """A step that (transitively) reads its own output: report the loop of aliases."""
    deps = {s.index: [defined[a] for a in s.refs()] for s in steps}
    state: dict[int, int] = {}  # 1 visiting, 2 done

    def visit(node: int, path: list[int]) -> None:
        state[node] = 1
        for nxt in deps[node]:
            if state.get(nxt) == 1:
                loop = path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
                names = " -> ".join("$" + (steps[n].alias or "?") for n in loop)
                raise PlanInvalid(f"cycle between aliases: {names}", node)
            if state.get(nxt) is None:
                visit(nxt, path + [nxt])
        state[node] = 2

    for s in steps:
        if state.get(s.index) is None:
            visit(s.index, [s.index])


# Kinds an operator accepts for each referencing argument.
_ANY = (KIND_ENTITIES, KIND_STRINGS, KIND_NUMBER, KIND_BOOLEAN, KIND_TEXT)
_ACCEPTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("retrieval", "s"): (KIND_ENTITIES, KIND_NUMBER),
    ("retrieval", "o"): (KIND_ENTITIES, KIND_NUMBER),
    ("retrieval", "exclude"): (KIND_ENTITIES,),
    ("filter", "items"): (KIND_ENTITIES,),
    ("filter", "value"): (KIND_ENTITIES, KIND_NUMBER),
    ("sort", "items"): (KIND_ENTITIES,),
    ("count", "items"): (KIND_ENTITIES, KIND_STRINGS),
    ("sum", "values"): (KIND_NUMBER, KIND_ENTITIES),
    ("sum", "items"): (KIND_ENTITIES,),
    ("compare", "left"): _ANY,
    ("compare", "right"): _ANY,
    ("math", "expr"): (KIND_NUMBER, KIND_ENTITIES),
    ("deduce", "inputs"): _ANY,
    ("output", "aliases"): _ANY,
}


def _produces(step: Step) -> str | None:
    op = step.op
    if op == "retrieval":
        return KIND_STRINGS if step.args["s"] is not None and step.args["o"] is not None else KIND_ENTITIES
    return {
        "filter": KIND_ENTITIES,
        "sort": KIND_ENTITIES,
        "count": KIND_NUMBER,
        "sum": KIND_NUMBER,
        "compare": KIND_BOOLEAN,
        "math": KIND_NUMBER,
        "deduce": KIND_TEXT,
    }.get(op)


def _infer_kinds(steps: list[Step]) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for step in steps:
        for arg, value in step.args.items():
            aliases = math_refs(value) if step.op == "math" else list(dict.fromkeys(_iter_refs(value)))
            accepted = _ACCEPTS.get((step.op, arg), _ANY)
            for alias in aliases:
                kind = kinds[alias]
                if kind not in accepted:
                    raise PlanInvalid(
                        f"{step.op}.{arg}: ${alias} holds {kind}, but {step.op}.{arg} needs {' or '.join(accepted)}",
                        step.index,
                    )
        produced = _produces(step)
        if step.alias is not None and produced is not None:
            kinds[step.alias] = produced
    return kinds


# ---------------------------------------------------------------------------------------------------
# JSON schema (for constrained decoding)


def plan_json_schema(max_steps: int = MAX_STEPS, max_text_chars: int = MAX_TEXT_CHARS) -> dict[str, Any]:
    """JSON schema of ``{"steps": [...]}``: one ``anyOf`` branch per operator, no extra properties.

    ``max_text_chars`` caps every string (names, predicates, step texts) during decoding, at most
    :data:`MAX_TEXT_CHARS`: a small model whose strings run on reaches the end of the string, and so a
    complete plan, within its token budget instead of being cut mid-string.

    Kept to the subset vLLM's guided decoding (xgrammar/outlines) handles: object/array/string/number/
    integer/null, enum, anyOf, pattern, required, additionalProperties=false, minItems/maxItems.
    """
    ref = {"type": "string", "pattern": r"^\$[A-Za-z_][A-Za-z0-9_]*$"}
    text_cap = max(1, min(int(max_text_chars), MAX_TEXT_CHARS))
    name = {"type": "string", "maxLength": text_cap}
    nullable_name = {"anyOf": [name, {"type": "null"}]}
    name_or_number = {"anyOf": [name, {"type": "number"}]}
    alias = {"type": "string", "pattern": ALIAS_PATTERN}

    def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    args = {
        "retrieval": obj(
            {
                "s": nullable_name,
                "p": nullable_name,
                "o": nullable_name,
                "hops": {"type": "integer", "enum": [1, 2]},
                "exclude": {"type": "array", "items": name, "maxItems": MAX_LIST_ITEMS},
            },
            ["s", "p", "o"],
        ),
        "filter": obj(
            {
                "items": ref,
                "p": name,
                "value": {"anyOf": [name, {"type": "number"}, {"type": "null"}]},
                "cmp": {"type": "string", "enum": list(FILTER_CMPS)},
            },
            ["items", "p", "value"],
        ),
        "sort": obj(
            {
                "items": ref,
                "p": nullable_name,
                "order": {"type": "string", "enum": list(SORT_ORDERS)},
                "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
            },
            ["items", "order"],
        ),
        "count": obj({"items": ref}, ["items"]),
        "sum": {
            "anyOf": [
                obj(
                    {"values": {"type": "array", "items": name_or_number, "minItems": 1, "maxItems": MAX_LIST_ITEMS}},
                    ["values"],
                ),
                obj({"items": ref, "p": nullable_name}, ["items"]),
            ]
        },
        "compare": obj(
            {"left": name_or_number, "right": name_or_number, "op": {"type": "string", "enum": list(COMPARE_OPS)}},
            ["left", "right", "op"],
        ),
        "math": obj({"expr": {"type": "string", "maxLength": MAX_EXPR_CHARS}}, ["expr"]),
        "deduce": obj({"question": name, "inputs": {"type": "array", "items": ref, "maxItems": MAX_LIST_ITEMS}}, []),
        "output": obj(
            {"aliases": {"type": "array", "items": ref, "minItems": 1, "maxItems": MAX_LIST_ITEMS}}, ["aliases"]
        ),
    }
    actions = []
    for op in OPERATORS:
        props: dict[str, Any] = {"op": {"type": "string", "enum": [op]}, "args": args[op]}
        required = ["op", "args"]
        if op != "output":
            props["alias"] = alias
            required.append("alias")
        actions.append(obj(props, required))
    step = obj({"step": {"type": "string", "maxLength": text_cap}, "action": {"anyOf": actions}}, ["step", "action"])
    return obj({"steps": {"type": "array", "items": step, "minItems": 1, "maxItems": max_steps}}, ["steps"])
