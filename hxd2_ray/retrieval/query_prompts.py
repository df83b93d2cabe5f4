"""Query prompts as versioned data (``prompts/query_<version>.yaml``): keyword extraction and answer generation.

Like the extraction prompts, the version hash covers the YAML bytes, so a trace or an evaluation run can say
exactly which prompt text produced an answer.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from hxd2_ray.prompt_templates import placeholder_filler


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
    name = f"query_{version}.yaml"
    resource = resources.files("hxd2_ray.retrieval").joinpath("prompts", name)
    if not resource.is_file():
        raise FileNotFoundError(f"no query prompt set {version!r} (looked for hxd2_ray/retrieval/prompts/{name})")
    return parse_query_prompts(resource.read_bytes(), version)


def load_query_prompts_file(path: str | Path, version: str | None = None) -> QueryPromptSet:
    p = Path(path)
    return parse_query_prompts(p.read_bytes(), version or p.stem.removeprefix("query_"))


def parse_query_prompts(raw: bytes, version: str) -> QueryPromptSet:
    data = yaml.safe_load(raw.decode("utf-8"))
    if not isinstance(data, dict) or "en" not in data:
        raise ValueError("query prompt file must map language codes to templates and have an 'en' section")
    languages = {str(lang): _language(str(lang), section) for lang, section in data.items()}
    digest = hashlib.sha256(raw).hexdigest()[:12]
    return QueryPromptSet(version=version, version_hash=f"{version}-{digest}", languages=MappingProxyType(languages))


def _language(lang: str, section: Any) -> QueryLanguagePrompts:
    def get(*path: str, strip: bool = True) -> str:
        node: Any = section
        for part in path:
            if not isinstance(node, dict) or part not in node:
                raise ValueError(f"query prompt file: {lang}.{'.'.join(path)} is missing")
            node = node[part]
        if not isinstance(node, str) or not node.strip():
            raise ValueError(f"query prompt file: {lang}.{'.'.join(path)} must be a non-empty string")
        return node.strip() if strip else node

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
