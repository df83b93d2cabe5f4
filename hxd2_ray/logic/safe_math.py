"""Safe arithmetic for the logic form's ``math`` operator: an :mod:`ast` whitelist, never ``eval``.

An expression holds numbers, ``$alias`` references to earlier steps' numbers, ``+ - * / // % **``, unary
minus/plus, parentheses and ``min/max/abs/round``; anything else (names, attributes, strings, subscripts,
lambdas…) is refused with a :class:`MathError` before evaluation, and so are division by zero, huge
exponents and results beyond ±1e300 during it. :func:`~hxd2_ray.logic.plan.validate_plan` checks every
expression with :func:`check_math_expression` before a plan runs.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from typing import Any, Callable, Mapping

__all__ = [
    "MAX_EXPR_CHARS",
    "MathError",
    "check_math_expression",
    "evaluate_math",
    "format_number",
    "math_refs",
]

MAX_EXPR_CHARS = 400
MAX_CALL_ARGS = 32  # min()/max() arguments, as many as a plan list may hold

MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e300
MAX_NODES = 200
MAX_ROUND_DIGITS = 15
_REF_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")  # a $alias reference


class MathError(ValueError):
    """An expression that is not allowed, or that failed (division by zero, overflow)."""


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS: dict[str, tuple[Callable[..., Any], int, int]] = {  # name -> (function, min args, max args)
    "min": (min, 1, MAX_CALL_ARGS),
    "max": (max, 1, MAX_CALL_ARGS),
    "abs": (abs, 1, 1),
    "round": (round, 1, 2),
}


def math_refs(expr: Any) -> list[str]:
    """Aliases (without ``$``) an expression reads, in order, without repeats."""
    if not isinstance(expr, str):
        return []
    return list(dict.fromkeys(_REF_RE.findall(expr)))


def _parse_expr(text: str) -> ast.expr:
    if len(text) > MAX_EXPR_CHARS:
        raise MathError(f"expression longer than {MAX_EXPR_CHARS} characters")
    if not text.strip():
        raise MathError("empty expression")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise MathError(f"not an arithmetic expression: {type(exc).__name__}") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise MathError(f"expression too large ({nodes} nodes; at most {MAX_NODES})")
    return tree.body


def _check_node(node: ast.AST) -> None:
    """Raise unless the tree holds only numbers, + - * / // % **, unary +/-, and min/max/abs/round calls."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise MathError(f"only numbers are allowed, not {type(node.value).__name__} {node.value!r:.20}")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise MathError(f"operator {type(node.op).__name__} is not allowed")
        _check_node(node.left)
        _check_node(node.right)
        return
    if isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise MathError(f"operator {type(node.op).__name__} is not allowed")
        _check_node(node.operand)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS:
            shown = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise MathError(f"function {shown!r} is not allowed (only {', '.join(_FUNCS)})")
        if node.keywords:
            raise MathError("keyword arguments are not allowed")
        _, lo, hi = _FUNCS[node.func.id]
        if not lo <= len(node.args) <= hi:
            raise MathError(f"{node.func.id} takes {lo}..{hi} arguments")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise MathError("* arguments are not allowed")
            _check_node(arg)
        return
    if isinstance(node, ast.Name):
        raise MathError(f"name {node.id!r} is not allowed: refer to earlier results as $alias")
    if isinstance(node, ast.Attribute):
        raise MathError("attribute access is not allowed")
    raise MathError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def check_math_expression(expr: str) -> list[str]:
    """Validate an expression without evaluating it; returns the aliases it reads."""
    if not isinstance(expr, str):
        raise MathError("the expression must be a string")
    refs = math_refs(expr)
    placeholder = _REF_RE.sub("1", expr)
    if "$" in placeholder:
        raise MathError("a $ that is not a $alias reference")
    _check_node(_parse_expr(placeholder))
    return refs


def _bounded(value: Any) -> Any:
    if isinstance(value, complex):
        raise MathError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise MathError("overflow: the result is not finite")
    if abs(value) > MAX_MAGNITUDE:
        raise MathError(f"overflow: |result| exceeds {MAX_MAGNITUDE:g}")
    return value


def _eval_node(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp):
        return _bounded(_UNARY[type(node.op)](_eval_node(node.operand)))
    if isinstance(node, ast.BinOp):
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise MathError(f"exponent {format_number(right)} is out of range (|exponent| <= {MAX_EXPONENT})")
            if left == 0 and right < 0:
                raise MathError("division by zero (0 to a negative power)")
        try:
            return _bounded(_BINOPS[type(node.op)](left, right))
        except ZeroDivisionError:
            raise MathError("division by zero") from None
        except OverflowError:
            raise MathError("overflow") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        fn, _, _ = _FUNCS[node.func.id]
        args = [_eval_node(a) for a in node.args]
        if fn is round and len(args) == 2:
            if not isinstance(args[1], int) or abs(args[1]) > MAX_ROUND_DIGITS:
                raise MathError(f"round() digits must be an integer with |digits| <= {MAX_ROUND_DIGITS}")
        try:
            return _bounded(fn(*args))
        except OverflowError:
            raise MathError("overflow") from None
    raise MathError(f"{type(node).__name__} is not allowed")  # unreachable after _check_node


def evaluate_math(expr: str, values: Mapping[str, int | float] | None = None) -> int | float:
    """Evaluate ``expr`` with ``$alias`` replaced by ``values[alias]``.

    Only numbers, ``+ - * / // % **`` (|exponent| <= 64), unary minus/plus, parentheses and
    ``min/max/abs/round`` are allowed; names, attributes, strings, subscripts, lambdas… raise
    :class:`MathError`, as do division by zero and results beyond ±1e300. The text is parsed with
    :mod:`ast` and walked here: nothing is ever passed to ``eval``.
    """
    values = values or {}
    refs = check_math_expression(expr)
    missing = [r for r in refs if r not in values]
    if missing:
        raise MathError(f"no value for {', '.join('$' + m for m in missing)}")

    def literal(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise MathError(f"${match.group(1)} is not a finite number")
        return f"({value!r})"

    node = _parse_expr(_REF_RE.sub(literal, expr))
    _check_node(node)
    try:
        return _eval_node(node)
    except RecursionError:
        raise MathError("expression nested too deeply") from None


def format_number(value: int | float) -> str:
    """``15`` for 15.0, ``2.5`` for 2.5, up to 10 significant digits otherwise."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return f"{value:.10g}"
