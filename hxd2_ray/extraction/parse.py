"""Read entity/relation records out of LLM replies. Pure, and never raises on model text.

Policies (documented here because they shape the graph):

* Names keep their surface form (the reference upper-cased them); only the merge key is normalised, and
  over-long names are truncated by the merge, not here.
* Entity types are a closed vocabulary: a type is mapped to the configured type it equals
  case-insensitively (also after dropping a plural "s", or via a few common aliases such as "geo" or
  "人物" when the target type is configured); anything else becomes "unknown". Free-form types from a
  small model would otherwise explode the type column; "unknown" never outvotes a real type in the merge.
* Required fields: an entity needs a name, a relation a source and a target; everything else has a
  default (type "unknown", empty description, no keywords, strength 1.0). A record that cannot be read is
  skipped and counted in ``malformed``; so is a relation whose endpoints normalise to the same name.
* Tuples: lines without any ``<|>`` delimiter are treated as chatter (not counted) unless they start like a
  record (``("entity"`` ...), which counts as malformed. JSON: a reply with no readable JSON counts as one
  malformed record.
"""

from __future__ import annotations

import functools
import html
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import UNKNOWN_TYPE, normalize_name
from hxd2_ray.types import EntityMention, RelationMention

TUPLE_DELIMITER = "<|>"
RECORD_DELIMITER = "##"
COMPLETION_DELIMITER = "<|COMPLETE|>"


@dataclass(frozen=True, slots=True)
class ParsedRecords:
    entities: tuple[EntityMention, ...] = ()
    relations: tuple[RelationMention, ...] = ()
    content_keywords: tuple[str, ...] = ()
    malformed: int = 0


# --------------------------------------------------------------------------------------------- cleaning

# Control characters, and lone surrogates (a JSON "\\ud800" escape decodes to one; no encoder accepts it).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_QUOTE_PAIRS = {'"': '"', "'": "'", "`": "`", "“": "”", "‘": "’", "「": "」"}
_KEYWORD_SPLIT_RE = re.compile(r"[,，、;；]")


def _strip_quotes(s: str) -> str:
    while len(s) >= 2 and _QUOTE_PAIRS.get(s[0]) == s[-1]:
        s = s[1:-1].strip()
    # A lone double quote at an edge is delimiter debris ("Alice or Alice"); a lone single quote is more
    # likely an apostrophe (Jesus') and stays.
    if s.count('"') % 2 == 1:
        if s.startswith('"'):
            s = s[1:].strip()
        elif s.endswith('"'):
            s = s[:-1].strip()
    return s


def clean_name(raw: str) -> str:
    """HTML-unescape, control characters (and lone surrogates) to spaces, surrounding whitespace/quotes off;
    otherwise verbatim."""
    return _strip_quotes(_CONTROL_RE.sub(" ", html.unescape(raw)).strip())


def clean_description(raw: str) -> str:
    """As :func:`clean_name`, and whitespace collapsed: merged descriptions are joined with newlines, so a
    description must not contain one."""
    return _strip_quotes(" ".join(_CONTROL_RE.sub(" ", html.unescape(raw)).split()))


def split_keywords(raw: str) -> list[str]:
    return [kw for kw in (clean_name(p) for p in _KEYWORD_SPLIT_RE.split(raw)) if kw]


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


# ------------------------------------------------------------------------------------------ entity types

# Aliases a model commonly uses instead of the default type names (incl. Chinese ones from the zh prompt).
_TYPE_ALIASES = {
    "geo": "location",
    "place": "location",
    "country": "location",
    "city": "location",
    "地点": "location",
    "地理位置": "location",
    "地名": "location",
    "位置": "location",
    "org": "organization",
    "organisation": "organization",
    "company": "organization",
    "institution": "organization",
    "组织": "organization",
    "机构": "organization",
    "公司": "organization",
    "people": "person",
    "人物": "person",
    "人": "person",
    "人名": "person",
    "time": "date",
    "year": "date",
    "日期": "date",
    "时间": "date",
    "事件": "event",
    "概念": "concept",
    "关键词": "keyword",
    "作品": "work",
    "自然": "nature",
    "人造物": "artificial",
    "科学": "science",
    "技术": "technology",
    "tech": "technology",
    "任务": "mission",
    "基因": "gene",
}


@functools.lru_cache(maxsize=32)
def _type_lookup(entity_types: tuple[str, ...]) -> Mapping[str, str]:
    lookup: dict[str, str] = {}
    for alias, target in _TYPE_ALIASES.items():
        for t in entity_types:
            if t.casefold() == target:
                lookup[alias] = t
    for t in reversed(entity_types):  # configured names win over aliases; the first of duplicates wins
        lookup[t.casefold()] = t
    return lookup


def resolve_entity_type(raw: str, cfg: ExtractionConfig) -> str:
    """The configured type ``raw`` names (case-insensitive, plural, alias), else "unknown"."""
    lookup = _type_lookup(tuple(cfg.entity_types))
    t = clean_name(raw).strip("<>[]{}()").strip().casefold()
    if not t:
        return UNKNOWN_TYPE
    found = lookup.get(t) or lookup.get(t.replace(" ", "_")) or lookup.get(t.replace("_", " "))
    if found is None and len(t) > 3 and t.endswith("s"):
        found = lookup.get(t[:-1])
    return found or UNKNOWN_TYPE


# ------------------------------------------------------------------------------------ record assembling


class _Builder:
    """Collects records of one reply; applies the required-field and self-loop rules in one place."""

    def __init__(self, chunk_id: str, cfg: ExtractionConfig) -> None:
        self.chunk_id = chunk_id
        self.cfg = cfg
        self.entities: list[EntityMention] = []
        self.relations: list[RelationMention] = []
        self.keywords: list[str] = []
        self.malformed = 0

    def entity(self, name: str, type_: str, description: str) -> None:
        name = clean_name(name)
        if not name or not normalize_name(name):
            self.malformed += 1
            return
        self.entities.append(
            EntityMention(name, resolve_entity_type(type_, self.cfg), clean_description(description), self.chunk_id)
        )

    def relation(self, source: str, target: str, description: str, keywords: Iterable[str], strength: float) -> None:
        source, target = clean_name(source), clean_name(target)
        src_key, tgt_key = normalize_name(source), normalize_name(target)
        if not src_key or not tgt_key or src_key == tgt_key:
            self.malformed += 1
            return
        kws = _unique(kw for kw in (clean_name(k) for k in keywords) if kw)
        self.relations.append(
            RelationMention(source, target, clean_description(description), kws, strength, self.chunk_id)
        )

    def result(self) -> ParsedRecords:
        return ParsedRecords(tuple(self.entities), tuple(self.relations), _unique(self.keywords), self.malformed)


def parse_strength(value: Any) -> float | None:
    """A finite float from a number or numeric string; None otherwise (bools are not strengths)."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            f = float(value)
        elif isinstance(value, str):
            f = float(clean_name(value))
        else:
            return None
    except (ValueError, OverflowError):  # OverflowError: a 400-digit integer literal
        return None
    return f if math.isfinite(f) else None


# --------------------------------------------------------------------------------------------- tuples

_COMPLETION_RE = re.compile(r"<\s*\|\s*COMPLETE\s*\|\s*>", re.IGNORECASE)
_DELIMITER_RE = re.compile(r"\s*<\s*\|\s*>\s*")
# Two records on one line without "##": ...)("entity"<|>...
_GLUED_RE = re.compile(r"\)\s*,?\s*(?=\(\s*[\"']?(?:entity|relationship|relation|content_keywords)\b)", re.IGNORECASE)
_RECORD_START_RE = re.compile(r"^\W*(?:entity|relationship|relation|content_keywords)\b", re.IGNORECASE)
_KINDS = {
    "entity": "entity",
    "实体": "entity",
    "relationship": "relation",
    "relation": "relation",
    "关系": "relation",
    "contentkeywords": "keywords",
    "contentkeyword": "keywords",
    "内容关键词": "keywords",
}


def _record_kind(head: str) -> str | None:
    # Drops list numbering, brackets, quotes and underscores: '1. ("entity"' -> 'entity'.
    return _KINDS.get(re.sub(r"[\W\d_]", "", head).casefold())


def _strip_closing(last: str) -> str:
    last = last.strip().rstrip(",;").rstrip()
    # Only drop ")" when it is unbalanced, so "Alice (born 1950)" survives a record that lost its own ")".
    if last.endswith(")") and last.count(")") > last.count("("):
        last = last[:-1]
    return last


def parse_tuples(text: str, chunk_id: str, cfg: ExtractionConfig) -> ParsedRecords:
    """Parse LightRAG-style ``("entity"<|>NAME<|>TYPE<|>DESCRIPTION)##...<|COMPLETE|>`` output."""
    out = _Builder(chunk_id, cfg)
    if not isinstance(text, str) or not text:
        return out.result()
    text = _GLUED_RE.sub(")\n", _COMPLETION_RE.sub("\n", text))
    for raw in re.split(r"##|\r|\n", text):
        record = _DELIMITER_RE.sub(TUPLE_DELIMITER, raw.strip())
        if not record:
            continue
        if TUPLE_DELIMITER not in record:
            if _RECORD_START_RE.match(record):
                out.malformed += 1
            continue
        parts = record.split(TUPLE_DELIMITER)
        parts[-1] = _strip_closing(parts[-1])
        kind = _record_kind(parts[0])
        fields = parts[1:]
        if kind == "entity":
            out.entity(fields[0], fields[1] if len(fields) > 1 else "", fields[2] if len(fields) > 2 else "")
        elif kind == "relation":
            _tuple_relation(out, fields)
        elif kind == "keywords":
            out.keywords.extend(kw for f in fields for kw in split_keywords(f))
        else:
            out.malformed += 1
    return out.result()


def _tuple_relation(out: _Builder, fields: list[str]) -> None:
    if len(fields) < 2:
        out.malformed += 1
        return
    description = fields[2] if len(fields) > 2 else ""
    keywords_field = fields[3] if len(fields) > 3 else ""
    strength = None
    if len(fields) == 4 and parse_strength(keywords_field) is not None:
        # ("relationship"<|>A<|>B<|>desc<|>8): the keywords were left out, the number is the strength.
        strength, keywords_field = parse_strength(keywords_field), ""
    elif len(fields) > 4:
        strength = parse_strength(fields[4])
        if strength is None:
            strength = parse_strength(fields[-1])
    strength = 1.0 if strength is None else strength
    out.relation(fields[0], fields[1], description, split_keywords(keywords_field), strength)


# ----------------------------------------------------------------------------------------------- json

_MAX_REPAIR_ATTEMPTS = 16
_MAX_REPAIR_DEPTH = 32


def _outermost_span(text: str) -> str | None:
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else None


def _scan_repair(text: str) -> Any:
    """Recover a JSON value from the first ``{``/``[``: the first complete value, or, when the reply was cut
    off (max_tokens), the longest prefix ending after a complete array element/object with its open
    brackets closed."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    start = min(starts)
    closers: list[str] = []
    cuts: list[tuple[int, str]] = []
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if closers and closers[-1] == "]":  # a complete string element of an array
                    cuts.append((i + 1, "".join(reversed(closers))))
            continue
        if c == '"':
            in_string = True
        elif c in "{[":
            if len(closers) >= _MAX_REPAIR_DEPTH:
                break  # no extraction reply nests this deep; stop before the suffixes get expensive
            closers.append("}" if c == "{" else "]")
        elif c in "}]":
            if not closers or closers[-1] != c:
                break  # mismatched bracket: keep only what came before
            closers.pop()
            if not closers:
                value = _loads(text[start : i + 1])
                if value is not _NOTHING:
                    return value
                break
            cuts.append((i + 1, "".join(reversed(closers))))
    for end, suffix in reversed(cuts[-_MAX_REPAIR_ATTEMPTS:]):
        value = _loads(text[start:end] + suffix)
        if value is not _NOTHING:
            return value
    return None


_NOTHING = object()


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting from a looping model
        return _NOTHING


def load_json_lenient(text: str) -> Any:
    """``json.loads``; else the outermost ``{...}`` span (code fences, chatter); else a truncation repair.
    None when nothing readable is there."""
    if not isinstance(text, str) or not text.strip():
        return None
    for candidate in (text, _outermost_span(text)):
        if candidate is not None and (value := _loads(candidate)) is not _NOTHING:
            return value
    return _scan_repair(text)


def _first(item: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in item and item[k] is not None:
            return item[k]
    return None


def _scalar(value: Any) -> str | None:
    """String form of a JSON scalar; None for objects/arrays (not a readable field)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _json_entity(out: _Builder, item: Any) -> None:
    if not isinstance(item, Mapping):
        out.malformed += 1
        return
    name = _scalar(_first(item, "name", "entity_name", "entity"))
    type_ = _scalar(_first(item, "type", "entity_type"))
    description = _scalar(_first(item, "description", "entity_description", "summary"))
    if not name:
        out.malformed += 1
        return
    out.entity(name, type_ or "", description or "")


def _json_keywords(value: Any) -> list[str]:
    if isinstance(value, str):
        return split_keywords(value)
    if isinstance(value, list):
        return [kw for kw in (clean_name(v) for v in (_scalar(v) for v in value) if v) if kw]
    return []


def _json_relation(out: _Builder, item: Any) -> None:
    if not isinstance(item, Mapping):
        out.malformed += 1
        return
    source = _scalar(_first(item, "source", "src", "source_entity", "src_id"))
    target = _scalar(_first(item, "target", "tgt", "target_entity", "tgt_id"))
    if not source or not target:
        out.malformed += 1
        return
    description = _scalar(_first(item, "description", "relationship_description")) or ""
    keywords = _json_keywords(_first(item, "keywords", "relationship_keywords"))
    strength = parse_strength(_first(item, "strength", "weight", "relationship_strength"))
    out.relation(source, target, description, keywords, 1.0 if strength is None else strength)


def parse_json(text: str, chunk_id: str, cfg: ExtractionConfig) -> ParsedRecords:
    """Parse ``{"entities": [...], "relations": [...], "content_keywords": [...]}``, tolerantly."""
    out = _Builder(chunk_id, cfg)
    data = load_json_lenient(text)
    if data is None:
        if isinstance(text, str) and TUPLE_DELIMITER in _DELIMITER_RE.sub(TUPLE_DELIMITER, text):
            # An unconstrained small model sometimes answers in the tuple format anyway.
            return parse_tuples(text, chunk_id, cfg)
        if isinstance(text, str) and text.strip():
            out.malformed += 1
        return out.result()
    if isinstance(data, list):
        # A bare list of items: tell relations from entities by their fields.
        for item in data:
            if isinstance(item, Mapping) and _first(item, "source", "src", "source_entity") is not None:
                _json_relation(out, item)
            else:
                _json_entity(out, item)
        return out.result()
    if not isinstance(data, Mapping):
        out.malformed += 1
        return out.result()
    for key, handle in (
        (("entities", "entity", "nodes"), _json_entity),
        (("relations", "relationships", "relation", "edges"), _json_relation),
    ):
        items = _first(data, *key)
        if items is None:
            continue
        if not isinstance(items, list):
            out.malformed += 1
            continue
        for item in items:
            handle(out, item)
    out.keywords.extend(_json_keywords(_first(data, "content_keywords", "keywords")))
    return out.result()


def parse_reply(text: str, chunk_id: str, cfg: ExtractionConfig) -> ParsedRecords:
    """Parse with the configured format's parser."""
    return parse_json(text, chunk_id, cfg) if cfg.output_format == "json" else parse_tuples(text, chunk_id, cfg)
