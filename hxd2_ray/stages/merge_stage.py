"""The global merge: mentions from every chunk of the corpus grouped by entity key / unordered pair.

``explode_*`` turn extraction rows into one row per mention (map_batches); ``Merge*Groups`` reduce one key's
mentions (map_groups after a hash shuffle, so a key's mentions meet whichever file or worker they came from).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

import pyarrow as pa

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.config import HxdConfig
from hxd2_ray.extraction.extractor import Extractor
from hxd2_ray.extraction.merge import (
    entity_key,
    merge_entity_mentions,
    merge_relation_mentions,
    relation_pair_key,
)
from hxd2_ray.extraction.prompts import load_prompts
from hxd2_ray.index_store import tables
from hxd2_ray.llm.base import LLMClient
from hxd2_ray.llm.tokens import build_token_counter
from hxd2_ray.progress import NO_COUNTER, CountingLLM, StageCounter
from hxd2_ray.stages.columns import PAIR_SEP
from hxd2_ray.stages.stage_run import IndexingLLM, StageRun
from hxd2_ray.types import EntityMention, MergedEntity, MergedRelation, RelationMention
from hxd2_ray.wiring import build_llm

ENTITY_MENTIONS = pa.schema(
    [
        ("partition", pa.int64()),
        ("key", pa.string()),
        ("name", pa.string()),
        ("type", pa.string()),
        ("description", pa.string()),
        ("chunk_id", pa.string()),
    ]
)
RELATION_MENTIONS = pa.schema(
    [
        ("partition", pa.int64()),
        ("pair", pa.string()),
        ("source", pa.string()),
        ("target", pa.string()),
        ("description", pa.string()),
        ("keywords", pa.list_(pa.string())),
        ("strength", pa.float64()),
        ("chunk_id", pa.string()),
    ]
)
MERGED_ENTITIES = tables.ENTITIES.append(pa.field("needs_summary", pa.bool_()))
MERGED_RELATIONS = tables.RELATIONS.append(pa.field("needs_summary", pa.bool_()))


def _successful(extractions: pa.Table) -> list[dict[str, Any]]:
    return [row for row in extractions.to_pylist() if not row["error"]]


def partition_of(key: str, partitions: int) -> int:
    """Stable partition of a merge key: all mentions of a key meet in one partition, whichever worker saw them."""
    return int(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest(), 16) % partitions


class ExplodeEntityMentions:
    def __init__(self, cfg: HxdConfig, partitions: int = 1) -> None:
        self._cfg = cfg.extraction
        self._partitions = partitions

    def __call__(self, extractions: pa.Table) -> pa.Table:
        rows = []
        for ext in _successful(extractions):
            for ent in ext["entities"]:
                key = entity_key(ent["name"], self._cfg)
                if key:
                    rows.append(
                        {
                            **ent,
                            "key": key,
                            "chunk_id": ext["chunk_id"],
                            "partition": partition_of(key, self._partitions),
                        }
                    )
        return pa.Table.from_pylist(rows, schema=ENTITY_MENTIONS)


class ExplodeRelationMentions:
    def __init__(self, cfg: HxdConfig, partitions: int = 1) -> None:
        self._cfg = cfg.extraction
        self._partitions = partitions

    def __call__(self, extractions: pa.Table) -> pa.Table:
        rows = []
        for ext in _successful(extractions):
            for rel in ext["relations"]:
                a, b = relation_pair_key(rel["source"], rel["target"], self._cfg)
                if a and b and a != b:
                    pair = f"{a}{PAIR_SEP}{b}"
                    rows.append(
                        {
                            **rel,
                            "pair": pair,
                            "chunk_id": ext["chunk_id"],
                            "partition": partition_of(pair, self._partitions),
                        }
                    )
        return pa.Table.from_pylist(rows, schema=RELATION_MENTIONS)


def entities_to_table(entities: list[MergedEntity]) -> pa.Table:
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


def relations_to_table(relations: list[MergedRelation]) -> pa.Table:
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


class MergeEntityGroups:
    """One group = one hash partition of the mentions; every key in it is merged here.

    Grouping by partition rather than by key keeps Ray Data's per-group overhead to a few dozen calls
    instead of one per entity (which dominated the whole job at 10k chunks).
    """

    def __init__(self, cfg: HxdConfig) -> None:
        self._cfg = cfg.extraction
        self._count_tokens = build_token_counter(cfg.llm)

    def __call__(self, group: pa.Table) -> pa.Table:
        by_key: dict[str, list[EntityMention]] = defaultdict(list)
        for r in group.to_pylist():
            by_key[r["key"]].append(EntityMention(r["name"], r["type"], r["description"], r["chunk_id"]))
        return entities_to_table(
            [merge_entity_mentions(key, mentions, self._cfg, self._count_tokens) for key, mentions in by_key.items()]
        )


class MergeRelationGroups:
    """One group = one hash partition of the relation mentions; every unordered pair in it is merged here."""

    def __init__(self, cfg: HxdConfig) -> None:
        self._cfg = cfg.extraction
        self._count_tokens = build_token_counter(cfg.llm)

    def __call__(self, group: pa.Table) -> pa.Table:
        by_pair: dict[str, list[RelationMention]] = defaultdict(list)
        for r in group.to_pylist():
            by_pair[r["pair"]].append(
                RelationMention(
                    r["source"], r["target"], r["description"], tuple(r["keywords"] or ()), r["strength"], r["chunk_id"]
                )
            )
        return relations_to_table(
            [merge_relation_mentions(mentions, self._cfg, self._count_tokens) for mentions in by_pair.values()]
        )


class SummarizeLongDescriptions:
    """LLM summary of descriptions over the token budget; input/output: merged entity or relation rows.

    Once the run's budget is spent a batch is not started and comes back empty: the caller sees fewer rows than it
    sent and stops before publishing (the summaries done so far are in the LLM cache for the rerun)."""

    def __init__(
        self,
        cfg: HxdConfig,
        llm: LLMClient | None = None,
        run: StageRun | None = None,
        counter: StageCounter = NO_COUNTER,
    ) -> None:
        self._run = run or StageRun()
        # Progress counts the backend's calls and tokens (below the cache: a hit costs none).
        backend = llm if llm is not None else build_llm(cfg.llm)
        self._llm = IndexingLLM(CountingLLM(backend, counter), self._run)
        self._gpus = cfg.ray.gpus_per_ner_actor
        self._extractor = Extractor(
            self._llm.client, cfg.extraction, load_prompts(), max_retries=cfg.ray.max_batch_retries
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self._run.exhausted():
            self._run.skipped()
            return batch.schema.empty_table()
        rows = batch.to_pylist()
        items = []
        for r in rows:
            name = r["name"] if "name" in r else f"{r['source_key']} - {r['target_key']}"
            descriptions = [d for d in r["description"].split("\n") if d.strip()]
            items.append((name, descriptions, detect_language(r["description"])))
        summaries = self._extractor.summarize(items)
        for r, summary in zip(rows, summaries, strict=True):
            r["description"] = summary
        self._run.charge(self._llm.payload(self._gpus))
        return pa.Table.from_pylist(rows, schema=batch.schema)
