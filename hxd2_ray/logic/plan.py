"""Logic-form plans: the JSON representation, its JSON schema and validation.

A plan is an ordered list of steps; each step is a sub-question plus one operator call::

    {"steps": [
      {"step": "Who directed The Lookout?",
       "action": {"op": "retrieval", "args": {"s": "The Lookout", "p": "directed_by", "o": null}, "alias": "d"}},
      {"step": "Which other films did they direct?",
       "action": {"op": "retrieval", "args": {"s": null, "p": "directed_by", "o": "$d", "exclude": ["The Lookout"]},
                  "alias": "films"}},
      {"step": "Answer", "action": {"op": "output", "args": {"aliases": ["$films"]}}}
    ]}

(a bare JSON list of steps is accepted too). Unlike the reference's function-call strings
(``get_spo(s=s1:公众人物[周杰伦], p=p1, o=o1)``) every argument is a typed JSON value, so the whole plan can be
constrained by :func:`plan_json_schema` and checked by :func:`validate_plan` before anything runs.

Values and references:

* a string ``"$name"`` (``name`` an identifier) refers to the output of the earlier step whose ``alias`` is
  ``name``; any other string is a literal (write ``"$$x"`` for a literal that starts with ``$``);
* ``null`` in ``retrieval`` marks the unknown side (the variable).

Operators (``args``; what the step produces):

=========== ============================================================================== ==========
retrieval   ``s``, ``p``, ``o``: name / ``$alias`` / null, ``hops`` 1|2, ``exclude`` list     entities
filter      ``items`` $alias, ``p``, ``value`` (name, number, $alias or null), ``cmp``         entities
sort        ``items`` $alias, ``p`` (numeric attribute; null: the names are numbers),          entities
            ``order`` asc|desc, ``limit``
count       ``items`` $alias                                                                 number
sum         ``values`` [numbers / $alias], or ``items`` $alias + ``p`` (per-item attribute)    number
compare     ``left``, ``right`` (number, name or $alias), ``op`` equal|not_equal|greater|less|… boolean
math        ``expr``: arithmetic over numbers and ``$alias`` values (:mod:`.safe_math`)        number
deduce      ``question`` (optional), ``inputs`` [$alias] (optional): the LLM reasons            text
output      ``aliases`` [$alias]: which results answer the question (last step; no alias)     —
=========== ============================================================================== ==========

A ``retrieval`` with both ``s`` and ``o`` known looks for the relations between them and produces strings.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from hxd2_ray.logic.safe_math import MAX_EXPR_CHARS, MathError, check_math_expression, format_number, math_refs

__all__ = [
    "ALIAS_PATTERN",
    "COMPARE_OPS",
    "FILTER_CMPS",
    "MAX_STEPS",
    "OPERATORS",
    "Plan",
    "PlanError",
    "Ref",
    "Step",
    "parse_plan_json",
    "plan_json_schema",
    "validate_plan",
]

OPERATORS = ("retrieval", "filter", "sort", "count", "sum", "compare", "math", "deduce", "output")
COMPARE_OPS = ("equal", "not_equal", "greater", "less", "greater_equal", "less_equal")
FILTER_CMPS = ("eq", "ne", "gt", "ge", "lt", "le", "contains")
SORT_ORDERS = ("asc", "desc")

MAX_STEPS = 12
MAX_TEXT_CHARS = 512  # any string argument (names, predicates, sub-questions)
MAX_LIST_ITEMS = 32

_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,31}"
ALIAS_PATTERN = f"^{_IDENT}$"
_ALIAS_RE = re.compile(ALIAS_PATTERN)
_REF_RE = re.compile(rf"^\$({_IDENT})$")

# What each operator produces; consumers check the kinds of the aliases they read.
KIND_ENTITIES, KIND_STRINGS, KIND_NUMBER, KIND_BOOLEAN, KIND_TEXT = "entities", "strings", "number", "boolean", "text"


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to the output of an earlier step."""

    alias: str

    def __str__(self) -> str:
        return "$" + self.alias


@dataclass(frozen=True, slots=True)
class Step:
    index: int  # 0-based position in the plan
    question: str  # the sub-question
    op: str
    args: Mapping[str, Any]  # normalised: references are Ref, tuples instead of lists, every optional key present
    alias: str | None  # None only for output

    def refs(self) -> tuple[str, ...]:
        """Aliases this step reads, in argument order, without repeats."""
        if self.op == "math":
            return tuple(math_refs(self.args["expr"]))
        return tuple(dict.fromkeys(_iter_refs(self.args)))

    def to_json(self) -> dict[str, Any]:
        args = {
            k: _to_json_value(v, escape=(self.op, k) in _TERM_ARGS)
            for k, v in self.args.items()
            if (v is not None or (self.op, k) in _KEEP_NULL) and _DEFAULTS.get((self.op, k), _NO_DEFAULT) != v
        }
        action: dict[str, Any] = {"op": self.op, "args": args}
        if self.alias is not None:
            action["alias"] = self.alias
        return {"step": self.question, "action": action}


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    kinds: Mapping[str, str] = field(default_factory=dict)  # alias -> what it holds (entities, number…)

    @property
    def output_aliases(self) -> tuple[str, ...]:
        """The aliases of the output step, else the alias of the last step that has one."""
        last = self.steps[-1]
        if last.op == "output":
            return tuple(r.alias for r in last.args["aliases"])
        for step in reversed(self.steps):
            if step.alias is not None:
                return (step.alias,)
        return ()

    def to_json(self) -> dict[str, Any]:
        return {"steps": [s.to_json() for s in self.steps]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class PlanError:
    """Why a plan was rejected; ``step`` is the 0-based step it concerns, when there is one."""

    reason: str
    step: int | None = None

    def __str__(self) -> str:
        return self.reason if self.step is None else f"step {self.step + 1}: {self.reason}"


class _Invalid(Exception):
    def __init__(self, reason: str, step: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.step = step


# ---------------------------------------------------------------------------------------------------
# JSON helpers


def _iter_refs(value: Any) -> Iterable[str]:
    if isinstance(value, Ref):
        yield value.alias
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _iter_refs(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _iter_refs(v)


# Arguments whose strings may be references; a literal there that starts with "$" is written escaped ("$$").
_TERM_ARGS = frozenset(
    {
        ("retrieval", "s"),
        ("retrieval", "o"),
        ("retrieval", "exclude"),
        ("filter", "value"),
        ("compare", "left"),
        ("compare", "right"),
    }
)


_NO_DEFAULT = object()
_DEFAULTS: dict[tuple[str, str], Any] = {
    ("retrieval", "hops"): 1,
    ("retrieval", "exclude"): (),
    ("deduce", "inputs"): (),
}
_KEEP_NULL = frozenset({("retrieval", "s"), ("retrieval", "p"), ("retrieval", "o"), ("filter", "value")})


def _to_json_value(value: Any, escape: bool = False) -> Any:
    if isinstance(value, Ref):
        return str(value)
    if escape and isinstance(value, str) and value.startswith("$"):
        return "$" + value
    if isinstance(value, Mapping):
        return {k: _to_json_value(v, escape) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json_value(v, escape) for v in value]
    return value


_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_plan_json(text: str) -> Any:
    """Tolerant JSON read of an LLM reply: the whole text, else a fenced block, else the outermost ``{…}`` or
    ``[…]`` span. ``None`` when nothing parses. Truncated replies are NOT repaired: half a plan is wrong."""
    if not isinstance(text, str) or not text.strip():
        return None
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE_RE.finditer(text)]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    # Prefer the span that starts first ({"steps": …} vs a bare [ … ]).
    for cand in candidates:
        try:
            return json.loads(cand)
        except (ValueError, RecursionError):
            continue
    return None


# ---------------------------------------------------------------------------------------------------
# Argument specs. Each parser takes the raw JSON value and returns the normalised one or raises _Invalid.


def _text(value: Any, what: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"{what} must be a string, got {_type_name(value)}")
    if not allow_empty and not value.strip():
        raise _Invalid(f"{what} must not be empty")
    if len(value) > MAX_TEXT_CHARS:
        raise _Invalid(f"{what} is longer than {MAX_TEXT_CHARS} characters")
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _term(value: Any, what: str, *, numbers: bool = False, null: bool = False) -> Any:
    """A literal name, a ``$alias`` reference, optionally a number or null."""
    if value is None:
        if null:
            return None
        raise _Invalid(f"{what} must not be null")
    if isinstance(value, bool):
        raise _Invalid(f"{what} must be a {'name, number' if numbers else 'name'} or $alias, got a boolean")
    if isinstance(value, (int, float)):
        if not numbers:
            raise _Invalid(f"{what} must be a name or $alias, got a number")
        if not math.isfinite(value):
            raise _Invalid(f"{what} must be a finite number")
        return value
    if not isinstance(value, str):
        kinds = "name, number" if numbers else "name"
        raise _Invalid(f"{what} must be a {kinds}{', null' if null else ''} or $alias, got {_type_name(value)}")
    if value.startswith("$$"):
        return _text(value[1:], what)  # escaped literal
    m = _REF_RE.match(value)
    if m:
        return Ref(m.group(1))
    if value.startswith("$"):
        raise _Invalid(f"{what}: {value[:40]!r} is not a valid $alias reference (letters, digits, _)")
    return _text(value, what)


def _name_term(value: Any, what: str) -> Any:
    """An entity name, $alias or null; a number is taken as the name of a value entity (1971 -> "1971")."""
    term = _term(value, what, numbers=True, null=True)
    return format_number(term) if isinstance(term, (int, float)) else term


def _ref(value: Any, what: str) -> Ref:
    if not isinstance(value, str):
        raise _Invalid(f"{what} must be a $alias reference, got {_type_name(value)}")
    m = _REF_RE.match(value)
    if not m:
        raise _Invalid(f"{what} must be a $alias reference, got {value[:40]!r}")
    return Ref(m.group(1))


def _list(value: Any, what: str, item: Callable[[Any, str], Any], *, min_items: int = 0) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise _Invalid(f"{what} must be a list, got {_type_name(value)}")
    if len(value) < min_items:
        raise _Invalid(f"{what} needs at least {min_items} item{'s' if min_items > 1 else ''}")
    if len(value) > MAX_LIST_ITEMS:
        raise _Invalid(f"{what} has more than {MAX_LIST_ITEMS} items")
    return tuple(item(v, f"{what}[{i}]") for i, v in enumerate(value))


def _enum(value: Any, what: str, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise _Invalid(f"{what} must be one of {', '.join(options)}, got {json.dumps(value)[:40]}")
    return value


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise _Invalid(f"{what} must be an integer, got {_type_name(value)}")
    if not lo <= value <= hi:
        raise _Invalid(f"{what} must be between {lo} and {hi}, got {value}")
    return value


def _opt_text(value: Any, what: str) -> str | None:
    return None if value is None else _text(value, what)


# op -> {arg: (required, parser)}
_Spec = Mapping[str, tuple[bool, Callable[[Any, str], Any]]]

_SPECS: dict[str, _Spec] = {
    "retrieval": {
        "s": (True, lambda v, w: _name_term(v, w)),
        "p": (True, lambda v, w: _opt_text(v, w)),
        "o": (True, lambda v, w: _name_term(v, w)),
        "hops": (False, lambda v, w: 1 if v is None else _int(v, w, 1, 2)),
        "exclude": (False, lambda v, w: () if v is None else _list(v, w, lambda x, ww: _term(x, ww))),
    },
    "filter": {
        "items": (True, _ref),
        "p": (True, _text),
        "value": (False, lambda v, w: _term(v, w, numbers=True, null=True)),
        "cmp": (False, lambda v, w: "eq" if v is None else _enum(v, w, FILTER_CMPS)),
    },
    "sort": {
        "items": (True, _ref),
        "p": (False, lambda v, w: _opt_text(v, w)),
        "order": (False, lambda v, w: "desc" if v is None else _enum(v, w, SORT_ORDERS)),
        "limit": (False, lambda v, w: None if v is None else _int(v, w, 1, 1000)),
    },
    "count": {"items": (True, _ref)},
    "sum": {
        "values": (False, lambda v, w: None if v is None else _list(v, w, _sum_value, min_items=1)),
        "items": (False, lambda v, w: None if v is None else _ref(v, w)),
        "p": (False, lambda v, w: _opt_text(v, w)),
    },
    "compare": {
        "left": (True, lambda v, w: _term(v, w, numbers=True)),
        "right": (True, lambda v, w: _term(v, w, numbers=True)),
        "op": (True, lambda v, w: _enum(v, w, COMPARE_OPS)),
    },
    "math": {"expr": (True, lambda v, w: _expr(v, w))},
    "deduce": {
        "question": (False, lambda v, w: _opt_text(v, w)),
        "inputs": (False, lambda v, w: () if v is None else _list(v, w, _ref)),
    },
    "output": {"aliases": (True, lambda v, w: _list(v, w, _ref, min_items=1))},
}


def _sum_value(value: Any, what: str) -> Any:
    term = _term(value, what, numbers=True)
    if isinstance(term, str):
        if _parse_plain_number(term) is None:
            raise _Invalid(f"{what} must be a number or $alias, got {term[:40]!r}")
        return _parse_plain_number(term)
    return term


def _parse_plain_number(text: str) -> int | float | None:
    try:
        return int(text.strip())
    except ValueError:
        pass
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _expr(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"{what} must be a string expression, got {_type_name(value)}")
    try:
        check_math_expression(value)
    except MathError as exc:
        raise _Invalid(f"{what}: {exc}") from None
    return value


def _parse_args(op: str, raw: Any) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise _Invalid(f"{op}: args must be an object, got {_type_name(raw)}")
    spec = _SPECS[op]
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise _Invalid(
            f"{op}: unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (allowed: {', '.join(spec)})"
        )
    out: dict[str, Any] = {}
    for name, (required, parse) in spec.items():
        if name not in raw:
            if required:
                raise _Invalid(f"{op}: missing argument {name!r}")
            out[name] = parse(None, f"{op}.{name}")
            continue
        out[name] = parse(raw[name], f"{op}.{name}")
    # Cross-argument rules.
    if op == "retrieval":
        if out["s"] is None and out["o"] is None:
            raise _Invalid("retrieval: s or o must be known (a name or $alias); both are null")
    elif op == "sum":
        if (out["values"] is None) == (out["items"] is None):
            raise _Invalid("sum: give either values (numbers/$alias) or items ($alias, with p for an attribute)")
        if out["p"] is not None and out["items"] is None:
            raise _Invalid("sum: p needs items")
    elif op == "filter":
        if out["cmp"] in ("gt", "ge", "lt", "le") and not isinstance(out["value"], (int, float, Ref)):
            if not (isinstance(out["value"], str) and _parse_plain_number(out["value"]) is not None):
                raise _Invalid(f"filter: cmp {out['cmp']} needs a numeric value")
    return out


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
    except _Invalid as exc:
        return PlanError(exc.reason, exc.step)


def _validate(raw: Any, max_steps: int) -> Plan:
    if isinstance(raw, Plan):
        raw = raw.to_json()
    if isinstance(raw, (str, bytes)):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        parsed = parse_plan_json(text)
        if parsed is None:
            raise _Invalid('the reply is not JSON: a plan is {"steps": [...]} or a JSON list of steps')
        raw = parsed
    if isinstance(raw, Mapping):
        if "steps" not in raw:
            raise _Invalid('a plan object needs a "steps" list')
        raw = raw["steps"]
    if not isinstance(raw, (list, tuple)):
        raise _Invalid(f"a plan is a JSON list of steps, got {_type_name(raw)}")
    if not raw:
        raise _Invalid("empty plan: at least one step is needed")
    if len(raw) > max_steps:
        raise _Invalid(f"the plan has {len(raw)} steps; at most {max_steps} are allowed")

    steps: list[Step] = []
    for i, item in enumerate(raw):
        try:
            steps.append(_parse_step(i, item))
        except _Invalid as exc:
            raise _Invalid(exc.reason, i) from None

    defined: dict[str, int] = {}
    for step in steps:
        if step.alias is None:
            continue
        if step.alias in defined:
            raise _Invalid(f"alias {step.alias!r} is already defined by step {defined[step.alias] + 1}", step.index)
        defined[step.alias] = step.index
    for step in steps:
        for alias in step.refs():
            if alias not in defined:
                raise _Invalid(f"${alias} is not defined by any step", step.index)
    _check_cycles(steps, defined)
    for step in steps:
        for alias in step.refs():
            if defined[alias] > step.index:
                raise _Invalid(f"${alias} is used before it is defined (by step {defined[alias] + 1})", step.index)

    outputs = [s.index for s in steps if s.op == "output"]
    if len(outputs) > 1:
        raise _Invalid("more than one output step", outputs[1])
    if outputs and outputs[0] != len(steps) - 1:
        raise _Invalid("the output step must be the last step", outputs[0])

    kinds = _infer_kinds(steps)
    return Plan(steps=tuple(steps), kinds=MappingProxyType(kinds))


def _parse_step(i: int, item: Any) -> Step:
    if not isinstance(item, Mapping):
        raise _Invalid(f"a step must be an object with 'step' and 'action', got {_type_name(item)}")
    action = item.get("action")
    if action is None and "op" in item:
        action = item  # tolerate a flat step {"step":…, "op":…, "args":…, "alias":…}
    if not isinstance(action, Mapping):
        raise _Invalid(f"'action' must be an object with op, args and alias, got {_type_name(action)}")
    question = item.get("step", "")
    if question is None:
        question = ""
    question = _text(question, "step", allow_empty=True)
    op = action.get("op")
    if not isinstance(op, str) or op not in OPERATORS:
        raise _Invalid(f"unknown operator {json.dumps(op)[:40]} (known: {', '.join(OPERATORS)})")
    args = _parse_args(op, action.get("args"))
    alias = action.get("alias")
    if op == "output":
        if alias not in (None, ""):
            raise _Invalid("the output step takes no alias")
        alias = None
    else:
        if alias is None or alias == "":
            raise _Invalid(f"{op}: missing alias (every step except output names its result)")
        if not isinstance(alias, str):
            raise _Invalid(f"{op}: alias must be a string, got {_type_name(alias)}")
        if alias.startswith("$"):
            alias = alias[1:]
        if not _ALIAS_RE.match(alias):
            raise _Invalid(f"{op}: alias {alias[:40]!r} must be an identifier (letters, digits, _; at most 32)")
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
                raise _Invalid(f"cycle between aliases: {names}", node)
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
                    raise _Invalid(
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
