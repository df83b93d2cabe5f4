"""The Arrow tables a graph is bulk-loaded from, prepared without Kùzu (tests and the job inspect what would load)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.graph import schema
from hxd2_ray.graph.kuzu_schema import (
    CHUNK_COLUMNS,
    DOCUMENT_COLUMNS,
    ENTITY_COLUMNS,
    MENTIONS_COLUMNS,
    NAMES_TITLE_COLUMNS,
    PART_OF_COLUMNS,
    RELATED_COLUMNS,
    SYNONYM_COLUMNS,
)

# ---------------------------------------------------------------------------------------------------
# Arrow preparation (pure: no Kùzu), exposed so tests and the job can inspect what would be loaded.


def _require_columns(table: pa.Table, schema: pa.Schema, what: str) -> None:
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise ValueError(f"{what} table lacks columns {missing}; expected {schema.names}")


def _fill_nulls(col: pa.ChunkedArray, typ: pa.DataType) -> pa.ChunkedArray:
    """Readers get "" / 0 / False / [] instead of None, so rows look the same however they were staged."""
    col = col.cast(typ)
    if col.null_count == 0:
        return col
    if pa.types.is_list(typ):
        empty = pa.scalar([], type=typ)
        return pc.if_else(pc.is_null(col), empty, col)
    default = {pa.string(): "", pa.int64(): 0, pa.bool_(): False, pa.float64(): 0.0}[typ]
    return pc.fill_null(col, pa.scalar(default, type=typ))


def _select(table: pa.Table, source_names: list[str], schema: pa.Schema, what: str) -> pa.Table:
    """Columns ``source_names`` renamed and cast to ``schema`` (the DDL order)."""
    cols = []
    for src, field in zip(source_names, schema):
        if src not in table.column_names:
            raise ValueError(f"{what} table lacks column {src!r}")
        cols.append(_fill_nulls(table[src], field.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _check_no_null(table: pa.Table, column: str, what: str) -> None:
    nulls = table[column].null_count
    if nulls:
        raise ValueError(f"{what}: {nulls} rows have a null {column!r} (a primary key)")


def _dedup(table: pa.Table, keys: list[str]) -> pa.Table:
    """First row per key (duplicate primary keys make COPY fail); input order is otherwise kept."""
    if table.num_rows == 0:
        return table
    if len(keys) == 1 and pc.count_distinct(table[keys[0]]).as_py() == table.num_rows:
        return table
    idx = pa.array(np.arange(table.num_rows, dtype=np.int64))
    firsts = (
        table.select(keys).append_column("__row", idx).group_by(keys, use_threads=False).aggregate([("__row", "min")])
    )
    return table.take(np.sort(firsts["__row_min"].to_numpy()))


def _positions(values: pa.ChunkedArray | pa.Array, universe: pa.Array) -> np.ndarray:
    """Row of each value in ``universe`` (unique strings), -1 where absent: joins as integer arrays."""
    return pc.fill_null(pc.index_in(values, value_set=universe), -1).to_numpy().astype(np.int64)


def _canonical_relations(rel: pa.Table) -> pa.Table:
    """Orient every relation smaller-key-first (Arrow compares UTF-8 bytes, the same order as Python str)."""
    src, tgt = rel["from"], rel["to"]
    swap = pc.greater(src, tgt)
    if pc.any(swap).as_py():
        rel = rel.set_column(0, "from", pc.if_else(swap, tgt, src))
        rel = rel.set_column(1, "to", pc.if_else(swap, src, tgt))
    return rel


def prepare_tables(
    documents: pa.Table,
    chunks: pa.Table,
    entities: pa.Table,
    relations: pa.Table,
    synonyms: pa.Table | None = None,
    title_mentions: pa.Table | None = None,
) -> dict[str, pa.Table]:
    """Turn the staging tables (graph.schema) into the COPY inputs, keyed by graph table.

    ``synonyms`` (``schema.SYNONYMS``): entity pairs oriented smaller key first, one row per pair (the first),
    self-pairs dropped; an endpoint that is not an entity is an error, as for relations.
    ``title_mentions`` (``schema.TITLE_MENTIONS``): (chunk, document) pairs, one row per pair; an end that is not a
    loaded chunk or document is an error."""
    _require_columns(documents, schema.DOCUMENTS, "documents")
    _require_columns(chunks, schema.CHUNKS.remove(schema.CHUNKS.get_field_index("shard")), "chunks")
    _require_columns(entities, schema.ENTITIES, "entities")
    _require_columns(relations, schema.RELATIONS, "relations")

    docs = _select(documents, DOCUMENT_COLUMNS.names, DOCUMENT_COLUMNS, "documents")
    _check_no_null(documents, "id", "documents")
    docs = _dedup(docs, ["id"])

    chunk_src = ["id", "doc_id", "order", "start", "text", "header_path", "language"]
    chk = _select(chunks, chunk_src, CHUNK_COLUMNS, "chunks")
    _check_no_null(chunks, "id", "chunks")
    chk = _dedup(chk, ["id"])

    ent_src = [n for n in ENTITY_COLUMNS.names if n != "degree"]
    ent = _select(entities, ent_src, ENTITY_COLUMNS.remove(ENTITY_COLUMNS.get_field_index("degree")), "entities")
    _check_no_null(entities, "key", "entities")
    ent = _dedup(ent, ["key"])

    rel_src = ["source_key", "target_key", "description", "keywords", "weight", "source_chunk_ids", "mention_count"]
    for col in ("source_key", "target_key"):
        _check_no_null(relations, col, "relations")
    rel = _canonical_relations(_select(relations, rel_src, RELATED_COLUMNS, "relations"))
    # Pairs, degrees and mentions are joined on integer row positions (not string group-bys): the
    # entity keys are hashed once per column and the rest is numpy.
    keys = ent["key"].combine_chunks()
    n_ent = max(len(keys), 1)  # the pair-code base; 1 keeps the arithmetic defined with no entities
    src, tgt = _positions(rel["from"], keys), _positions(rel["to"], keys)
    absent = (src < 0) | (tgt < 0)
    if absent.any():
        ends = pa.chunked_array(rel["from"].chunks + rel["to"].chunks, type=pa.string())
        missing = pc.unique(pc.filter(ends, pa.array(np.concatenate([src < 0, tgt < 0]))))
        shown = ", ".join(repr(k) for k in missing.slice(0, 5).to_pylist())
        raise ValueError(
            f"{len(missing)} relation endpoints are not entities (e.g. {shown}); "
            "the merge stage must create an entity for every relation endpoint"
        )
    _, first = np.unique(src * n_ent + tgt, return_index=True)
    if len(first) < rel.num_rows:  # duplicate pairs: keep the first, in input order
        keep = np.sort(first)
        rel, src, tgt = rel.take(keep), src[keep], tgt[keep]
    # LightRAG node degree: edges touching the entity, a self-loop counted once.
    degree = np.bincount(src, minlength=n_ent) + np.bincount(tgt[src != tgt], minlength=n_ent)
    ent = ent.append_column(ENTITY_COLUMNS.field("degree"), pa.array(degree[: len(keys)].astype(np.int64)))

    # MENTIONS: chunk -> entity for each distinct source chunk id that is a loaded chunk.
    chunk_ids = chk["id"].combine_chunks()
    id_lists = ent["source_chunk_ids"].combine_chunks()
    owner = pc.list_parent_indices(id_lists).to_numpy().astype(np.int64)
    chunk_pos = _positions(pc.list_flatten(id_lists), chunk_ids)
    found = chunk_pos >= 0
    pairs = np.unique(chunk_pos[found] * n_ent + owner[found])  # sorted by chunk: COPY-friendly
    men = pa.Table.from_arrays(
        [chunk_ids.take(pa.array(pairs // n_ent)), keys.take(pa.array(pairs % n_ent))], schema=MENTIONS_COLUMNS
    )

    # PART_OF: chunk -> its document, when the document was loaded.
    part = pa.Table.from_arrays([chk["id"], chk["doc_id"]], schema=PART_OF_COLUMNS)
    part = part.filter(pc.is_in(part["to"], value_set=docs["id"].combine_chunks()))

    syn = _prepare_synonyms(synonyms, keys, n_ent)
    titles = _prepare_title_mentions(title_mentions, chunk_ids, docs["id"].combine_chunks())
    return {
        "Document": docs,
        "Chunk": chk,
        "Entity": ent,
        "RELATED": rel,
        "MENTIONS": men,
        "PART_OF": part,
        "SYNONYM": syn,
        "NAMES_TITLE": titles,
    }


def _prepare_title_mentions(title_mentions: pa.Table | None, chunk_ids: pa.Array, doc_ids: pa.Array) -> pa.Table:
    if title_mentions is None or title_mentions.num_rows == 0:
        return NAMES_TITLE_COLUMNS.empty_table()
    _require_columns(title_mentions, schema.TITLE_MENTIONS, "title_mentions")
    for col in ("chunk_id", "doc_id"):
        _check_no_null(title_mentions, col, "title_mentions")
    rows = _dedup(
        _select(title_mentions, ["chunk_id", "doc_id"], NAMES_TITLE_COLUMNS, "title_mentions"), ["from", "to"]
    )
    absent = (_positions(rows["from"], chunk_ids) < 0) | (_positions(rows["to"], doc_ids) < 0)
    if absent.any():
        raise ValueError(f"{int(absent.sum())} title mentions name chunks or documents that are not loaded")
    return rows


def _prepare_synonyms(synonyms: pa.Table | None, keys: pa.Array, n_ent: int) -> pa.Table:
    if synonyms is None or synonyms.num_rows == 0:
        return SYNONYM_COLUMNS.empty_table()
    _require_columns(synonyms, schema.SYNONYMS, "synonyms")
    for col in ("source_key", "target_key"):
        _check_no_null(synonyms, col, "synonyms")
    syn = _canonical_relations(_select(synonyms, ["source_key", "target_key", "score"], SYNONYM_COLUMNS, "synonyms"))
    src, tgt = _positions(syn["from"], keys), _positions(syn["to"], keys)
    if ((src < 0) | (tgt < 0)).any():
        raise ValueError(f"{int(((src < 0) | (tgt < 0)).sum())} synonym pairs name entities that are not loaded")
    keep = src != tgt
    _, first = np.unique(src[keep] * n_ent + tgt[keep], return_index=True)
    return syn.take(np.flatnonzero(keep)[np.sort(first)])


# ---------------------------------------------------------------------------------------------------
