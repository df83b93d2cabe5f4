"""Keyword extraction: the request (JSON schema for constrained decoding) and a parser that tolerates bad replies.

Constrained decoding gives clean JSON on vLLM, but other backends, fakes and length-cut replies do not, so
the parser accepts, in order: JSON, JSON inside prose or code fences, JSON with trailing commas,
Python-literal dicts, a truncated object (quoted strings after each key), and "High-level keywords: a, b"
lines. A reply with nothing readable yields ``Keywords(parsed=False)``; retrieval then relies on the raw
question channel.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Iterable

from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.llm.base import LLMRequest
from hxd2_ray.retrieval.query_prompts import QueryLanguagePrompts, fill
from hxd2_ray.retrieval.results import Keywords

MAX_KEYWORD_CHARS = 200  # a "keyword" longer than this is a sentence the model copied; it is cut
SCHEMA_MAX_ITEMS = 10


def keywords_json_schema(max_items: int = SCHEMA_MAX_ITEMS) -> dict[str, Any]:
    """Plain schema (arrays with maxItems only): quick to compile for xgrammar, no junk forced by minItems."""
    array = {"type": "array", "items": {"type": "string"}, "maxItems": max_items}
    return {
        "type": "object",
        "properties": {"high_level_keywords": array, "low_level_keywords": array},
        "required": ["high_level_keywords", "low_level_keywords"],
        "additionalProperties": False,
    }


def keyword_request(
    question: str, prompts: QueryLanguagePrompts, max_tokens: int, temperature: float, max_items: int
) -> LLMRequest:
    return LLMRequest(
        messages=(
            {"role": "system", "content": prompts.keywords_system},
            {"role": "user", "content": fill(prompts.keywords_user, question=question)},
        ),
        max_tokens=max_tokens,
        temperature=temperature,
        json_schema=keywords_json_schema(max_items),
        tag="keywords",
    )


# ------------------------------------------------------------------------------------------ parsing

_FENCE_RE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA_RE = re.compile(r",\s*([}\]])")
_KEY_RE = re.compile(
    r"[\"']?\b(high|low)[\s_-]*level[\s_-]*(?:keywords?|key\s*words?)?[\"']?\s*[:=：]\s*", re.IGNORECASE
)
_ZH_KEY_RE = re.compile(r"(高层|高级|低层|低级)(?:关键词|关键字)?\s*[:：]\s*")
_QUOTED_RE = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'")
_SPLIT_RE = re.compile(r"[,，、;；\n]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def parse_keywords(text: str, max_keywords: int = SCHEMA_MAX_ITEMS) -> Keywords:
    """Keywords from an LLM reply, however messy (see the module docstring); never raises."""
    raw = text or ""
    obj = _load_json_like(raw)
    high: list[Any] = []
    low: list[Any] = []
    found = False
    if isinstance(obj, dict):
        found, high, low = _from_mapping(obj)
    elif isinstance(obj, list):
        found, low = True, obj  # a bare list: the entities are what retrieval needs most
    if not found:
        found, high, low = _from_labelled_segments(raw)
    return Keywords(
        low_level=clean_keywords(low, max_keywords),
        high_level=clean_keywords(high, max_keywords),
        parsed=found,
        raw=raw,
    )


def clean_keywords(items: Iterable[Any], limit: int) -> tuple[str, ...]:
    """Strings only, trimmed, cut to a sane length, de-duplicated by normalised name, first ``limit``."""
    out: dict[str, str] = {}
    for item in _flatten(items):
        # Lone surrogates (from a JSON "\\ud800" escape) become spaces: no encoder, embedder or Kùzu accepts them.
        word = " ".join(_SURROGATE_RE.sub(" ", str(item)).split()).strip(" \"'`[]{}()<>.,;:，。；：、")
        if not word:
            continue
        word = word[:MAX_KEYWORD_CHARS]
        out.setdefault(normalize_name(word), word)
        if len(out) >= limit:
            break
    return tuple(out.values())


def _flatten(items: Iterable[Any]) -> Iterable[Any]:
    if isinstance(items, (str, int, float)):
        items = [items]
    for item in items or ():
        if isinstance(item, str):
            # "a, b, c" inside a list element or as the whole value: split it.
            yield from (p for p in _SPLIT_RE.split(item) if p.strip())
        elif isinstance(item, (list, tuple)):
            yield from _flatten(item)
        elif isinstance(item, dict):
            yield from _flatten(list(item.values()))
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            yield str(item)


def _level_of(key: Any) -> str | None:
    k = re.sub(r"[^a-z\u4e00-\u9fff]", "", str(key).lower())
    if k.startswith(("high", "hl", "高")):
        return "high"
    if k.startswith(("low", "ll", "低")):
        return "low"
    return None


def _from_mapping(obj: dict[str, Any]) -> tuple[bool, list[Any], list[Any]]:
    high: list[Any] = []
    low: list[Any] = []
    found = False
    for key, value in obj.items():
        level = _level_of(key)
        if level == "high":
            high.extend(value if isinstance(value, list) else [value])
            found = True
        elif level == "low":
            low.extend(value if isinstance(value, list) else [value])
            found = True
    if not found:
        # {"keywords": [...]} and the like: everything counts as low level.
        for value in obj.values():
            if isinstance(value, (list, str)):
                low.extend(value if isinstance(value, list) else [value])
                found = True
    return found, high, low


def _load_json_like(text: str) -> Any:
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE_RE.finditer(text)]
    span = _balanced_span(text)
    if span:
        candidates.append(span)
    for cand in candidates:
        if not cand or cand[0] not in "{[":
            continue
        for attempt in (cand, _TRAILING_COMMA_RE.sub(r"\1", cand)):
            try:
                return json.loads(attempt)
            except ValueError:
                pass
            try:
                # Python-literal dicts ({'a': ['x']}) from chatty models; literal_eval runs no code.
                value = ast.literal_eval(attempt)
                if isinstance(value, (dict, list)):
                    return value
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                pass
    return None


def _balanced_span(text: str) -> str | None:
    """The first complete ``{...}`` (outside strings), e.g. inside "Sure! Here: {...} Hope it helps"."""
    start = text.find("{")
    while start != -1:
        depth = 0
        quote: str | None = None
        escaped = False
        for i in range(start, len(text)):
            ch = text[i]
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    quote = None
                continue
            if ch in "\"'":
                quote = ch if ch == '"' else quote  # single quotes are apostrophes as often as delimiters
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start : i + 1]
        start = text.find("{", start + 1)
    return None


def _from_labelled_segments(text: str) -> tuple[bool, list[str], list[str]]:
    """Text after each "high/low level keywords:" label up to the next label: quoted strings, else a list."""
    marks = [(m.start(), m.end(), m.group(1).lower()) for m in _KEY_RE.finditer(text)]
    marks += [
        (m.start(), m.end(), "high" if m.group(1) in ("高层", "高级") else "low") for m in _ZH_KEY_RE.finditer(text)
    ]
    marks.sort()
    high: list[str] = []
    low: list[str] = []
    for i, (_, end, level) in enumerate(marks):
        stop = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        segment = text[end:stop]
        quoted = [a or b for a, b in _QUOTED_RE.findall(segment)]
        if quoted:
            items = quoted
        else:
            # Unquoted: "a, b, c" on the label's line (a truncated reply may end without a bracket).
            line = segment.strip().splitlines()[0] if segment.strip() else ""
            items = [p for p in _SPLIT_RE.split(line.strip("[]{} ")) if p.strip()]
        (high if level.startswith("high") else low).extend(items)
    return bool(marks), high, low
