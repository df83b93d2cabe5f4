"""Turn chunks and merged descriptions into :class:`LLMRequest`s (pure: no I/O, no model).

Conversation shapes (the chunk text is always the end of the first user message, so everything before it, the
system message and the task line, is byte-identical across chunks: the prefix the engine caches):

* extract:   [system: instructions + example, user: short task + marker + chunk text]
* glean:     extract messages + [assistant: reply 0, user: continue, assistant: reply 1, ..., user: continue]
* judge:     the same history + [user: judge question]
* summarize: [system: instructions, user: name + description list]
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.parse import COMPLETION_DELIMITER
from hxd2_ray.extraction.prompts import MAX_ENTITIES, LanguagePrompts, PromptSet, extraction_json_schema, fill
from hxd2_ray.llm.base import LLMRequest, Message
from hxd2_ray.types import Chunk

TAG_EXTRACT = "extract"
TAG_GLEAN = "glean"
TAG_JUDGE = "judge"
TAG_SUMMARIZE = "summarize"

JUDGE_CHOICES = ("yes", "no")
# The judge answer is one word; a few spare tokens let an unconstrained model add punctuation.
JUDGE_MAX_TOKENS = 8


def resolve_language(chunk: Chunk, cfg: ExtractionConfig) -> str:
    """The configured language, or the chunk's own (detected at chunking time) when ``auto``."""
    return chunk.language if cfg.language == "auto" else cfg.language


# The tuple format's end marker ends generation: nothing after it is read.
TUPLE_STOP = (COMPLETION_DELIMITER,)


@functools.lru_cache(maxsize=64)
def _cached_schema(
    entity_types: tuple[str, ...], items: int, description_chars: int, name_chars: int
) -> dict[str, Any]:
    # Shared by every request of a run: callers must treat it as read-only.
    return extraction_json_schema(
        entity_types,
        max_entities=items,
        max_relations=items,
        max_description_chars=description_chars,
        max_name_chars=name_chars,
    )


def max_items(chunk: Chunk, cfg: ExtractionConfig) -> int:
    """Entities (and relations) the schema allows for ``chunk``: one per ``chars_per_entity`` characters, rounded up
    to a multiple of 4 (few distinct schemas, each compiled once), from 4 to 30."""
    if cfg.chars_per_entity <= 0:
        return MAX_ENTITIES
    steps = -(-len(chunk.text) // (4 * cfg.chars_per_entity))
    return min(MAX_ENTITIES, 4 * max(1, steps))


def completion_budget(chunk: Chunk, cfg: ExtractionConfig) -> int:
    """max_tokens of an extraction or gleaning call on ``chunk``: ``completion_tokens_per_char`` per character of
    its text, at least ``min_tokens_per_call`` and at most ``max_tokens_per_call``."""
    if cfg.completion_tokens_per_char <= 0:
        return cfg.max_tokens_per_call
    wanted = int(len(chunk.text) * cfg.completion_tokens_per_char + 0.5)
    return max(min(cfg.min_tokens_per_call, cfg.max_tokens_per_call), min(cfg.max_tokens_per_call, wanted))


def _schema_for(chunk: Chunk, cfg: ExtractionConfig, supports_json_schema: bool) -> dict[str, Any] | None:
    if cfg.output_format != "json" or not supports_json_schema:
        return None
    return _cached_schema(tuple(cfg.entity_types), max_items(chunk, cfg), cfg.max_description_chars, cfg.max_name_chars)


def _stop_for(cfg: ExtractionConfig) -> tuple[str, ...]:
    return TUPLE_STOP if cfg.output_format == "tuples" else ()


def _templates(chunk: Chunk, cfg: ExtractionConfig, prompts: PromptSet) -> LanguagePrompts:
    return prompts.for_language(resolve_language(chunk, cfg))


def extraction_messages(chunk: Chunk, cfg: ExtractionConfig, prompts: PromptSet) -> tuple[Message, ...]:
    """System + user messages of the first extraction call; the start of every later call's history."""
    t = _templates(chunk, cfg, prompts)
    types = ", ".join(cfg.entity_types)
    if cfg.output_format == "json":
        system, user = t.json_system, t.json_user
    else:
        system, user = t.tuples_system, t.tuples_user
    return (
        {"role": "system", "content": fill(system, entity_types=types)},
        {"role": "user", "content": fill(user, entity_types=types, input_text=chunk.text)},
    )


def render_extraction_request(
    chunk: Chunk, cfg: ExtractionConfig, prompts: PromptSet, supports_json_schema: bool
) -> LLMRequest:
    """Round 0. In json format the schema constrains decoding where the backend supports it; otherwise the
    prompt alone asks for JSON and the tolerant parser copes with what comes back."""
    return LLMRequest(
        messages=extraction_messages(chunk, cfg, prompts),
        max_tokens=completion_budget(chunk, cfg),
        json_schema=_schema_for(chunk, cfg, supports_json_schema),
        stop=_stop_for(cfg),
        tag=TAG_EXTRACT,
    )


def render_continue_request(
    chunk: Chunk,
    history_messages: Sequence[Message],
    cfg: ExtractionConfig,
    prompts: PromptSet,
    supports_json_schema: bool,
) -> LLMRequest:
    """A gleaning round: the whole conversation so far, then "MANY entities were missed ...".

    ``history_messages`` must end with the assistant's latest reply.
    """
    t = _templates(chunk, cfg, prompts)
    return LLMRequest(
        messages=(*history_messages, {"role": "user", "content": t.continue_extraction}),
        max_tokens=completion_budget(chunk, cfg),
        json_schema=_schema_for(chunk, cfg, supports_json_schema),
        stop=_stop_for(cfg),
        tag=TAG_GLEAN,
    )


def render_judge_request(
    chunk: Chunk,
    history_messages: Sequence[Message],
    cfg: ExtractionConfig,
    prompts: PromptSet,
    supports_choices: bool,
) -> LLMRequest:
    """ "Are entities still missing?" over the conversation so far; constrained to yes/no where supported."""
    t = _templates(chunk, cfg, prompts)
    return LLMRequest(
        messages=(*history_messages, {"role": "user", "content": t.judge}),
        max_tokens=JUDGE_MAX_TOKENS,
        choices=JUDGE_CHOICES if supports_choices else None,
        tag=TAG_JUDGE,
    )


def format_description_list(descriptions: Sequence[str]) -> str:
    return "\n".join(f"- {' '.join(d.split())}" for d in descriptions)


def render_summary_request(
    name: str, descriptions: Sequence[str], cfg: ExtractionConfig, prompts: PromptSet, language: str
) -> LLMRequest:
    """Merge the descriptions of one entity (or relation, named "A - B") into one summary."""
    t = prompts.for_language(language)
    return LLMRequest(
        messages=(
            {"role": "system", "content": t.summarize_system},
            {
                "role": "user",
                "content": fill(
                    t.summarize_user, entity_name=name, description_list=format_description_list(descriptions)
                ),
            },
        ),
        max_tokens=cfg.summary_max_tokens,
        tag=TAG_SUMMARIZE,
    )
