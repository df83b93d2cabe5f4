"""Ranking chunks by a personalized PageRank walk over the entity-chunk graph: seeds from the question's matched
entities and relations, its dense chunk hits (and lexical and title hits where on), the walk, and the chunks
on the dense floor's calibrated scale, with the seeds and the walk's figures in the ranking trace."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hxd2_ray.config import RetrievalConfig
from hxd2_ray.extraction.names import named_entities, title_index
from hxd2_ray.graph.base import unique_in_order
from hxd2_ray.retrieval.index import OpenIndex
from hxd2_ray.retrieval.lexical import lexical_shares, mix_channels
from hxd2_ray.retrieval.ppr import PropagationGraph
from hxd2_ray.retrieval.ranking import (
    ChunkCandidate,
    RankedMatch,
    calibrated_chunks,
    dense_probabilities,
    rank_chunks,
    walk_seeds,
)


@dataclass(frozen=True, slots=True)
class Matches:
    """What the question matched: ranked entities and relations, and its chunk hits."""

    entities: list[RankedMatch]
    relations: list[RankedMatch]
    chunk_scores: dict[str, float]  # the question's best top_k_chunks chunk hits (cosine)
    dense_hits: dict[str, float] = field(default_factory=dict)  # every chunk hit above the threshold (cosine)


def walk_rank(
    cfg: RetrievalConfig,
    walk: PropagationGraph | None,
    index: OpenIndex,
    matches: Matches,
    question: str,
    context_keys: list[str],
    by_entity: dict[str, list[str]],
    ranking: dict[str, Any],
) -> list[ChunkCandidate]:
    """Chunks by personalized PageRank, on the dense floor's calibrated scale (:func:`calibrated_chunks`)."""
    graph = index.graph
    assert walk is not None
    seed_dense = dict(list(matches.dense_hits.items())[: cfg.ppr_dense_seeds])
    dense = dense_probabilities(matches.dense_hits, cfg.dense_temperature)
    seed_probs = dense_probabilities(seed_dense, cfg.dense_temperature)
    lexical = lexical_shares(getattr(index, "lexical", None), question, cfg.ppr_lexical_seeds)
    if lexical:  # exact terms (names, codes, numbers) where the embedding is weakest: seeds and floor both
        dense = mix_channels(dense, lexical, cfg.ppr_lexical_weight)
        seed_probs = mix_channels(seed_probs, lexical, cfg.ppr_lexical_weight)
        seed_dense = {**seed_dense, **{c: 0.0 for c in lexical if c not in seed_dense}}
        ranking["lexical"] = {c: round(p, 6) for c, p in lexical.items()}
    entity_keys = unique_in_order(
        [*(str(m.key) for m in matches.entities), *(k for m in matches.relations for k in m.key)]  # type: ignore[attr-defined]
    )
    entity_offsets = dict(zip(entity_keys, graph.entity_offsets(entity_keys)))  # type: ignore[attr-defined]
    counts = None
    if cfg.ppr_specificity:
        counts = {k: int(walk.entity_chunk_count[o]) for k, o in entity_offsets.items() if o is not None}
    titled: dict[str, tuple[float, int]] = {}
    if cfg.ppr_title_seeds:
        titles = title_index(graph)
        for named in named_entities(question, titles):
            offsets = titles.chunks[named.key]
            for cid in graph.chunk_ids_at(offsets):  # type: ignore[attr-defined]
                titled[cid] = (named.score, len(offsets))
    seeds = walk_seeds(
        matches.entities,
        matches.relations,
        seed_probs,
        dense_share=cfg.ppr_dense_share,
        chunk_counts=counts,
        temperature=cfg.dense_temperature if cfg.ppr_seed_softmax else None,
        titled=titled,
    )
    seed_chunks = [*seed_dense, *titled]
    chunk_offsets = dict(zip(seed_chunks, graph.chunk_offsets(seed_chunks)))  # type: ignore[attr-defined]
    nodes, weights = [], []
    for s in seeds:
        off = entity_offsets.get(s.key) if s.kind == "entity" else chunk_offsets.get(s.key)
        if off is not None:
            nodes.append(off if s.kind == "entity" else walk.n_entities + off)
            weights.append(s.weight)
    result = walk.personalized_pagerank(
        nodes,
        weights,
        damping=cfg.ppr_damping,
        radius=cfg.ppr_radius,
        max_nodes=cfg.ppr_max_nodes,
        max_fanout=cfg.ppr_max_fanout,
    )
    is_chunk = walk.is_chunk(result.nodes)
    mass = result.scores[is_chunk]
    total = float(mass.sum())
    chunk_offsets_found = (result.nodes[is_chunk] - walk.n_entities).tolist()
    chunk_ids = graph.chunk_ids_at(chunk_offsets_found)  # type: ignore[attr-defined]
    graph_share = {c: float(m) / total for c, m in zip(chunk_ids, mass.tolist()) if m > 0} if total > 0 else {}
    ranked = calibrated_chunks(graph_share, dense, cfg.max_chunk_candidates, cfg.dense_floor)
    mention_info = {
        c.id: c for c in rank_chunks(context_keys, by_entity, {}, sum(len(ids) for ids in by_entity.values()))
    }
    out = []
    for pos, (cid, g, d, r) in enumerate(ranked):
        info = mention_info.get(cid)
        out.append(
            ChunkCandidate(
                id=cid,
                mentions=info.mentions if info else 0,
                first_entity_rank=info.first_entity_rank if info else None,
                score=float(matches.dense_hits.get(cid, 0.0)),
                seen=pos,
                graph_score=g,
                dense_score=d,
                rank_score=r,
            )
        )
    ranking.update(
        {
            "seeds": [
                {
                    "kind": s.kind,
                    "key": s.key,
                    "weight": round(s.weight, 6),
                    "score": round(s.score, 6),
                    "channels": list(s.channels),
                }
                for s in seeds
            ],
            "walk": {
                "nodes": int(len(result.nodes)),
                "iterations": result.iterations,
                "residual": float(f"{result.residual:.3g}"),
                "mass_kept": round(float(result.scores.sum()), 6),
                "damping": cfg.ppr_damping,
                "dense_share": cfg.ppr_dense_share,
                "dense_floor": cfg.dense_floor,
                "synonym_edges": walk.n_synonym_edges,
                "title_edges": walk.n_title_edges,
            },
        }
    )
    return out
