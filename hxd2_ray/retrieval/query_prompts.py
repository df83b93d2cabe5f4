"""Query prompts as versioned data (``prompts/query_<version>.yaml``): keyword extraction and answer generation.

Like the extraction prompts, the version hash covers the YAML bytes, so a trace or an evaluation run can say
exactly which prompt text produced an answer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hxd2_ray.prompt_templates import (
    parse_languages,
    placeholder_filler,
    prompt_version_hash,
    read_prompt_set,
    section_text,
)

PLACEHOLDERS = ("question", "entities", "relations", "chunks")


@dataclass(frozen=True, slots=True)
class QueryLanguagePrompts:
    keywords_system: str
    keywords_user: str  # ends with {question}
    answer_system: str
    answer_user: str  # holds {entities} {relations} {chunks}, ends with {question}
    empty_table: str  # shown instead of a table with no rows
    question_cut_marker: str  # put where the middle of an over-long question was cut


@dataclass(frozen=True, slots=True)
class QueryPromptSet:
    version: str
    version_hash: str
    languages: Mapping[str, QueryLanguagePrompts]

    def for_language(self, language: str) -> QueryLanguagePrompts:
        """Templates of ``language``; English when there are none for it (the language is a guess)."""
        return self.languages.get(language) or self.languages["en"]


fill = placeholder_filler(PLACEHOLDERS)


@functools.lru_cache(maxsize=8)
def load_query_prompts(version: str = "v1") -> QueryPromptSet:
    return parse_query_prompts(read_prompt_set("hxd2_ray.retrieval", "query", version), version)


def load_query_prompts_file(path: str | Path, version: str | None = None) -> QueryPromptSet:
    p = Path(path)
    return parse_query_prompts(p.read_bytes(), version or p.stem.removeprefix("query_"))


def parse_query_prompts(raw: bytes, version: str) -> QueryPromptSet:
    return QueryPromptSet(
        version=version,
        version_hash=prompt_version_hash(raw, version),
        languages=parse_languages(raw, "query", _language),
    )


def _language(lang: str, section: Any) -> QueryLanguagePrompts:
    def get(*path: str, strip: bool = True) -> str:
        return section_text("query", lang, section, path, strip=strip)

    prompts = QueryLanguagePrompts(
        keywords_system=get("keywords", "system"),
        keywords_user=get("keywords", "user"),
        answer_system=get("answer", "system"),
        answer_user=get("answer", "user"),
        empty_table=get("empty_table"),
        question_cut_marker=get("question_cut_marker", strip=False),
    )
    for field in ("keywords_user", "answer_user"):
        if not getattr(prompts, field).endswith("{question}"):
            raise ValueError(f"query prompt file: {lang}.{field} must end with {{question}}")
    for name in ("entities", "relations", "chunks"):
        if "{" + name + "}" not in prompts.answer_user:
            raise ValueError(f"query prompt file: {lang}.answer.user must contain {{{name}}}")
    return prompts
