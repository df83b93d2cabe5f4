"""Properties of the keyword-reply parser (``hxd2_ray/retrieval/keywords.py``): never raises, bounded output."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.retrieval.keywords import MAX_KEYWORD_CHARS, parse_keywords
from tests.property.strategies import hostile_text, is_valid_unicode, json_text, small_json


def _check(kw, limit):
    for level in (kw.low_level, kw.high_level):
        assert len(level) <= limit
        assert all(isinstance(w, str) and w.strip() == w and w and len(w) <= MAX_KEYWORD_CHARS for w in level)
        assert len({normalize_name(w) for w in level}) == len(level)
        assert all(is_valid_unicode(w) for w in level), level


@given(hostile_text, st.integers(1, 12))
def test_any_text(text, limit):
    _check(parse_keywords(text, limit), limit)


@given(json_text(), st.integers(1, 12))
def test_any_json(text, limit):
    _check(parse_keywords(text, limit), limit)


@given(
    st.dictionaries(
        st.sampled_from(["high_level_keywords", "low_level_keywords", "High-Level", "低级关键词", "x"]),
        small_json,
        max_size=3,
    )
)
def test_hostile_values_under_the_expected_keys(obj):
    _check(parse_keywords(json.dumps(obj), 10), 10)
    _check(parse_keywords(repr(obj), 10), 10)  # the Python-literal path


@given(
    st.lists(
        st.text(alphabet=st.characters(categories=["L"]), min_size=1, max_size=10),
        min_size=1,
        max_size=5,
        unique_by=normalize_name,
    )
)
def test_clean_replies_come_back(words):
    kw = parse_keywords(json.dumps({"high_level_keywords": [], "low_level_keywords": words}), 10)
    assert kw.parsed and list(kw.low_level) == words
