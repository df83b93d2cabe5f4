"""Keep the query keywords that the question or the index supports, as ``extraction.grounding`` does at index time.

A small model answers the keyword prompt with its own example's words for a question it cannot parse: for "Which gene
interacts with OVATE8?" SmolLM2-135M returned "Research affiliation, Bergen, Bergen Institute, Bergen lab, Field of
study". Matched against the index, such keywords pull in whatever shares them. A keyword is kept when

* it shares a word with the question (the lexical channel's tokens: lower-cased words, jieba words in Chinese runs,
  no function words), or the question holds it whole (normalised), or
* it is a name of the index: an entity whose folded name scores at least ``keyword_name_score`` against it;

and never when it comes from the prompt's own example without being in the question. What is dropped is named in
the trace and counted in the answer's notices.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.retrieval.lexical import lexical_tokens
from hxd2_ray.retrieval.results import Keywords


def ground_keywords(
    keywords: Keywords, question: str, prompt_text: str, names: Any, name_score: float
) -> tuple[Keywords, list[str]]:
    """``keywords`` less the ungrounded ones (see the module), and those dropped, in reply order.

    ``names``: the index's fuzzy name index (``search(text, score_cutoff, limit)``), or None to use the question
    alone."""
    asked = normalize_name(question)
    asked_words = set(lexical_tokens(question))
    prompt = normalize_name(prompt_text)

    def grounded(keyword: str) -> bool:
        folded = normalize_name(keyword)
        if not folded:
            return False
        in_question = folded in asked or bool(asked_words & set(lexical_tokens(keyword)))
        if folded in prompt and folded not in asked:
            return False  # the prompt's example, not the question's
        return in_question or (names is not None and bool(names.search(keyword, name_score, 1)))

    dropped = [k for k in (*keywords.low_level, *keywords.high_level) if not grounded(k)]
    if not dropped:
        return keywords, []
    gone = set(dropped)
    return (
        replace(
            keywords,
            low_level=tuple(k for k in keywords.low_level if k not in gone),
            high_level=tuple(k for k in keywords.high_level if k not in gone),
            dropped=(*keywords.dropped, *dropped),
        ),
        dropped,
    )
