"""Render the context as CSV tables (as the reference did) and assemble the answer prompt (pure).

Each row is rendered on its own so its tokens can be counted once and the budget can keep a prefix of
rows; the ``id`` column is the row's rank, so a cut table still reads 1..n.
"""

from __future__ import annotations

import csv
import io
import posixpath
from typing import Sequence

from hxd2_ray.llm.base import LLMRequest, Message
from hxd2_ray.retrieval.query_prompts import QueryLanguagePrompts, fill
from hxd2_ray.retrieval.results import ContextChunk, ContextEntity, ContextRelation

ENTITY_COLUMNS = ("id", "entity", "type", "description", "rank")
RELATION_COLUMNS = ("id", "source", "target", "description", "keywords", "weight", "rank")
CHUNK_COLUMNS = ("id", "source", "content")


def csv_line(values: Sequence[object]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buf.getvalue().rstrip("\n")


def entity_rows(entities: Sequence[ContextEntity]) -> list[str]:
    # rank = node degree, LightRAG's entity rank (the reference printed UNKNOWN for every type: fixed).
    return [csv_line((i, e.name, e.type, e.description, e.degree)) for i, e in enumerate(entities, 1)]


def relation_rows(relations: Sequence[ContextRelation]) -> list[str]:
    return [
        csv_line((i, r.source_name, r.target_name, r.description, ", ".join(r.keywords), _number(r.weight), r.degree))
        for i, r in enumerate(relations, 1)
    ]


def chunk_source(chunk: ContextChunk) -> str:
    """What a reader would cite: the title, else the source id, else the file name."""
    return chunk.doc_title or chunk.doc_source_id or posixpath.basename(chunk.doc_source_path) or chunk.doc_id


def chunk_rows(chunks: Sequence[ContextChunk]) -> list[str]:
    rows = []
    for i, c in enumerate(chunks, 1):
        content = f"{c.header_path}: {c.text}" if c.header_path else c.text
        rows.append(csv_line((i, chunk_source(c), content)))
    return rows


HEADERS = {
    "entities": csv_line(ENTITY_COLUMNS),
    "relations": csv_line(RELATION_COLUMNS),
    "chunks": csv_line(CHUNK_COLUMNS),
}


def render_table(section: str, rows: Sequence[str], empty: str) -> str:
    if not rows:
        return empty
    return "\n".join([HEADERS[section], *rows])


def answer_messages(
    prompts: QueryLanguagePrompts,
    entities: Sequence[str],
    relations: Sequence[str],
    chunks: Sequence[str],
    question: str,
) -> tuple[Message, ...]:
    """System: the instructions only. User: the three tables, then the question, last."""
    user = fill(
        prompts.answer_user,
        entities=render_table("entities", entities, prompts.empty_table),
        relations=render_table("relations", relations, prompts.empty_table),
        chunks=render_table("chunks", chunks, prompts.empty_table),
        question=question,
    )
    return ({"role": "system", "content": prompts.answer_system}, {"role": "user", "content": user})


def answer_request(messages: tuple[Message, ...], max_tokens: int, temperature: float) -> LLMRequest:
    return LLMRequest(messages=messages, max_tokens=max_tokens, temperature=temperature, tag="answer")


def prompt_text(messages: Sequence[Message]) -> str:
    """All message contents, as the token count of a prompt sees them."""
    return "\n".join(m["content"] for m in messages)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3g}"
