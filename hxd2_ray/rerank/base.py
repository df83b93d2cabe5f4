"""Reranker protocol: one relevance score per (query, passage) pair; higher is more relevant.

Scores are comparable within one call only (a cross-encoder's logits, or their sigmoid): the pipeline uses them
to order the candidates of one question, never against a fixed threshold.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class Reranker(Protocol):
    model_id: str  # shown in traces

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One finite float per passage, in the order given; [] for no passages."""
        ...

    def close(self) -> None: ...
