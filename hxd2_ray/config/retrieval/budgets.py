"""Retrieval's token budgets: the context tables, the question, and the completions of the keyword and answer calls."""

from __future__ import annotations

from pydantic import Field

from hxd2_ray.config.base import FrozenSection


class RetrievalBudgets(FrozenSection):
    """Token budgets of the context and the completions, and the sampling temperature."""

    entity_budget_tokens: int = Field(8000, ge=0, description="Token budget of the entity table (paper: 8k).")
    relation_budget_tokens: int = Field(8000, ge=0, description="Token budget of the relation table (paper: 8k).")
    chunk_budget_tokens: int = Field(12000, ge=0, description="Token budget of the source-text table (paper: 12k).")
    context_length: int | None = Field(
        None, gt=0, description="Model context in tokens; None takes the LLM's max_model_len (32768 if it has none)."
    )
    answer_reserve_tokens: int = Field(
        4096,
        gt=0,
        description="Tokens kept free for the answer: the input cap is context_length minus this (paper: 28k of 32k). "
        "Clamped to half the context for small models.",
    )
    question_budget_tokens: int = Field(1024, gt=0, description="A longer question is cut to this many tokens.")
    keyword_max_tokens: int = Field(256, gt=0, description="Completion cap of the keyword-extraction call.")
    answer_max_tokens: int = Field(1024, gt=0, description="Completion cap of the answer (never above the reserve).")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature of keyword extraction and the answer.")
