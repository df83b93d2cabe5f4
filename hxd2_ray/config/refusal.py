"""The refusal gate of the multi-stage pipeline: when a question is refused as outside the knowledge base."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hxd2_ray.config.base import FrozenSection


class RefusalGate(FrozenSection):
    """When the auto mode refuses a question the index cannot answer (keys ``multistage.refusal_*``)."""

    refusal_enabled: bool = Field(True, description="Refuse questions scoring below refusal_threshold (auto mode).")
    refusal_threshold: float = Field(
        0.25,
        ge=-1,
        le=1,
        description="Mean best cosine of the keywords against entity_mix / relation_mix below which a question is "
        "refused; depends on the embedding model: calibrate it with hxd2 calibrate-refusal.",
    )
    refusal_names: bool = Field(
        True,
        description="Never refuse a question that names an entity of the index (its word n-grams matched "
        "exactly or fuzzily against the entity names).",
    )
    refusal_name_cutoff: float = Field(
        90,
        ge=0,
        le=100,
        description="Least rapidfuzz ratio of a fuzzy name match (n-grams of 6+ characters).",
    )
    refusal_lexical: bool = Field(
        True,
        description="Never refuse a question whose best BM25 score over the index's chunks reaches the lexical "
        "level calibrated when the index was built (an index without a lexical index or level: off).",
    )
    refusal_index_threshold: bool = Field(
        True,
        description="Use the threshold calibrated for the index when it was built (its manifest) when it was "
        "calibrated for refusal_rule; otherwise refusal_threshold.",
    )
    refusal_rule: Literal["keywords", "question", "min"] = Field(
        "keywords",
        description="keywords: mean best cosine of the keywords (reference); question: the question's embedding; "
        "min: the lower of the two (robust to made-up keywords of small models).",
    )
