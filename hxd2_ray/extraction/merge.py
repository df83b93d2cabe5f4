"""The global merge: every mention of an entity (or of an unordered entity pair) across the whole corpus
becomes one :class:`MergedEntity` (or :class:`MergedRelation`).

The reference merged only within one file and let graph upserts overwrite descriptions across files; here a
key's mentions are reduced together wherever they came from. Everything is deterministic (sorted, ties
broken lexicographically) so that re-running a build yields byte-identical tables, and linear in the number
of mentions (this runs over hundreds of thousands of them).
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from typing import Callable, Iterable, Sequence

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.types import EntityMention, Extraction, MergedEntity, MergedRelation, RelationMention

TokenCounter = Callable[[str], int]

UNKNOWN_TYPE = "unknown"


def normalize_name(name: str) -> str:
    """The merge key of a name: NFKC (full-width -> half-width), casefold, whitespace collapsed and stripped.

    Only the key is normalised; the surface form shown to users is kept verbatim.
    """
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def truncate_name(name: str, cfg: ExtractionConfig) -> str:
    return name[: cfg.max_entity_name_chars]


def entity_key(name: str, cfg: ExtractionConfig) -> str:
    """Key of an entity name; truncation comes first so that lookups of over-long names truncate the same way."""
    return normalize_name(truncate_name(name, cfg))


def relation_pair_key(source: str, target: str, cfg: ExtractionConfig) -> tuple[str, str]:
    """The unordered pair of entity keys (smaller first): A->B and B->A are one relation."""
    a, b = entity_key(source, cfg), entity_key(target, cfg)
    return (a, b) if a <= b else (b, a)


def _most_common(counts: Counter[str]) -> str:
    # Highest count; ties -> lexicographically smallest, so the result never depends on input order.
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _joined_unique(texts: Iterable[str]) -> str:
    return "\n".join(sorted({t.strip() for t in texts if t and t.strip()}))


def _exceeds_budget(text: str, budget: int, count_tokens: TokenCounter) -> bool:
    if not text:
        return False
    # Shortcut that skips the tokenizer for most descriptions: byte-level BPE and SentencePiece with byte
    # fallback never produce more tokens than UTF-8 bytes (+2 for any BOS/EOS a counter might add).
    if len(text.encode("utf-8")) + 2 <= budget:
        return False
    return count_tokens(text) > budget


def merge_entity_mentions(
    key: str, mentions: Sequence[EntityMention], cfg: ExtractionConfig, count_tokens: TokenCounter
) -> MergedEntity:
    """Reduce every mention of one entity key.

    * name: most frequent (truncated) surface form; ``name_truncated`` if any mention's name was too long;
    * type: majority among known types; "unknown" only wins when no mention has a known type (unknown types
      come from parser fallbacks and missing endpoints, and should not outvote a real classification);
    * description: unique descriptions, sorted, joined with newlines; ``needs_summary`` over the budget.
    """
    if not mentions:
        raise ValueError(f"no mentions for entity key {key!r}")
    limit = cfg.max_entity_name_chars
    names: Counter[str] = Counter()
    types: Counter[str] = Counter()
    truncated = False
    for m in mentions:
        if len(m.name) > limit:
            truncated = True
            names[m.name[:limit]] += 1
        else:
            names[m.name] += 1
        if m.type and m.type.casefold() != UNKNOWN_TYPE:
            types[m.type] += 1
    description = _joined_unique(m.description for m in mentions)
    return MergedEntity(
        key=key,
        name=_most_common(names),
        type=_most_common(types) if types else UNKNOWN_TYPE,
        description=description,
        source_chunk_ids=tuple(sorted({m.chunk_id for m in mentions})),
        mention_count=len(mentions),
        name_truncated=truncated,
        needs_summary=_exceeds_budget(description, cfg.description_token_budget, count_tokens),
    )


def merge_relation_mentions(
    mentions: Sequence[RelationMention], cfg: ExtractionConfig, count_tokens: TokenCounter
) -> MergedRelation:
    """Reduce every mention of one unordered pair (the caller groups by :func:`relation_pair_key`).

    weight = sum of strengths (repeated evidence makes an edge stronger); keywords = union, de-duplicated
    by normalised form (the smallest surface form of each wins) and sorted; descriptions as for entities.
    """
    if not mentions:
        raise ValueError("no relation mentions to merge")
    source_key, target_key = relation_pair_key(mentions[0].source, mentions[0].target, cfg)
    keywords: dict[str, str] = {}
    for m in mentions:
        for kw in m.keywords:
            kw = kw.strip()
            if not kw:
                continue
            norm = normalize_name(kw)
            best = keywords.get(norm)
            if best is None or kw < best:
                keywords[norm] = kw
    description = _joined_unique(m.description for m in mentions)
    return MergedRelation(
        source_key=source_key,
        target_key=target_key,
        description=description,
        keywords=tuple(kw for _, kw in sorted(keywords.items())),
        # fsum is exactly rounded, so the weight does not depend on the order the mentions arrive in.
        weight=math.fsum(m.strength for m in mentions),
        source_chunk_ids=tuple(sorted({m.chunk_id for m in mentions})),
        mention_count=len(mentions),
        needs_summary=_exceeds_budget(description, cfg.description_token_budget, count_tokens),
    )


def missing_endpoint_entities(
    entity_keys: set[str] | frozenset[str], relations: Iterable[RelationMention], cfg: ExtractionConfig
) -> list[MergedEntity]:
    """Entities of type "unknown" for relation endpoints that were never extracted as entities.

    A relation needs both nodes in the graph. name = most frequent surface form among the relation
    mentions naming the endpoint; description is empty (the relation carries the evidence); provenance
    and mention_count come from those relation mentions. Sorted by key.
    """
    limit = cfg.max_entity_name_chars
    names: dict[str, Counter[str]] = {}
    chunks: dict[str, set[str]] = {}
    truncated: dict[str, bool] = {}
    for rel in relations:
        for surface in (rel.source, rel.target):
            key = entity_key(surface, cfg)
            if not key or key in entity_keys:
                continue
            names.setdefault(key, Counter())[surface[:limit]] += 1
            chunks.setdefault(key, set()).add(rel.chunk_id)
            truncated[key] = truncated.get(key, False) or len(surface) > limit
    return [
        MergedEntity(
            key=key,
            name=_most_common(names[key]),
            type=UNKNOWN_TYPE,
            description="",
            source_chunk_ids=tuple(sorted(chunks[key])),
            mention_count=sum(names[key].values()),
            name_truncated=truncated[key],
        )
        for key in sorted(names)
    ]


def merge_extractions(
    extractions: Iterable[Extraction], cfg: ExtractionConfig, count_tokens: TokenCounter
) -> tuple[list[MergedEntity], list[MergedRelation]]:
    """Single-process merge of a whole corpus (tests, small inputs; the Ray stage shuffles by key instead).

    Failed extractions are skipped; relations whose endpoints share a key are dropped; endpoints never
    extracted as entities are added by :func:`missing_endpoint_entities`. Both lists are sorted by key.
    """
    by_entity: dict[str, list[EntityMention]] = {}
    by_pair: dict[tuple[str, str], list[RelationMention]] = {}
    for ext in extractions:
        if ext.error:
            continue
        for ent in ext.entities:
            key = entity_key(ent.name, cfg)
            if key:
                by_entity.setdefault(key, []).append(ent)
        for rel in ext.relations:
            pair = relation_pair_key(rel.source, rel.target, cfg)
            if pair[0] and pair[1] and pair[0] != pair[1]:
                by_pair.setdefault(pair, []).append(rel)
    entities = [merge_entity_mentions(k, by_entity[k], cfg, count_tokens) for k in sorted(by_entity)]
    relations = [merge_relation_mentions(by_pair[p], cfg, count_tokens) for p in sorted(by_pair)]
    missing = missing_endpoint_entities(set(by_entity), (m for mentions in by_pair.values() for m in mentions), cfg)
    if missing:
        entities = sorted(entities + missing, key=lambda e: e.key)
    return entities, relations
