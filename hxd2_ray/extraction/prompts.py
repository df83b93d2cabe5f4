"""Extraction prompts as versioned data (``prompts/extraction_<version>.yaml``) and the JSON output schema.

The prompt text shapes the index as much as the model does, so :attr:`PromptSet.version_hash` hashes the
YAML bytes and goes into the index fingerprint: editing a prompt invalidates indexes built with the old one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from hxd2_ray.prompt_templates import (
    TEXT_MARKER,
    parse_languages,
    placeholder_filler,
    prompt_version_hash,
    read_prompt_set,
    section_text,
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


@dataclass(frozen=True, slots=True)
class PromptSet:
    version: str
    version_hash: str  # "v1-<12 hex of sha256(yaml bytes)>"
    languages: Mapping[str, LanguagePrompts]

    def for_language(self, language: str) -> LanguagePrompts:
        """Templates of ``language``; English when the language has none (a chunk's language is a guess)."""
        found = self.languages.get(language)
        if found is not None:
            return found
        return self.languages.get("en") or next(iter(self.languages.values()))


fill = placeholder_filler(PLACEHOLDERS)


@functools.lru_cache(maxsize=8)
def load_prompts(version: str = "v1") -> PromptSet:
    """The packaged prompt set ``extraction_<version>.yaml`` (cached: it is immutable)."""
    return parse_prompts(read_prompt_set("hxd2_ray.extraction", "extraction", version), version)


def load_prompts_file(path: str | Path, version: str | None = None) -> PromptSet:
    """A prompt set from an arbitrary file (experiments, tests); version defaults to the file's stem suffix."""
    p = Path(path)
    if version is None:
        version = p.stem.removeprefix("extraction_")
    return parse_prompts(p.read_bytes(), version)


def parse_prompts(raw: bytes, version: str) -> PromptSet:
    """Validate and freeze a prompt YAML; the hash covers the exact bytes."""
    return PromptSet(
        version=version,
        version_hash=prompt_version_hash(raw, version),
        languages=parse_languages(raw, "extraction", _language_prompts),
    )


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
            raise ValueError(f"prompt file: {lang}.{field} must end with the line {TEXT_MARKER!r} then {{input_text}}")
    if not prompts.summarize_user.endswith("{description_list}"):
        raise ValueError(f"prompt file: {lang}.summarize.user must end with {{description_list}}")
    if "{entity_name}" not in prompts.summarize_user:
        raise ValueError(f"prompt file: {lang}.summarize.user must contain {{entity_name}}")
    for field in ("tuples_system", "json_system"):
        if "{entity_types}" not in getattr(prompts, field):
            raise ValueError(f"prompt file: {lang}.{field} must contain {{entity_types}}")
    return prompts


# Caps keep a small model from looping forever inside constrained decoding; max_tokens is the backstop.
MAX_ENTITIES = 30
MAX_RELATIONS = 30
MAX_KEYWORDS = 10


def extraction_json_schema(
    entity_types: Sequence[str],
    max_entities: int = MAX_ENTITIES,
    max_relations: int = MAX_RELATIONS,
    max_keywords: int = MAX_KEYWORDS,
) -> dict[str, Any]:
    """JSON schema of one extraction reply; entity ``type`` is an enum of the configured types.

    Deliberately plain (objects, arrays with ``maxItems``, string enum, number) so that xgrammar compiles it
    quickly; no ``minItems``/``pattern`` constraints, which blow up grammar size or force junk output.
    Property order is the generation order: entities first, then relations between them, then keywords.
    """
    entity = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "type": {"type": "string", "enum": list(dict.fromkeys(entity_types))},
            "description": {"type": "string"},
        },
        "required": ["name", "type", "description"],
        "additionalProperties": False,
    }
    relation = {
        "type": "object",
        "properties": {
            "source": {"type": "string"},
            "target": {"type": "string"},
            "description": {"type": "string"},
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
