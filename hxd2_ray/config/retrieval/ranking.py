"""Retrieval's ranking of chunks: the paper's mention order, rank fusion, or personalized PageRank over the graph, then
the reranker's share."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hxd2_ray.config.base import FrozenSection


class RetrievalRanking(FrozenSection):
    """How the matched evidence ranks the chunks (mentions, fused, ppr) before the budgets."""

    chunk_ranking: Literal["mentions", "fused", "ppr"] = Field(
        "mentions",
        description="mentions: by context entities mentioned (paper); fused: reciprocal-rank fusion of that order "
        "and the raw question's chunk similarity (robust to a sparse graph from a small extractor); "
        "ppr: personalized PageRank over entities and chunks, seeded by the matched entities and "
        "relations and by the question's chunk hits (needs the resident graph; else fused).",
    )
    dense_keep: int = Field(
        0,
        ge=0,
        description="The question's best chunk hits that the mentions/fused rankings put first (dense never lost; "
        "0: the paper's order); ppr compares dense and graph evidence on one probability scale instead.",
    )
    dense_temperature: float = Field(
        0.05,
        gt=0,
        description="Softmax temperature turning the question's chunk cosines into the dense probability "
        "(0.05: the scale 20 sentence-transformers models such as MiniLM are trained with).",
    )
    dense_floor: float = Field(
        1.0,
        ge=0,
        le=1,
        description="ppr: a chunk ranks by max(its share of the walk, dense_floor x its dense probability); 1: a "
        "dense hit yields only to more graph probability than it has; 0: the walk alone (HippoRAG 2).",
    )
    ppr_damping: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Probability that the walk follows an edge (HippoRAG 2: 0.5).",
    )
    ppr_dense_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the reset mass on the question's chunk hits (the rest on matched entities).",
    )
    ppr_seed_softmax: bool = Field(
        True,
        description="Weigh entity seeds by the softmax of their match scores at dense_temperature (an exact name "
        "outweighs a vague vector match by e^10), not by the scores themselves.",
    )
    ppr_title_seeds: bool = Field(
        True,
        description="Seed the chunks of documents whose title the question names (a trailing parenthetical "
        "dropped: 'Mark King (musician)'), with the named entities.",
    )
    ppr_dense_seeds: int = Field(30, ge=0, description="Chunk hits of the question used as seeds (at most search_k).")
    ppr_lexical_seeds: int = Field(
        0,
        ge=0,
        description="Best BM25 chunks of the question (the index's lexical channel) that join the question's "
        "chunk hits as seeds and in the dense floor; 0: the lexical channel is not used.",
    )
    ppr_lexical_weight: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Share of the lexical channel in the question's chunk distribution (seeds and "
        "floor): (1 - w) x dense probability + w x BM25 share.",
    )
    ppr_specificity: bool = Field(
        True,
        description="Divide an entity seed's weight by the number of chunks that mention it (HippoRAG's node "
        "specificity: a name every passage uses says little).",
    )
    ppr_mention_weight: float = Field(1.0, ge=0, description="Weight of a chunk-entity (MENTIONS) edge.")
    ppr_mention_idf: bool = Field(
        False,
        description="Weigh a MENTIONS edge by the entity's rarity, log(1 + chunks / its chunks): from a passage "
        "the walk goes on through its specific names rather than its common ones.",
    )
    ppr_related_weight: float = Field(1.0, ge=0, description="Weight of an entity-entity (RELATED) edge.")
    ppr_synonym_weight: float = Field(1.0, ge=0, description="Weight of a SYNONYM edge per unit of name cosine.")
    ppr_title_weight: float = Field(
        1.0,
        ge=0,
        description="Weight of a chunk-title edge: a chunk and the document whose title its text names, "
        "and that document's own chunks (index-time section title_mentions; 0: not walked).",
    )
    ppr_radius: int = Field(3, ge=1, description="Hops around the seeds the walk is computed over.")
    ppr_max_nodes: int = Field(2000, gt=0, description="Largest neighbourhood the walk is computed over.")
    ppr_max_fanout: int = Field(
        512,
        gt=0,
        description="Nodes with more neighbours are not expanded (a hub's mass per neighbour is negligible).",
    )
    rerank_top_n: int = Field(
        20,
        ge=0,
        description="Ranked chunks the reranker (section rerank) reorders before the budget.",
    )
    max_chunk_candidates: int = Field(
        64, gt=0, description="Ranked chunk candidates whose text is fetched before the chunk budget is applied."
    )
