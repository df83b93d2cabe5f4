"""A deterministic, model-free reranker: the share of the query's distinct words that occur in the passage.

For unit tests (exact, explainable orders) and as a floor a real cross-encoder must beat. Words are casefolded
runs of letters and digits; Chinese text is compared per character.
"""

from __future__ import annotations

import re
from typing import Sequence

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3400-\u9fff]")


def _words(text: str) -> set[str]:
    folded = text.casefold()
    return set(_WORD.findall(_CJK.sub(" ", folded))) | set(_CJK.findall(folded))


class OverlapReranker:
    def __init__(self, model_id: str = "word-overlap-v1") -> None:
        self.model_id = model_id

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if isinstance(passages, str):
            raise TypeError("score() takes a sequence of passages, not a single string")
        wanted = _words(query)
        if not wanted:
            return [0.0] * len(passages)
        return [len(wanted & _words(p)) / len(wanted) for p in passages]

    def close(self) -> None:
        return None
