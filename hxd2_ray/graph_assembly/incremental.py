"""Re-merge only what a change touches: provenance decides which entities and relations to recompute.

Every merged entity and relation records the chunks its mentions came from (``source_chunk_ids``). When chunks
leave the corpus (``removed``: a deleted or updated document's) and others join it (``added``: a new document's,
or a chunk whose extraction failed before and succeeded now), the rows that can change are

* entities and relations whose provenance meets a removed chunk;
* every entity and pair named by an added chunk (as an entity, or as a relation endpoint).

Each such key is merged again from all of its mentions in the new corpus, with the very functions of the full
merge (:mod:`hxd2_ray.extraction.merge`): its mentions lie in its old provenance minus the removed chunks plus the
added ones, so only those chunks' extractions are read. An entity left with no entity mention but still named by a
relation becomes an endpoint-only entity (read from the chunks of its relations); one named by nothing is
removed. A merge depends only on a key's mentions, so the result equals a merge of the whole new corpus. Rows
over the description budget come back flagged ``needs_summary`` for the caller's LLM summary.

Data derived from entities (synonym edges, calibrations) should be recomputed for the keys this reports in
:attr:`Remerged.entity_keys` (changed or removed) — see :func:`changed_entity_keys`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import (
    TokenCounter,
    entity_key,
    merge_entity_mentions,
    merge_relation_mentions,
    missing_endpoint_entities,
    relation_pair_key,
)
from hxd2_ray.index_store import tables
from hxd2_ray.types import EntityMention, MergedEntity, MergedRelation, RelationMention

Pair = tuple[str, str]

MERGED_ENTITIES = tables.ENTITIES.append(pa.field("needs_summary", pa.bool_()))
MERGED_RELATIONS = tables.RELATIONS.append(pa.field("needs_summary", pa.bool_()))


class ExtractionIndex:
    """Successful extractions by chunk id, read lazily from an ``EXTRACTIONS`` table (one row per chunk).

    Rows come back a batch at a time and only with the columns asked for: a change that touches a popular entity
    reads most of the corpus' extractions, and those as Python dicts all at once (entities and relations alike)
    were the peak of an update's driver (13.7 GB at 500k chunks, ``bench/index_cost_curve.py``)."""

    def __init__(self, extractions: pa.Table, batch_rows: int = 4096) -> None:
        # Row numbers of the successful extractions, not a filtered copy of the table: nearly every row is one.
        ok = pc.equal(extractions.column("error"), "").to_numpy(zero_copy_only=False)
        ids = extractions.column("chunk_id").to_pylist()
        self._table = extractions
        self._row = {ids[i]: i for i in ok.nonzero()[0].tolist()}
        self._batch_rows = batch_rows

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._row

    def chunk_ids(self) -> set[str]:
        return set(self._row)

    def rows(
        self, chunk_ids: Iterable[str], columns: Iterable[str] = ("chunk_id", "entities", "relations")
    ) -> Iterator[dict[str, Any]]:
        """The successful extractions of ``chunk_ids`` (unknown or failed ones skipped) in table order, each a
        dict of ``columns``, converted ``batch_rows`` at a time."""
        idx = sorted({self._row[c] for c in chunk_ids if c in self._row})
        projected = self._table.select(list(columns))
        for start in range(0, len(idx), self._batch_rows):
            yield from projected.take(pa.array(idx[start : start + self._batch_rows], pa.int64())).to_pylist()


def entity_mentions(row: dict[str, Any], cfg: ExtractionConfig) -> Iterable[tuple[str, EntityMention]]:
    """(key, mention) of one extraction row's entities, exactly as the full merge explodes them."""
    for ent in row["entities"] or ():
        key = entity_key(ent["name"], cfg)
        if key:
            yield key, EntityMention(ent["name"], ent["type"], ent["description"], row["chunk_id"])


def relation_mentions(row: dict[str, Any], cfg: ExtractionConfig) -> Iterable[tuple[Pair, RelationMention]]:
    """(pair, mention) of one extraction row's relations with two distinct, non-empty endpoints."""
    for rel in row["relations"] or ():
        a, b = relation_pair_key(rel["source"], rel["target"], cfg)
        if a and b and a != b:
            yield (
                (a, b),
                RelationMention(
                    rel["source"],
                    rel["target"],
                    rel["description"],
                    tuple(rel["keywords"] or ()),
                    rel["strength"],
                    row["chunk_id"],
                ),
            )


def _touching(table: pa.Table, removed: set[str]) -> list[int]:
    """Rows whose ``source_chunk_ids`` meet ``removed``."""
    if not removed or table.num_rows == 0:
        return []
    col = table.column("source_chunk_ids").combine_chunks()
    flat = pc.list_flatten(col)
    hit = pc.is_in(flat, value_set=pa.array(sorted(removed), pa.string()))
    parents = pc.list_parent_indices(col).filter(hit)
    return sorted(set(parents.to_pylist()))


@dataclass(frozen=True)
class Remerged:
    """The recomputed rows of the affected keys (alive ones; flagged ``needs_summary``) and what was affected."""

    entities: pa.Table  # MERGED_ENTITIES
    relations: pa.Table  # MERGED_RELATIONS
    entity_keys: frozenset[str]  # every affected key (recomputed or removed)
    relation_pairs: frozenset[Pair]
    chunks_read: int = 0  # extractions read to recompute them
    stats: dict[str, int] = field(default_factory=dict)


def remerge(
    entities: pa.Table,
    relations: pa.Table,
    removed: set[str],
    added: set[str],
    extractions: ExtractionIndex,
    cfg: ExtractionConfig,
    count_tokens: TokenCounter,
) -> Remerged:
    """Recompute every entity and relation that ``removed`` / ``added`` chunks can change (see the module doc)."""
    ent_keys = entities.column("key").to_pylist()
    ent_prov = entities.column("source_chunk_ids")
    rel_pairs = list(
        zip(relations.column("source_key").to_pylist(), relations.column("target_key").to_pylist(), strict=True)
    )
    rel_prov = relations.column("source_chunk_ids")

    added_rows = list(extractions.rows(added))
    affected_keys = {ent_keys[i] for i in _touching(entities, removed)}
    affected_pairs = {rel_pairs[i] for i in _touching(relations, removed)}
    for row in added_rows:
        affected_keys.update(k for k, _ in entity_mentions(row, cfg))
        for pair, _ in relation_mentions(row, cfg):
            affected_pairs.add(pair)
            affected_keys.update(pair)

    def old_chunks(rows: Iterable[int], column: pa.ChunkedArray) -> set[str]:
        out: set[str] = set()
        for i in rows:
            out.update(column[i].as_py() or ())
        return out

    ent_row = {k: i for i, k in enumerate(ent_keys)}
    rel_row = {p: i for i, p in enumerate(rel_pairs)}
    read: set[str] = set()

    # Relations: every mention of an affected pair lies in its old provenance (minus removed) or in added chunks.
    rel_chunks = (old_chunks((rel_row[p] for p in affected_pairs if p in rel_row), rel_prov) - removed) | added
    by_pair: dict[Pair, list[RelationMention]] = defaultdict(list)
    for row in extractions.rows(rel_chunks, ("chunk_id", "relations")):
        for pair, m in relation_mentions(row, cfg):
            if pair in affected_pairs:
                by_pair[pair].append(m)
    read |= rel_chunks
    new_relations = [merge_relation_mentions(by_pair[p], cfg, count_tokens) for p in sorted(by_pair)]

    # Entities with entity mentions: the same argument over their old provenance.
    ent_chunks = (old_chunks((ent_row[k] for k in affected_keys if k in ent_row), ent_prov) - removed) | added
    by_key: dict[str, list[EntityMention]] = defaultdict(list)
    for row in extractions.rows(ent_chunks, ("chunk_id", "entities")):
        for key, em in entity_mentions(row, cfg):
            if key in affected_keys:
                by_key[key].append(em)
    read |= ent_chunks
    new_entities: list[MergedEntity] = [merge_entity_mentions(k, by_key[k], cfg, count_tokens) for k in sorted(by_key)]

    # Affected keys without an entity mention: endpoint-only entities if a relation of the new corpus names them.
    orphans = affected_keys - set(by_key)
    if orphans:
        incident: set[str] = set()
        kept_rel = [
            i for i, p in enumerate(rel_pairs) if p not in affected_pairs and (p[0] in orphans or p[1] in orphans)
        ]
        incident |= old_chunks(kept_rel, rel_prov)
        for r in new_relations:
            if r.source_key in orphans or r.target_key in orphans:
                incident.update(r.source_chunk_ids)
        named: list[RelationMention] = []
        for row in extractions.rows(incident, ("chunk_id", "relations")):
            for (a, b), m in relation_mentions(row, cfg):
                if a in orphans or b in orphans:
                    named.append(m)
        read |= incident
        known = set(ent_keys) - orphans | set(by_key)
        new_entities += [e for e in missing_endpoint_entities(known, named, cfg) if e.key in orphans]

    return Remerged(
        entities=entities_table(new_entities),
        relations=_relations_table(new_relations),
        entity_keys=frozenset(affected_keys),
        relation_pairs=frozenset(affected_pairs),
        chunks_read=len(read),
        stats={
            "entities_affected": len(affected_keys),
            "relations_affected": len(affected_pairs),
            "entities_recomputed": len(new_entities),
            "relations_recomputed": len(new_relations),
            "entities_removed": len(affected_keys) - len(new_entities),
            "relations_removed": len(affected_pairs) - len(new_relations),
        },
    )


def apply(
    entities: pa.Table,
    relations: pa.Table,
    remerged: Remerged,
    summarized_entities: pa.Table,
    summarized_relations: pa.Table,
) -> tuple[pa.Table, pa.Table]:
    """The new entity and relation tables: untouched rows as they were, affected ones replaced (their summaries
    done by the caller: ``summarized_*`` are the ``remerged`` rows with final descriptions), sorted like a build's."""
    affected = pa.array(sorted(remerged.entity_keys), pa.string())
    keep_e = pc.invert(pc.is_in(entities.column("key"), value_set=affected))
    pair_ids = pc.binary_join_element_wise(relations.column("source_key"), relations.column("target_key"), "\x1f")
    gone = pa.array(sorted(f"{a}\x1f{b}" for a, b in remerged.relation_pairs), pa.string())
    keep_r = pc.invert(pc.is_in(pair_ids, value_set=gone))
    ents = pa.concat_tables(
        [_conform(entities.filter(keep_e), tables.ENTITIES), _conform(summarized_entities, tables.ENTITIES)]
    ).sort_by("key")
    rels = pa.concat_tables(
        [_conform(relations.filter(keep_r), tables.RELATIONS), _conform(summarized_relations, tables.RELATIONS)]
    ).sort_by([("source_key", "ascending"), ("target_key", "ascending")])
    return ents, rels


def changed_entity_keys(old: pa.Table, new: pa.Table, remerged: Remerged) -> set[str]:
    """Affected keys whose row differs (or appeared, or went): what derived per-entity data must be redone for."""
    before = {
        r["key"]: r
        for r in old.filter(
            pc.is_in(old.column("key"), value_set=pa.array(sorted(remerged.entity_keys), pa.string()))
        ).to_pylist()
    }
    after = {
        r["key"]: r
        for r in new.filter(
            pc.is_in(new.column("key"), value_set=pa.array(sorted(remerged.entity_keys), pa.string()))
        ).to_pylist()
    }
    return {k for k in remerged.entity_keys if before.get(k) != after.get(k)}


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    if table.num_rows == 0:
        return schema.empty_table()
    return table.select(schema.names).cast(schema)


def entities_table(entities: list[MergedEntity]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "key": e.key,
                "name": e.name,
                "type": e.type,
                "description": e.description,
                "source_chunk_ids": list(e.source_chunk_ids),
                "mention_count": e.mention_count,
                "name_truncated": e.name_truncated,
                "needs_summary": e.needs_summary,
            }
            for e in entities
        ],
        schema=MERGED_ENTITIES,
    )


def _relations_table(relations: list[MergedRelation]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "source_key": r.source_key,
                "target_key": r.target_key,
                "description": r.description,
                "keywords": list(r.keywords),
                "weight": r.weight,
                "source_chunk_ids": list(r.source_chunk_ids),
                "mention_count": r.mention_count,
                "needs_summary": r.needs_summary,
            }
            for r in relations
        ],
        schema=MERGED_RELATIONS,
    )
