"""Pure ranking for dual-level retrieval: channel hits -> matched keys -> context rows in rank order.

Order of the context, and why:

* entities: low-level matches by best score, then endpoints of matched relations (relation order). A
  direct match is the strongest evidence the question is about that entity.
* relations: high-level matches by best score, then the matched entities' 1-hop edges by (degree sum,
  weight) as LightRAG ranks them. Duplicates across the two levels keep their first (higher) place.
* chunks (``"mentions"``, the paper's and LightRAG's order): by how many context entities they mention, then by
  the best rank among those entities, then by raw-question similarity, then first-seen order (entity order,
  document order within an entity). ``"fused"``: reciprocal-rank fusion (k = 60) of that mention order and
  the raw-question similarity order, so a graph built by a weak extractor cannot push the chunks that match
  the question out of the budget; ties keep the mention order. ``"ppr"``: personalized PageRank over entities
  and chunks (:mod:`hxd2_ray.retrieval.ppr`), seeded by :func:`walk_seeds`, ranked by :func:`calibrated_chunks`.

**Dense never lost** (the dense floor). The question's own chunk hits are the one channel that does not depend
on the extractor, so no graph ranking may bury them on evidence weaker than theirs:

* the dense side is a probability: the softmax of the hits' cosines at the embedder's training temperature
  (:func:`dense_probabilities`; 0.05 for MiniLM), the embedder's own estimate of which hit is the passage;
* under ``ppr`` the graph side is one too: a chunk's share of the walk's mass on chunks; each chunk ranks by
  the larger of the two, so a graph-found chunk takes a dense hit's place only with more probability than that
  hit has, and the budget (which keeps a prefix) drops dense hits only for such chunks;
* ``mentions`` and ``fused`` have no such scale (mention counts), so with ``retrieval.dense_keep = k`` the
  question's k best hits simply go first (:func:`dense_first`).

Scores from different channels are compared as is: cosine for vectors, ratio/100 for fuzzy names. Both
are 1.0 for an exact name, and the fuzzy cutoff (85) keeps fuzzy hits to near-identical names.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from hxd2_ray.graph.base import EdgeRow, EntityRow, canonical_pair
from hxd2_ray.retrieval.results import ChannelHit, ContextEntity, ContextRelation

K = TypeVar("K", bound=Hashable)

SCORE_DECIMALS = 5
RELATION_KEY_SEPARATOR = "\x1f"  # relation vector keys are f"{source_key}\x1f{target_key}" (embed_stage)


def relation_pair_of_key(key: str) -> tuple[str, str] | None:
    """The canonical entity-key pair of a relation vector key; None for a malformed key."""
    source, sep, target = key.partition(RELATION_KEY_SEPARATOR)
    if not sep:
        return None
    return canonical_pair(source, target)


def vector_hits(
    results: Sequence[Sequence[tuple[str, float]]], queries: Sequence[str], channel: str, threshold: float
) -> list[tuple[str, ChannelHit]]:
    """Flatten per-query search results into (key, hit) pairs, keeping scores at or above ``threshold``."""
    out = []
    for query, hits in zip(queries, results, strict=True):
        for key, score in hits:
            if score >= threshold:
                out.append((key, ChannelHit(channel=channel, query=query, score=float(score))))
    return out


@dataclass(frozen=True, slots=True)
class RankedMatch:
    key: Hashable
    score: float  # best hit
    hits: tuple[ChannelHit, ...]  # best first


def rank_matches(pairs: Iterable[tuple[K, ChannelHit]], limit: int) -> list[RankedMatch]:
    """Group hits by key and rank: best score, then how many distinct channels agree, then the key itself."""
    grouped: dict[K, list[ChannelHit]] = {}
    for key, hit in pairs:
        grouped.setdefault(key, []).append(hit)
    if limit <= 0 or not grouped:
        return []

    # Scores are rounded for the comparison: float32 inner products of identical unit vectors come out as
    # 0.99999994 or 1.0000001, and such noise must not decide between two exact matches. The best score
    # and the channel set are the same over all hits as over the deduplicated ones, so only the kept keys
    # get their hits sorted (a question brings ~200 hits over ~150 keys and keeps a handful).
    def order(item: tuple[K, list[ChannelHit]]) -> tuple[float, int, str]:
        key, hits = item
        best = max(h.score for h in hits) if len(hits) > 1 else hits[0].score
        return -round(best, SCORE_DECIMALS), -len({h.channel for h in hits}), str(key)

    ranked = []
    for key, hits in heapq.nsmallest(limit, grouped.items(), key=order):  # = sorted(...)[:limit], stable
        best: dict[tuple[str, str], ChannelHit] = {}
        for h in sorted(hits, key=lambda h: (-h.score, h.channel, h.query)):
            best.setdefault((h.channel, h.query), h)  # one hit per (channel, query): sharded repeats collapse
        unique = tuple(best.values())
        ranked.append(RankedMatch(key=key, score=unique[0].score, hits=unique))
    return ranked


def assemble_entities(
    matched: Sequence[RankedMatch],
    matched_rows: Mapping[str, EntityRow],
    endpoint_keys: Sequence[str],
    endpoint_rows: Mapping[str, EntityRow],
) -> list[ContextEntity]:
    """Matched entities first (their rank order), then endpoints of matched relations; deduplicated by key."""
    out: dict[str, ContextEntity] = {}
    for m in matched:
        row = matched_rows.get(str(m.key))
        if row is not None and row["key"] not in out:
            out[row["key"]] = _entity(row, "matched", m.score, m.hits)
    for key in endpoint_keys:
        row = endpoint_rows.get(key)
        if row is not None and key not in out:
            out[key] = _entity(row, "endpoint", 0.0, ())
    return list(out.values())


def _entity(row: EntityRow, origin: str, score: float, hits: tuple[ChannelHit, ...]) -> ContextEntity:
    return ContextEntity(
        key=row["key"],
        name=row["name"],
        type=row["type"],
        description=row["description"],
        degree=int(row["degree"]),
        origin=origin,  # type: ignore[arg-type]
        score=score,
        hits=hits,
    )


def assemble_relations(
    matched: Sequence[RankedMatch],
    matched_edges: Mapping[tuple[str, str], EdgeRow],
    neighbor_edges: Sequence[EdgeRow],
    names: Mapping[str, str],
) -> list[ContextRelation]:
    """Matched relations first (their rank order), then 1-hop edges in the order given; deduplicated by pair."""
    out: dict[tuple[str, str], ContextRelation] = {}
    for m in matched:
        edge = matched_edges.get(m.key)  # type: ignore[call-overload]
        if edge is not None:
            pair = (edge["source_key"], edge["target_key"])
            out.setdefault(pair, _relation(edge, names, "matched", m.score, m.hits))
    for edge in neighbor_edges:
        pair = (edge["source_key"], edge["target_key"])
        out.setdefault(pair, _relation(edge, names, "neighbor", 0.0, ()))
    return list(out.values())


def _relation(
    edge: EdgeRow, names: Mapping[str, str], origin: str, score: float, hits: tuple[ChannelHit, ...]
) -> ContextRelation:
    s, t = edge["source_key"], edge["target_key"]
    return ContextRelation(
        source_key=s,
        target_key=t,
        source_name=names.get(s, s),
        target_name=names.get(t, t),
        description=edge["description"],
        keywords=tuple(edge["keywords"]),
        weight=float(edge["weight"]),
        degree=int(edge["degree"]),
        origin=origin,  # type: ignore[arg-type]
        score=score,
        hits=hits,
        source_chunk_ids=tuple(edge["source_chunk_ids"]),
    )


@dataclass(frozen=True, slots=True)
class ChunkCandidate:
    id: str
    mentions: int
    first_entity_rank: int | None
    score: float
    seen: int  # first-seen position: entity order, then document order
    graph_score: float | None = None  # ppr: share of the walk's chunk mass
    dense_score: float | None = None  # dense probability (softmax of the question cosines)
    rank_score: float | None = None  # ppr: max(graph_score, dense_score), the calibrated scale it ranks by


CHUNK_RANKINGS = ("mentions", "fused", "ppr")
RRF_K = 60  # the usual reciprocal-rank-fusion constant: damps the weight of the very first ranks


def rank_chunks(
    entity_keys: Sequence[str],
    chunks_by_entity: Mapping[str, Sequence[str]],
    chunk_scores: Mapping[str, float],
    limit: int,
    ranking: str = "mentions",
) -> list[ChunkCandidate]:
    """Chunks of the context entities plus the question's chunk hits, in context order (module docstring)."""
    if ranking not in ("mentions", "fused"):
        raise ValueError(f"unknown chunk ranking {ranking!r} here; valid: mentions, fused (ppr: rank_chunks_by_walk)")
    mentions: dict[str, int] = {}
    first_rank: dict[str, int] = {}
    seen: dict[str, int] = {}
    for rank, key in enumerate(entity_keys):
        for cid in dict.fromkeys(chunks_by_entity.get(key, ())):  # a chunk counts once per entity
            mentions[cid] = mentions.get(cid, 0) + 1
            first_rank.setdefault(cid, rank)
            seen.setdefault(cid, len(seen))
    for cid in chunk_scores:
        seen.setdefault(cid, len(seen))
    cands = [
        ChunkCandidate(
            id=cid,
            mentions=mentions.get(cid, 0),
            first_entity_rank=first_rank.get(cid),
            score=float(chunk_scores.get(cid, 0.0)),
            seen=pos,
        )
        for cid, pos in seen.items()
    ]
    never = len(entity_keys)  # sorts after every real rank
    cands.sort(
        key=lambda c: (-c.mentions, c.first_entity_rank if c.first_entity_rank is not None else never, -c.score, c.seen)
    )
    if ranking == "fused":
        by_mentions = {c.id: rank for rank, c in enumerate(c for c in cands if c.mentions)}
        by_question = {
            cid: rank for rank, cid in enumerate(sorted(chunk_scores, key=lambda cid: (-chunk_scores[cid], seen[cid])))
        }

        def fused(c: ChunkCandidate) -> float:
            return sum(1.0 / (RRF_K + 1 + ranks[c.id]) for ranks in (by_mentions, by_question) if c.id in ranks)

        cands.sort(key=fused, reverse=True)  # stable: equal fused scores keep the mention order
    return cands[: max(0, limit)]


# ------------------------------------------------------------------------------------ dense floor, walk seeds


def dense_probabilities(scores: Mapping[str, float], temperature: float) -> dict[str, float]:
    """The question's chunk hits as a probability: softmax of cosine / ``temperature`` over the hits.

    A contrastively trained embedder models exactly this (all-MiniLM-L6-v2 and the sentence-transformers
    family are trained with scale 20, i.e. temperature 0.05), so it is the dense channel's own estimate of
    which hit is the passage sought, and a scale a graph probability can be compared on.
    """
    if not scores:
        return {}
    ids = list(scores)
    logits = np.array([scores[c] for c in ids], dtype=np.float64) / temperature
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    return dict(zip(ids, weights.tolist()))


def dense_first(cands: Sequence[ChunkCandidate], chunk_scores: Mapping[str, float], keep: int) -> list[ChunkCandidate]:
    """The dense floor of the ``mentions`` and ``fused`` orders (not on a probability scale, so nothing on their
    side can outrank a dense hit by a known margin): the question's ``keep`` best chunk hits go first, by cosine;
    the rest keep their order."""
    best = sorted(chunk_scores, key=lambda cid: -chunk_scores[cid])[: max(0, keep)]
    by_id = {c.id: c for c in cands}
    first = [by_id[cid] for cid in best if cid in by_id]
    chosen = {c.id for c in first}
    return first + [c for c in cands if c.id not in chosen]


@dataclass(frozen=True, slots=True)
class WalkSeed:
    kind: str  # "entity" | "chunk"
    key: str  # entity key or chunk id
    weight: float  # its share of the walk's reset mass
    score: float  # the match score it came from (cosine, fuzzy ratio / 100, or dense probability)
    channels: tuple[str, ...]  # where it came from


def walk_seeds(
    entity_matches: Sequence[RankedMatch],
    relation_matches: Sequence[RankedMatch],
    dense: Mapping[str, float],
    *,
    dense_share: float,
    chunk_counts: Mapping[str, int] | None = None,
    temperature: float | None = None,
    titled: Mapping[str, tuple[float, int]] | None = None,
) -> list[WalkSeed]:
    """The reset vector of the walk, as :class:`WalkSeed` rows (weights sum to 1).

    * entities: each matched entity with its best match score; both endpoints of a matched relation with the
      relation's score (a key reached both ways keeps the higher); weighted by the score itself, or with
      ``temperature`` by its softmax (``exp(score / temperature)``: the embedder's own odds, as for the dense
      side, so an exact name, 1.0, outweighs a vague cosine of 0.5 by e^10 rather than 2); divided by the number
      of chunks that mention it when ``chunk_counts`` is given (node specificity); together ``1 - dense_share``;
    * chunks: the question's chunk hits with their dense probability (``dense``), together ``dense_share``.

    ``titled``: chunks of documents whose title the question names (chunk id -> (match score, chunks of that
    document)); they join the entity side as named things do (a title names what its document is about), the
    document's weight shared among its chunks.

    A side with no seeds gives its share to the other.
    """
    entity: dict[str, tuple[float, list[str]]] = {}

    def add(key: str, score: float, channels: Iterable[str]) -> None:
        old, chans = entity.get(key, (-1.0, []))
        chans = list(dict.fromkeys([*chans, *channels]))
        entity[key] = (max(old, score), chans)

    for m in entity_matches:
        add(str(m.key), m.score, (h.channel for h in m.hits))
    for m in relation_matches:
        for end in m.key:  # type: ignore[attr-defined]
            add(end, m.score, (f"relation:{h.channel}" for h in m.hits))
    raw: dict[tuple[str, str], float] = {}
    titled = titled or {}
    top = max([*(score for score, _ in entity.values()), *(score for score, _ in titled.values())], default=0.0)

    def weigh(score: float) -> float:
        return score if temperature is None else float(np.exp((score - top) / temperature))

    for key, (score, _) in entity.items():
        spread = max(1, int(chunk_counts.get(key, 0))) if chunk_counts is not None else 1
        if score > 0:
            raw[("entity", key)] = weigh(score) / spread
    for cid, (score, size) in titled.items():
        if score > 0:
            raw[("chunk", cid)] = weigh(score) / max(1, size)
    entity_total, dense_total = sum(raw.values()), sum(v for v in dense.values() if v > 0)
    share_e = (1.0 - dense_share) if dense_total > 0 else 1.0
    share_d = dense_share if entity_total > 0 else 1.0
    seeds = []
    if entity_total > 0:
        seeds += [
            WalkSeed(
                kind,
                k,
                share_e * w / entity_total,
                entity[k][0] if kind == "entity" else titled[k][0],
                tuple(entity[k][1]) if kind == "entity" else ("question:title",),
            )
            for (kind, k), w in raw.items()
        ]
    if dense_total > 0:
        seeds += [
            WalkSeed("chunk", c, share_d * p / dense_total, p, ("question:chunk",)) for c, p in dense.items() if p > 0
        ]
    return sorted((s for s in seeds if s.weight > 0), key=lambda s: (-s.weight, s.kind, s.key))


def calibrated_chunks(
    graph: Mapping[str, float],
    dense: Mapping[str, float],
    limit: int,
    floor: float = 1.0,
) -> list[tuple[str, float, float, float]]:
    """Chunks by the dense floor's calibrated scale: ``max(graph share, floor * dense probability)``, best first.

    Both are probabilities over chunks for this question (the walk's mass on chunks, which already holds each
    dense hit's reset share; the embedder's softmax over its hits). With ``floor`` 1 a chunk the walk does not
    favour keeps what the dense channel alone gives it, so a graph chunk passes a dense one only with more
    probability than that dense hit has; with ``floor`` 0 the walk alone ranks (HippoRAG 2), and a dense hit
    keeps only its reset share. Ties: dense probability, then graph share, then id.
    Rows: (id, graph share, dense probability, rank score).
    """
    ids = set(graph) | set(dense)
    rows = [(cid, float(graph.get(cid, 0.0)), float(dense.get(cid, 0.0))) for cid in ids]
    rows.sort(key=lambda r: (-max(r[1], floor * r[2]), -r[2], -r[1], r[0]))
    return [(cid, g, d, max(g, floor * d)) for cid, g, d in rows[: max(0, limit)]]
