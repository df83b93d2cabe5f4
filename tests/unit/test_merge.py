"""The global entity/relation merge: keys, majority votes, unordered pairs, provenance, budgets."""

from __future__ import annotations

import pytest

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import (
    entity_key,
    merge_entity_mentions,
    merge_extractions,
    merge_relation_mentions,
    missing_endpoint_entities,
    normalize_name,
    relation_pair_key,
)
from hxd2_ray.types import EntityMention, Extraction, RelationMention

CFG = ExtractionConfig()


def words(text: str) -> int:
    return len(text.split())


def ent(name, type_="person", desc="", chunk="c1"):
    return EntityMention(name, type_, desc, chunk)


def rel(src, tgt, desc="", keywords=(), strength=1.0, chunk="c1"):
    return RelationMention(src, tgt, desc, tuple(keywords), strength, chunk)


@pytest.mark.parametrize(
    "raw,key",
    [
        ("Marie Curie", "marie curie"),
        ("  MARIE\t\n CURIE ", "marie curie"),
        ("Ｍａｒｉｅ　Ｃｕｒｉｅ", "marie curie"),
        ("ＡＢＣ１２３", "abc123"),
        ("Straße", "strasse"),
        ("林晓梅", "林晓梅"),
        ("", ""),
    ],
)
def test_normalize_name(raw, key):
    assert normalize_name(raw) == key


def test_surface_forms_group_under_one_key_and_most_frequent_wins():
    mentions = [
        ent("Marie Curie", chunk="c2"),
        ent("MARIE CURIE", chunk="c1"),
        ent("Ｍａｒｉｅ Ｃｕｒｉｅ", chunk="c3"),  # full-width letters
        ent("marie  curie", chunk="c1"),
        ent("Marie Curie", chunk="c4"),
    ]
    assert {entity_key(m.name, CFG) for m in mentions} == {"marie curie"}
    m = merge_entity_mentions("marie curie", mentions, CFG, words)
    assert m.name == "Marie Curie"
    assert m.source_chunk_ids == ("c1", "c2", "c3", "c4")
    assert m.mention_count == 5


def test_name_tie_is_lexicographically_smallest_whatever_the_order():
    a = [ent("marie curie"), ent("Marie Curie")]
    assert merge_entity_mentions("k", a, CFG, words).name == "Marie Curie"
    assert merge_entity_mentions("k", a[::-1], CFG, words).name == "Marie Curie"


def test_majority_type_and_unknown_never_outvotes():
    assert (
        merge_entity_mentions("k", [ent("A", "person"), ent("A", "location"), ent("A", "person")], CFG, words).type
        == "person"
    )
    # Tie -> lexicographically smallest, independent of order.
    assert merge_entity_mentions("k", [ent("A", "person"), ent("A", "location")], CFG, words).type == "location"
    assert (
        merge_entity_mentions("k", [ent("A", "unknown"), ent("A", "unknown"), ent("A", "gene")], CFG, words).type
        == "gene"
    )
    assert merge_entity_mentions("k", [ent("A", "unknown")], CFG, words).type == "unknown"


def test_descriptions_unique_sorted_joined():
    mentions = [
        ent("A", desc="zeta"),
        ent("A", desc="alpha"),
        ent("A", desc="zeta"),
        ent("A", desc=" "),
        ent("A", desc=""),
    ]
    assert merge_entity_mentions("a", mentions, CFG, words).description == "alpha\nzeta"


def test_name_truncation_flag_and_key():
    cfg = ExtractionConfig(max_entity_name_chars=8)
    long_a, long_b = "Abcdefghij", "ABCDEFGHxyz"
    assert entity_key(long_a, cfg) == entity_key(long_b, cfg) == "abcdefgh"
    m = merge_entity_mentions("abcdefgh", [ent(long_a), ent(long_a), ent(long_b)], cfg, words)
    assert m.name == "Abcdefgh" and m.name_truncated
    short = merge_entity_mentions("abc", [ent("Abc")], cfg, words)
    assert not short.name_truncated


def test_needs_summary_uses_the_token_counter():
    cfg = ExtractionConfig(description_token_budget=5)
    mentions = [ent("A", desc=f"description number {i}") for i in range(3)]
    assert merge_entity_mentions("a", mentions, cfg, words).needs_summary  # 9 words > 5
    assert not merge_entity_mentions("a", mentions[:1], cfg, words).needs_summary  # 3 words
    # Descriptions too short (in UTF-8 bytes) to reach the budget never reach the tokenizer.
    calls = []

    def counting(text):
        calls.append(text)
        return 10**6

    big_budget = ExtractionConfig(description_token_budget=500)
    assert not merge_entity_mentions("a", mentions, big_budget, counting).needs_summary
    assert calls == []


def test_relations_are_unordered_with_summed_weights_and_unioned_keywords():
    mentions = [
        rel("Marie Curie", "Sorbonne", "taught there", ["Teaching", "career"], 8, "c2"),
        rel("sorbonne", "MARIE CURIE", "employed her", ["teaching", "Employment"], 2.5, "c1"),
        rel("Marie Curie", "Sorbonne", "taught there", ["career"], 1, "c2"),
    ]
    keys = {relation_pair_key(m.source, m.target, CFG) for m in mentions}
    assert keys == {("marie curie", "sorbonne")}
    r = merge_relation_mentions(mentions, CFG, words)
    assert (r.source_key, r.target_key) == ("marie curie", "sorbonne")
    assert r.weight == pytest.approx(11.5)
    assert r.keywords == ("career", "Employment", "Teaching")
    assert r.description == "employed her\ntaught there"
    assert r.source_chunk_ids == ("c1", "c2")
    assert r.mention_count == 3
    assert r.key == "marie curie\x1fsorbonne"
    # Same result whatever the order of the mentions.
    assert merge_relation_mentions(mentions[::-1], CFG, words) == r


def test_relation_pair_key_is_sorted():
    assert relation_pair_key("b", "A", CFG) == ("a", "b")
    assert relation_pair_key("A", "b", CFG) == ("a", "b")


def test_missing_endpoints_become_unknown_entities():
    relations = [
        rel("Marie Curie", "Polonium", chunk="c2"),
        rel("polonium", "Radium", chunk="c1"),
        rel("Polonium", "Marie Curie", chunk="c3"),
    ]
    missing = missing_endpoint_entities({"marie curie"}, relations, CFG)
    assert [(e.key, e.name, e.type, e.source_chunk_ids, e.mention_count) for e in missing] == [
        ("polonium", "Polonium", "unknown", ("c1", "c2", "c3"), 3),
        ("radium", "Radium", "unknown", ("c1",), 1),
    ]
    assert all(e.description == "" and not e.needs_summary for e in missing)


def test_merge_extractions_end_to_end():
    cfg = ExtractionConfig(max_entity_name_chars=8)
    extractions = [
        Extraction(
            "c1",
            entities=(ent("Alice", "person", "a", "c1"), ent("Bob", "person", "b", "c1")),
            relations=(rel("Alice", "Bob", "friends", ["friend"], 2, "c1"),),
        ),
        Extraction(
            "c2",
            entities=(ent("ALICE", "location", "a2", "c2"), ent("alice", "person", "a", "c2")),
            relations=(
                rel("bob", "alice", "", ["Friend"], 3, "c2"),
                rel("Bob", "Carol", "x", [], 1, "c2"),
                # self loop once names are truncated to 8 characters
                rel("Longname1", "longname2", "x", [], 1, "c2"),
            ),
        ),
        Extraction("c3", entities=(ent("Ghost", "person", "never merged", "c3"),), error="LLM failed"),
    ]
    entities, relations = merge_extractions(extractions, cfg, words)
    assert [(e.key, e.name, e.type, e.mention_count) for e in entities] == [
        ("alice", "ALICE", "person", 3),
        ("bob", "Bob", "person", 1),
        ("carol", "Carol", "unknown", 1),
    ]
    assert [(r.key, r.weight, r.keywords, r.description) for r in relations] == [
        ("alice\x1fbob", 5.0, ("Friend",), "friends"),
        ("bob\x1fcarol", 1.0, (), "x"),
    ]


def test_merge_is_linear_enough_for_many_mentions():
    # 60k mentions over 3k keys: a quadratic implementation would take minutes here.
    mentions = [ent(f"Entity {i % 3000}", "person", f"desc {i % 7}", f"c{i}") for i in range(60_000)]
    entities, _ = merge_extractions([Extraction("c", entities=tuple(mentions))], CFG, words)
    assert len(entities) == 3000
    assert all(e.mention_count == 20 for e in entities)
