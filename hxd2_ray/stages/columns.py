"""Records <-> Arrow columns, at the edge between the library's dataclasses and Ray Data batches."""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.index_store import tables
from hxd2_ray.types import Chunk, Document, Extraction, QuarantinedFile

# Between the two entity keys of a relation mention's "pair" column (the merge stage's group key).
PAIR_SEP = "\x1f"

CHUNK_STRUCT = pa.struct([(f.name, f.type) for f in tables.CHUNKS if f.name != "shard"])

PARSED = pa.schema(
    [
        ("kind", pa.string()),  # "document" or "quarantine"
        ("source_path", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("doc_id", pa.string()),
        ("source_id", pa.string()),
        ("title", pa.string()),
        ("n_chars", pa.int64()),
        ("chunks", pa.list_(CHUNK_STRUCT)),
    ]
)


def chunk_row(chunk: Chunk) -> dict[str, Any]:
    return {
        "id": chunk.id,
        "doc_id": chunk.doc_id,
        "order": chunk.order,
        "start": chunk.start,
        "text": chunk.text,
        "header_path": chunk.header_path,
        "language": chunk.language,
    }


def parsed_rows(docs: Sequence[tuple[Document, list[Chunk]]], quarantined: Sequence[QuarantinedFile]) -> pa.Table:
    rows = [
        {
            "kind": "document",
            "source_path": doc.source_path,
            "reason": "",
            "detail": "",
            "doc_id": doc.id,
            "source_id": doc.source_id,
            "title": doc.title,
            "n_chars": len(doc.text),
            "chunks": [chunk_row(c) for c in chunks],
        }
        for doc, chunks in docs
    ]
    rows += [
        {
            "kind": "quarantine",
            "source_path": q.source_path,
            "reason": q.reason,
            "detail": q.detail,
            "doc_id": "",
            "source_id": "",
            "title": "",
            "n_chars": 0,
            "chunks": [],
        }
        for q in quarantined
    ]
    return pa.Table.from_pylist(rows, schema=PARSED)


def chunks_from_table(table: pa.Table) -> list[Chunk]:
    cols = {name: table.column(name).to_pylist() for name in ("id", "doc_id", "order", "start", "text")}
    header = table.column("header_path").to_pylist() if "header_path" in table.column_names else [""] * len(table)
    lang = table.column("language").to_pylist() if "language" in table.column_names else ["en"] * len(table)
    return [
        Chunk(
            id=cols["id"][i],
            doc_id=cols["doc_id"][i],
            order=cols["order"][i],
            start=cols["start"][i],
            text=cols["text"][i],
            header_path=header[i] or "",
            language=lang[i] or "en",
        )
        for i in range(len(table))
    ]


def extractions_to_table(extractions: Sequence[Extraction]) -> pa.Table:
    rows = [
        {
            "chunk_id": e.chunk_id,
            "entities": [{"name": m.name, "type": m.type, "description": m.description} for m in e.entities],
            "relations": [
                {
                    "source": r.source,
                    "target": r.target,
                    "description": r.description,
                    "keywords": list(r.keywords),
                    "strength": float(r.strength),
                }
                for r in e.relations
            ],
            "content_keywords": list(e.content_keywords),
            "malformed_records": e.malformed_records,
            "llm_calls": e.llm_calls,
            "ungrounded_entities": e.ungrounded_entities,
            "ungrounded_relations": e.ungrounded_relations,
            "prompt_tokens": e.prompt_tokens,
            "completion_tokens": e.completion_tokens,
            "error": e.error,
        }
        for e in extractions
    ]
    return pa.Table.from_pylist(rows, schema=tables.EXTRACTIONS)


def naming_unknown(relation_mentions: pa.Table, known_keys: set[str]) -> pa.Table:
    """The rows of a relation mention table (``merge_stage.RELATION_MENTIONS``) with an endpoint key outside
    ``known_keys``: the only mentions an endpoint-only entity is made from
    (:func:`~hxd2_ray.extraction.merge.missing_endpoint_entities`), chosen in Arrow so that the rest are never
    turned into Python objects."""
    if not relation_mentions.num_rows:
        return relation_mentions
    ends = pc.split_pattern(relation_mentions.column("pair"), PAIR_SEP, max_splits=1)
    known = pa.array(sorted(known_keys), pa.string())
    both_known = pc.and_(
        pc.is_in(pc.list_element(ends, 0), value_set=known),
        pc.is_in(pc.list_element(ends, 1), value_set=known),
    )
    return relation_mentions.filter(pc.invert(both_known))
