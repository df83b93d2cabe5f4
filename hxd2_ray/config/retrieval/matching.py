"""Retrieval's matching: keywords, vector and name matches of entities, relations and chunks, and the 1-hop
neighbourhood kept around them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hxd2_ray.config.base import FrozenSection


class RetrievalMatching(FrozenSection):
    """Which entities, relations and chunks a question matches (keywords, vector hits, names)."""

    top_k_entities: int = Field(6, ge=0, description="Entities kept from the low-level matches (reference: 6).")
    top_k_relations: int = Field(5, ge=0, description="Relations kept from the high-level matches (reference: 5).")
    top_k_chunks: int = Field(5, ge=0, description="Chunks kept from the raw-question chunk channel.")
    search_k: int = Field(
        30, gt=0, description="Faiss hits fetched per query text before threshold and cut (reference: 30)."
    )
    similarity_threshold: float = Field(
        0.3,
        ge=-1,
        le=1,
        description="Minimum cosine similarity of a vector hit (the reference's 0.2 on its own scale is cos ~0.43).",
    )
    fuzzy_score_cutoff: float = Field(
        85,
        ge=0,
        le=100,
        description="Minimum rapidfuzz ratio (0-100) of a near-miss entity name (100: exact folded names only).",
    )
    fuzzy_limit: int = Field(
        5, ge=0, description="Fuzzy name matches kept per low-level keyword (0 disables the channel)."
    )
    question_channel: bool = Field(
        True, description="Also embed the raw question and search entity_mix, relation_mix and chunk families."
    )
    max_keywords: int = Field(10, gt=0, description="Keywords kept per level from the LLM reply.")
    max_neighbors_per_entity: int | None = Field(
        20, description="1-hop edges kept per matched entity, best by (degree sum, weight); None keeps all."
    )
    drop_prompt_keywords: bool = Field(
        False,
        description="Drop keywords found in the keyword prompt's own example but not in the question (a small "
        "model copies the example's names for questions it cannot parse).",
    )
    keyword_grounding: Literal["question_or_index", "off"] = Field(
        "question_or_index",
        description="question_or_index: a keyword the LLM returns is kept only when it shares a word with the "
        "question or names an entity of the index (the prompt's example never reaches retrieval), and the dropped "
        "ones are named in the trace; off: every keyword is kept (drop_prompt_keywords still applies).",
    )
    keyword_name_score: float = Field(
        90.0,
        ge=0,
        le=100,
        description="keyword_grounding: how close (rapidfuzz ratio, 0-100, on folded names) a keyword must be to an "
        "entity name of the index to count as one of its names.",
    )
    question_names: bool = Field(
        False,
        description="Entities whose names the question spells out (its word n-grams, by exact merge key) join "
        "the low-level matches (channel question:name).",
    )
