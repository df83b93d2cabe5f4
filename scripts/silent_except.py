"""Find broad ``except`` blocks that swallow an exception in silence.

    python scripts/silent_except.py [PATH ...]     (default: hxd2_ray serve jobs)

A handler is broad when it catches ``Exception`` or ``BaseException`` (alone or in a tuple) or is a bare
``except:``. Every way through a broad handler's body must do at least one of these:

- raise (re-raise, or raise another exception);
- call a logger at warning level or above (``log.warning``/``error``/``exception``/``critical``, any receiver whose
  name ends in ``log`` or ``logger``), ``warnings.warn``, or a logging handler's ``handleError``;
- count it: ``x.inc(...)``, ``x.increment(...)``, ``x.record_failure(...)``-style calls whose name starts with
  ``count``/``inc``/``record``, or an augmented ``+=`` on a name or attribute;
- hand the caught exception on: the bound name (``except Exception as exc``) is used outside a logger call below
  warning level (stored in a result, passed to another thread, mapped to a status, chained as a cause).

An ``if`` says something only when both of its branches do (``except Exception: if started: raise`` is silent
when nothing started). ``contextlib.suppress(Exception)`` is always reported: it can say nothing.

A ``noqa`` comment does not exempt a handler (ruff's BLE001 accepts ``log.debug(..., exc_info=True)``, and a
``# noqa: BLE001`` silences it altogether); a handler that has nothing to say must narrow what it catches.
Exit status 1 with one ``path:line: ...`` line per silent handler, 0 when there is none.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOTS = ("hxd2_ray", "serve", "jobs")
BROAD = {"Exception", "BaseException"}
LOUD_LEVELS = {"warning", "warn", "error", "exception", "critical", "fatal"}
QUIET_LEVELS = {"debug", "info", "log"}
COUNT_PREFIXES = ("inc", "count", "record")


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def is_broad(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(_name(t) in BROAD for t in types)


def _is_logger(receiver: ast.expr) -> bool:
    name = _name(receiver).lower().lstrip("_")
    if isinstance(receiver, ast.Call):  # logging.getLogger(...).warning(...)
        name = _name(receiver.func).lower()
        return name == "getlogger"
    return name.endswith("log") or name.endswith("logger") or name == "logging"


def _logger_level(call: ast.Call) -> str | None:
    """The level of a logger call (``log.warning(...)`` -> "warning"), or None for any other call."""
    func = call.func
    if isinstance(func, ast.Attribute) and _is_logger(func.value):
        return func.attr
    return None


def _quiet_log_nodes(node: ast.AST) -> set[int]:
    """The ids of every node inside a logger call below warning level (a name used there is not handed on)."""
    quiet: set[int] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _logger_level(sub) in QUIET_LEVELS:
            quiet.update(id(n) for n in ast.walk(sub))
    return quiet


def _says_something(node: ast.AST, name: str | None) -> bool:
    """Whether a node without branches raises, logs loudly, counts, or uses the caught exception's name."""
    quiet = _quiet_log_nodes(node)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Raise):
            return True
        if isinstance(sub, ast.AugAssign) and isinstance(sub.op, ast.Add):
            return True
        if name is not None and isinstance(sub, ast.Name) and sub.id == name and id(sub) not in quiet:
            return True
        if isinstance(sub, ast.Call):
            level = _logger_level(sub)
            if level in LOUD_LEVELS:
                return True
            func = sub.func
            if isinstance(func, ast.Attribute) and _name(func.value) == "warnings" and func.attr == "warn":
                return True
            if isinstance(func, ast.Attribute) and func.attr == "handleError":  # a logging.Handler's own report
                return True
            if level is None and _name(func).lower().lstrip("_").startswith(COUNT_PREFIXES):
                return True
    return False


def _loud(body: list[ast.stmt], name: str | None) -> bool:
    """Whether every way through the statements says something. An ``if`` counts only when both of its branches
    do, so ``except Exception: if started: raise`` (silent when not started) is reported."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, ast.If):
            if _says_something(stmt.test, name) or (_loud(stmt.body, name) and _loud(stmt.orelse, name)):
                return True
        elif isinstance(stmt, ast.Try):
            if _loud(stmt.body, name) or _loud(stmt.finalbody, name):
                return True
        elif isinstance(stmt, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
            if _loud(stmt.body, name):
                return True
        elif isinstance(stmt, ast.Match):
            if all(_loud(case.body, name) for case in stmt.cases):
                return True
        elif _says_something(stmt, name):
            return True
    return False


def _broad_suppress(node: ast.AST) -> bool:
    """``contextlib.suppress(Exception)``: a broad handler with nothing in it."""
    if not isinstance(node, ast.Call) or _name(node.func) != "suppress":
        return False
    caught = [t for arg in node.args for t in (arg.elts if isinstance(arg, ast.Tuple) else [arg])]
    return any(_name(t) in BROAD for t in caught)


def silent_handlers(source: str, filename: str = "<string>") -> Iterator[tuple[int, str]]:
    """(line, what was caught) of each broad handler that neither raises, logs loudly, counts nor hands it on."""
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        if _broad_suppress(node):
            yield node.lineno, ast.unparse(node)
            continue
        if not isinstance(node, ast.ExceptHandler) or not is_broad(node):
            continue
        if _loud(node.body, node.name):
            continue
        caught = "bare except" if node.type is None else f"except {ast.unparse(node.type)}"
        yield node.lineno, caught


def python_files(roots: list[str]) -> Iterator[Path]:
    for root in roots:
        path = Path(root)
        if path.is_file():
            yield path
        else:
            yield from sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)


def main(argv: list[str]) -> int:
    roots = argv or [str(REPO / r) for r in DEFAULT_ROOTS]
    problems = 0
    for path in python_files(roots):
        for line, caught in silent_handlers(path.read_text(encoding="utf-8"), str(path)):
            shown = path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path
            print(
                f"{shown}:{line}: {caught} swallows in silence: narrow it, or log it at warning level or above, "
                "count it, re-raise it or hand it on"
            )
            problems += 1
    if problems:
        print(f"silent_except: {problems} silent broad handler(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
