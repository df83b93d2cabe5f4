"""Logic-form plans: the JSON representation (validation and the JSON schema: :mod:`hxd2_ray.logic.plan_validation`).

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
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from hxd2_ray.logic.safe_math import math_refs

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


class PlanInvalid(Exception):
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
