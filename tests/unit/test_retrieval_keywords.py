"""Keyword extraction: the request, and the tolerant parser on clean and messy replies."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.retrieval.keywords import MAX_KEYWORD_CHARS, clean_keywords, keyword_request, parse_keywords
from hxd2_ray.retrieval.query_prompts import fill, load_query_prompts


def _kw(text: str, limit: int = 10):
    k = parse_keywords(text, limit)
    return list(k.low_level), list(k.high_level), k.parsed


def test_clean_json():
    reply = json.dumps({"high_level_keywords": ["Awards"], "low_level_keywords": ["Thomas Südhof", "Nobel Prize"]})
    assert _kw(reply) == (["Thomas Südhof", "Nobel Prize"], ["Awards"], True)


@pytest.mark.parametrize(
    "reply",
    [
        'Sure! Here you go:\n```json\n{"high_level_keywords": ["Awards"], "low_level_keywords": ["Südhof"]}\n```',
        'Keywords: {"high_level_keywords": ["Awards"], "low_level_keywords": ["Südhof"]} Hope it helps {x}',
        '{"high_level_keywords": ["Awards",], "low_level_keywords": ["Südhof",],}',
        "{'high_level_keywords': ['Awards'], 'low_level_keywords': ['Südhof']}",
        '{"High-Level Keywords": "Awards", "low level keywords": ["Südhof"]}',
        '{"high_level_keywords": ["Awards"], "low_level_keywords": ["Südhof", "Südh',  # cut by max_tokens
        "High-level keywords: Awards\nLow-level keywords: Südhof",
        "高层关键词：Awards\n低层关键词：Südhof",
        '{"hl_keywords": ["Awards"], "ll_keywords": [["Südhof"]]}',
    ],
)
def test_messy_replies(reply):
    low, high, parsed = _kw(reply)
    assert parsed
    assert high == ["Awards"]
    assert low[0] == "Südhof"


def test_bare_list_is_low_level_and_other_keys_too():
    assert _kw('["Neurexin", "Synapse"]') == (["Neurexin", "Synapse"], [], True)
    assert _kw('{"keywords": ["Neurexin"]}') == (["Neurexin"], [], True)


@pytest.mark.parametrize("reply", ["", "   ", "I cannot help with that.", "{not json at all", "null", "42"])
def test_unreadable_replies_are_flagged_not_raised(reply):
    k = parse_keywords(reply)
    assert not k.parsed and k.empty and k.raw == reply


def test_clean_keywords_dedups_splits_cuts_and_limits():
    items = [" Thomas  Südhof ", "thomas südhof", "THOMAS SÜDHOF", "a, b；c", "", None, 7, "x" * 500, ["nested"]]
    out = clean_keywords(items, limit=10)
    assert out[0] == "Thomas Südhof"
    assert out[1:4] == ("a", "b", "c")
    assert "7" in out and "nested" in out
    assert max(map(len, out)) == MAX_KEYWORD_CHARS
    assert clean_keywords([f"k{i}" for i in range(30)], limit=3) == ("k0", "k1", "k2")


def test_keyword_request_carries_schema_tag_and_the_question_last():
    prompts = load_query_prompts().for_language("en")
    req = keyword_request("What is {entities}?", prompts, max_tokens=99, temperature=0.0, max_items=7)
    assert req.tag == "keywords" and req.max_tokens == 99
    schema = req.json_schema
    assert set(schema["required"]) == {"high_level_keywords", "low_level_keywords"}
    assert schema["properties"]["low_level_keywords"]["maxItems"] == 7
    assert req.messages[0]["role"] == "system" and "JSON" in req.messages[0]["content"]
    # A placeholder inside the question is not expanded; the question ends the user message.
    assert req.messages[1]["content"].endswith("What is {entities}?")


def test_zh_prompts_exist_and_fill_is_single_pass():
    zh = load_query_prompts().for_language("zh")
    assert "中文" in zh.answer_system
    assert load_query_prompts().for_language("fr") == load_query_prompts().for_language("en")
    assert fill("{question} and {entities}", question="{entities}", entities="E") == "{entities} and E"
