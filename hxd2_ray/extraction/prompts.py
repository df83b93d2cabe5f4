"""Extraction prompts as versioned data (``prompts/extraction_<version>.yaml``) and the JSON output schema.

The prompt text shapes the index as much as the model does, so :attr:`PromptSet.version_hash` hashes the
YAML bytes and goes into the index fingerprint: editing a prompt invalidates indexes built with the old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from hxd2_ray.prompt_templates import (
    TEXT_MARKER,
    PromptSetLoader,
    check_placeholders,
    placeholder_filler,
    section_text,
)
from hxd2_ray.prompt_templates import (
    PromptSet as GenericPromptSet,
)

PLACEHOLDERS = ("entity_types", "input_text", "entity_name", "description_list")


@dataclass(frozen=True, slots=True)
class LanguagePrompts:
    """All templates of one language; ``*_user`` templates end with their data placeholder."""

    tuples_system: str
    tuples_user: str
    json_system: str
    json_user: str
    continue_extraction: str
    judge: str
    summarize_system: str
    summarize_user: str


PromptSet = GenericPromptSet[LanguagePrompts]


fill = placeholder_filler(PLACEHOLDERS)


def _language_prompts(lang: str, section: Any) -> LanguagePrompts:
    def get(*path: str) -> str:
        # Block scalars end with a newline; trimming it keeps the chunk text the very last characters.
        return section_text("extraction", lang, section, path)

    prompts = LanguagePrompts(
        tuples_system=get("tuples", "system"),
        tuples_user=get("tuples", "user"),
        json_system=get("json", "system"),
        json_user=get("json", "user"),
        continue_extraction=get("continue"),
        judge=get("judge"),
        summarize_system=get("summarize", "system"),
        summarize_user=get("summarize", "user"),
    )
    for field in ("tuples_user", "json_user"):
        template = getattr(prompts, field)
        if not template.endswith(TEXT_MARKER + "\n{input_text}"):
            raise ValueError(
                f"extraction prompt file: {lang}.{field} must end with the line {TEXT_MARKER!r} then {{input_text}}"
            )
    check_placeholders(
        "extraction",
        lang,
        prompts,
        ends_with=[("summarize.user", "description_list")],
        contains=[("summarize.user", "entity_name"), *((f, "entity_types") for f in ("tuples_system", "json_system"))],
    )
    return prompts


EXTRACTION_PROMPTS = PromptSetLoader("hxd2_ray.extraction", "extraction", _language_prompts)
load_prompts = EXTRACTION_PROMPTS.load
load_prompts_file = EXTRACTION_PROMPTS.load_file
parse_prompts = EXTRACTION_PROMPTS.parse


# Caps keep a small model from looping forever inside constrained decoding; max_tokens is the backstop.
MAX_ENTITIES = 30
MAX_RELATIONS = 30
MAX_KEYWORDS = 10


def extraction_json_schema(
    entity_types: Sequence[str],
    max_entities: int = MAX_ENTITIES,
    max_relations: int = MAX_RELATIONS,
    max_keywords: int = MAX_KEYWORDS,
    max_description_chars: int = 0,
    max_name_chars: int = 0,
) -> dict[str, Any]:
    """JSON schema of one extraction reply; entity ``type`` is an enum of the configured types.

    Deliberately plain (objects, arrays with ``maxItems``, string enum, number, string ``maxLength``) so that
    xgrammar compiles it quickly; no ``minItems``/``pattern`` constraints, which blow up grammar size or force junk
    output. Property order is the generation order: entities first, then relations between them, then keywords.
    ``max_description_chars`` and ``max_name_chars`` (0: none) end a description or a name that a small model would
    repeat until the token cap.
    """
    description: dict[str, Any] = {"type": "string"}
    if max_description_chars > 0:
        description["maxLength"] = max_description_chars
    name: dict[str, Any] = {"type": "string"}
    if max_name_chars > 0:
        name["maxLength"] = max_name_chars
    entity = {
        "type": "object",
        "properties": {
            "name": name,
            "type": {"type": "string", "enum": list(dict.fromkeys(entity_types))},
            "description": description,
        },
        "required": ["name", "type", "description"],
        "additionalProperties": False,
    }
    relation = {
        "type": "object",
        "properties": {
            "source": name,
            "target": name,
            "description": description,
            "keywords": {"type": "array", "items": {"type": "string"}, "maxItems": max_keywords},
            "strength": {"type": "number"},
        },
        "required": ["source", "target", "description", "keywords", "strength"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "entities": {"type": "array", "items": entity, "maxItems": max_entities},
            "relations": {"type": "array", "items": relation, "maxItems": max_relations},
            "content_keywords": {"type": "array", "items": {"type": "string"}, "maxItems": max_keywords},
        },
        "required": ["entities", "relations", "content_keywords"],
        "additionalProperties": False,
    }
