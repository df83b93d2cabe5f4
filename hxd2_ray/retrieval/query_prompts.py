"""Query prompts as versioned data (``prompts/query_<version>.yaml``): keyword extraction and answer generation.

Like the extraction prompts, the version hash covers the YAML bytes, so a trace or an evaluation run can say
exactly which prompt text produced an answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hxd2_ray.prompt_templates import (
    PromptSet,
    PromptSetLoader,
    check_placeholders,
    placeholder_filler,
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


QueryPromptSet = PromptSet[QueryLanguagePrompts]


fill = placeholder_filler(PLACEHOLDERS)


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
    check_placeholders(
        "query",
        lang,
        prompts,
        ends_with=[("keywords_user", "question"), ("answer_user", "question")],
        contains=[("answer.user", name) for name in ("entities", "relations", "chunks")],
    )
    return prompts


QUERY_PROMPTS = PromptSetLoader("hxd2_ray.retrieval", "query", _language)
load_query_prompts = QUERY_PROMPTS.load
load_query_prompts_file = QUERY_PROMPTS.load_file
parse_query_prompts = QUERY_PROMPTS.parse
