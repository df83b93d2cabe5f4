"""The arguments of each plan operator: one parser per argument kind (a name, a term, an $alias, a list, a bounded
number, an expression), each returning the normalised value or raising :class:`PlanInvalid`."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping

from hxd2_ray.logic.plan import (
    _REF_RE,
    COMPARE_OPS,
    FILTER_CMPS,
    MAX_LIST_ITEMS,
    MAX_TEXT_CHARS,
    SORT_ORDERS,
    PlanInvalid,
    Ref,
)
from hxd2_ray.logic.safe_math import MathError, check_math_expression, format_number

# ---------------------------------------------------------------------------------------------------
# Argument specs. Each parser takes the raw JSON value and returns the normalised one or raises PlanInvalid.


def _text(value: Any, what: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise PlanInvalid(f"{what} must be a string, got {_type_name(value)}")
    if not allow_empty and not value.strip():
        raise PlanInvalid(f"{what} must not be empty")
    if len(value) > MAX_TEXT_CHARS:
        raise PlanInvalid(f"{what} is longer than {MAX_TEXT_CHARS} characters")
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
        raise PlanInvalid(f"{what} must not be null")
    if isinstance(value, bool):
        raise PlanInvalid(f"{what} must be a {'name, number' if numbers else 'name'} or $alias, got a boolean")
    if isinstance(value, (int, float)):
        if not numbers:
            raise PlanInvalid(f"{what} must be a name or $alias, got a number")
        if not math.isfinite(value):
            raise PlanInvalid(f"{what} must be a finite number")
        return value
    if not isinstance(value, str):
        kinds = "name, number" if numbers else "name"
        raise PlanInvalid(f"{what} must be a {kinds}{', null' if null else ''} or $alias, got {_type_name(value)}")
    if value.startswith("$$"):
        return _text(value[1:], what)  # escaped literal
    m = _REF_RE.match(value)
    if m:
        return Ref(m.group(1))
    if value.startswith("$"):
        raise PlanInvalid(f"{what}: {value[:40]!r} is not a valid $alias reference (letters, digits, _)")
    return _text(value, what)


def _name_term(value: Any, what: str) -> Any:
    """An entity name, $alias or null; a number is taken as the name of a value entity (1971 -> "1971")."""
    term = _term(value, what, numbers=True, null=True)
    return format_number(term) if isinstance(term, (int, float)) else term


def _ref(value: Any, what: str) -> Ref:
    if not isinstance(value, str):
        raise PlanInvalid(f"{what} must be a $alias reference, got {_type_name(value)}")
    m = _REF_RE.match(value)
    if not m:
        raise PlanInvalid(f"{what} must be a $alias reference, got {value[:40]!r}")
    return Ref(m.group(1))


def _list(value: Any, what: str, item: Callable[[Any, str], Any], *, min_items: int = 0) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise PlanInvalid(f"{what} must be a list, got {_type_name(value)}")
    if len(value) < min_items:
        raise PlanInvalid(f"{what} needs at least {min_items} item{'s' if min_items > 1 else ''}")
    if len(value) > MAX_LIST_ITEMS:
        raise PlanInvalid(f"{what} has more than {MAX_LIST_ITEMS} items")
    return tuple(item(v, f"{what}[{i}]") for i, v in enumerate(value))


def _enum(value: Any, what: str, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise PlanInvalid(f"{what} must be one of {', '.join(options)}, got {json.dumps(value)[:40]}")
    return value


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise PlanInvalid(f"{what} must be an integer, got {_type_name(value)}")
    if not lo <= value <= hi:
        raise PlanInvalid(f"{what} must be between {lo} and {hi}, got {value}")
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
            raise PlanInvalid(f"{what} must be a number or $alias, got {term[:40]!r}")
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
        raise PlanInvalid(f"{what} must be a string expression, got {_type_name(value)}")
    try:
        check_math_expression(value)
    except MathError as exc:
        raise PlanInvalid(f"{what}: {exc}") from None
    return value


def _parse_args(op: str, raw: Any) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise PlanInvalid(f"{op}: args must be an object, got {_type_name(raw)}")
    spec = _SPECS[op]
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise PlanInvalid(
            f"{op}: unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (allowed: {', '.join(spec)})"
        )
    out: dict[str, Any] = {}
    for name, (required, parse) in spec.items():
        if name not in raw:
            if required:
                raise PlanInvalid(f"{op}: missing argument {name!r}")
            out[name] = parse(None, f"{op}.{name}")
            continue
        out[name] = parse(raw[name], f"{op}.{name}")
    # Cross-argument rules.
    if op == "retrieval":
        if out["s"] is None and out["o"] is None:
            raise PlanInvalid("retrieval: s or o must be known (a name or $alias); both are null")
    elif op == "sum":
        if (out["values"] is None) == (out["items"] is None):
            raise PlanInvalid("sum: give either values (numbers/$alias) or items ($alias, with p for an attribute)")
        if out["p"] is not None and out["items"] is None:
            raise PlanInvalid("sum: p needs items")
    elif op == "filter":
        if out["cmp"] in ("gt", "ge", "lt", "le") and not isinstance(out["value"], (int, float, Ref)):
            if not (isinstance(out["value"], str) and _parse_plain_number(out["value"]) is not None):
                raise PlanInvalid(f"filter: cmp {out['cmp']} needs a numeric value")
    return out
