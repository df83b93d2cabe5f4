"""Pure ranking and budgeting: match ranking, assembly with dedup, chunk order, budgets, question cutting."""

from __future__ import annotations

import pytest

from hxd2_ray.retrieval.budget import (
    TEMPLATE_OVERHEAD_TOKENS,
    context_limits,
    cut_to_tokens,
    fit_rows,
    fit_total,
    table_tokens,
)
from hxd2_ray.retrieval.ranking import (
    assemble_entities,
    assemble_relations,
    rank_chunks,
    rank_matches,
    relation_pair_of_key,
    vector_hits,
)
from hxd2_ray.retrieval.render import csv_line, entity_rows
from hxd2_ray.retrieval.results import ChannelHit, ContextChunk, references_of


def words(text: str) -> int:
    return len(text.split())


def hit(channel, score, query="q"):
    return ChannelHit(channel=channel, query=query, score=score)


def test_vector_hits_threshold_and_channel():
    got = vector_hits([[("a", 0.9), ("b", 0.2)], [("c", 0.5)]], ["k1", "k2"], "entity_mix", 0.3)
    assert got == [("a", hit("entity_mix", 0.9, "k1")), ("c", hit("entity_mix", 0.5, "k2"))]


def test_rank_matches_by_best_score_then_channel_agreement_then_key():
    pairs = [
        ("b", hit("entity_mix", 0.7)),
        ("a", hit("entity_mix", 0.7)),
        ("a", hit("fuzzy", 0.7, "x")),  # two channels agree on a
        ("c", hit("entity_name", 0.9)),
        ("c", hit("entity_name", 0.4)),  # same (channel, query): only the best survives
        ("d", hit("entity_mix", 0.1)),
    ]
    ranked = rank_matches(pairs, limit=3)
    assert [m.key for m in ranked] == ["c", "a", "b"]
    assert ranked[0].hits == (hit("entity_name", 0.9),)
    assert [h.channel for h in ranked[1].hits] == ["entity_mix", "fuzzy"]
    assert rank_matches(pairs, limit=0) == []


def test_relation_pair_of_key_is_canonical():
    assert relation_pair_of_key("b\x1fa") == ("a", "b")
    assert relation_pair_of_key("no separator") is None


def _row(key, degree=1):
    return {
        "key": key,
        "name": key.title(),
        "type": "t",
        "description": f"about {key}",
        "source_chunk_ids": [],
        "mention_count": 1,
        "name_truncated": False,
        "degree": degree,
    }


def _edge(s, t, degree, weight):
    return {
        "source_key": s,
        "target_key": t,
        "description": f"{s}-{t}",
        "keywords": ["k"],
        "weight": weight,
        "source_chunk_ids": ["c1"],
        "mention_count": 1,
        "degree": degree,
    }


def test_assemble_entities_matched_first_then_endpoints_deduplicated():
    matched = rank_matches([("b", hit("fuzzy", 0.9)), ("a", hit("entity_mix", 0.5))], 5)
    rows = {k: _row(k) for k in "abcd"}
    out = assemble_entities(matched, rows, ["c", "a", "d", "zz"], rows)
    assert [(e.key, e.origin) for e in out] == [
        ("b", "matched"),
        ("a", "matched"),
        ("c", "endpoint"),
        ("d", "endpoint"),
    ]
    assert out[0].score == 0.9 and out[2].score == 0.0


def test_assemble_relations_matched_first_then_neighbors_deduplicated_by_pair():
    matched = rank_matches([(("a", "c"), hit("relation_mix", 0.8))], 5)
    edges = {("a", "c"): _edge("a", "c", 3, 1.0)}
    neighbors = [_edge("a", "b", 5, 2.0), _edge("a", "c", 3, 1.0), _edge("b", "d", 2, 9.0)]
    out = assemble_relations(matched, edges, neighbors, {"a": "Alpha"})
    assert [(r.pair, r.origin) for r in out] == [
        (("a", "c"), "matched"),
        (("a", "b"), "neighbor"),
        (("b", "d"), "neighbor"),
    ]
    assert out[0].source_name == "Alpha" and out[0].target_name == "c"


def test_rank_chunks_by_mentions_then_entity_rank_then_score_then_order():
    by_entity = {"e0": ["c1", "c2"], "e1": ["c2", "c3", "c3"], "e2": ["c4", "c1"]}
    scores = {"c9": 0.8, "c8": 0.9, "c3": 0.5}
    ranked = rank_chunks(["e0", "e1", "e2"], by_entity, scores, limit=10)
    # c1: 2 mentions (rank 0); c2: 2 (rank 0); c3: 1 (rank 1, score .5); c4: 1 (rank 2); then vector-only.
    assert [c.id for c in ranked] == ["c1", "c2", "c3", "c4", "c8", "c9"]
    assert ranked[0].mentions == 2 and ranked[0].first_entity_rank == 0
    assert ranked[-1].first_entity_rank is None and ranked[-1].mentions == 0
    assert [c.id for c in rank_chunks(["e0", "e1", "e2"], by_entity, scores, limit=2)] == ["c1", "c2"]


def test_rank_chunks_fused():
    by_entity = {"e0": ["c1", "c2"], "e1": ["c2", "c3", "c3"], "e2": ["c4", "c1"]}
    scores = {"c9": 0.8, "c8": 0.9, "c3": 0.5}
    ranked = rank_chunks(["e0", "e1", "e2"], by_entity, scores, limit=10, ranking="fused")
    # mention ranks c1 0, c2 1, c3 2, c4 3; question ranks c8 0, c9 1, c3 2. RRF: c3 in both lists first;
    # c1 and c8 tie at 1/61 (mention order first), c2 and c9 at 1/62, then c4.
    assert [c.id for c in ranked] == ["c3", "c1", "c8", "c2", "c9", "c4"]
    assert [c.id for c in rank_chunks(["e0"], by_entity, {}, limit=10, ranking="fused")] == ["c1", "c2"]
    with pytest.raises(ValueError, match="mentions, fused"):
        rank_chunks([], {}, {}, limit=1, ranking="nope")


def _chunk(cid, doc, source):
    return ContextChunk(
        id=cid,
        doc_id=doc,
        text="t",
        header_path="",
        doc_title="",
        doc_source_id=source,
        doc_source_path=f"/p/{source}",
        mentions=0,
        first_entity_rank=None,
        score=0.0,
    )


def test_references_group_chunks_by_document_in_context_order():
    refs = references_of([_chunk("c1", "d2", "b.md"), _chunk("c2", "d1", "a.md"), _chunk("c3", "d2", "b.md")])
    assert [(r.source_id, r.chunk_ids) for r in refs] == [("b.md", ("c1", "c3")), ("a.md", ("c2",))]


# --------------------------------------------------------------------------------------------- budgets


def test_fit_rows_keeps_a_prefix():
    assert fit_rows([3, 3, 3], header_tokens=2, budget=8) == 2
    assert fit_rows([3, 1, 1], header_tokens=2, budget=4) == 0  # the first row does not fit: none kept
    assert fit_rows([], header_tokens=2, budget=0) == 0
    assert table_tokens([3, 3, 3], 2, 2) == 8 and table_tokens([3], 2, 0) == 0


def test_fit_total_scales_sections_and_drops_lowest_ranked():
    rows = {"entities": [10] * 10, "relations": [10] * 10, "chunks": [40] * 5}
    headers = {"entities": 2, "relations": 2, "chunks": 2}
    kept = {"entities": 10, "relations": 10, "chunks": 5}
    assert fit_total(rows, headers, kept, available=10_000) == kept
    out = fit_total(rows, headers, kept, available=200)
    total = sum(table_tokens(rows[s], headers[s], out[s]) for s in out)
    assert total <= 200
    assert all(out[s] >= 1 for s in out)  # every section keeps its best rows
    assert fit_total(rows, headers, kept, available=0) == {"entities": 0, "relations": 0, "chunks": 0}
    assert fit_total(rows, headers, kept, available=-5) == {"entities": 0, "relations": 0, "chunks": 0}


def test_context_limits_paper_and_small_model():
    paper = context_limits(32000, 4096, 1024)
    assert paper.input_cap == 32000 - 4096 - TEMPLATE_OVERHEAD_TOKENS and paper.notice == ""
    small = context_limits(2048, 4096, 1024)
    assert small.answer_reserve == 1024 and small.answer_max_tokens == 1024
    assert small.input_cap == 2048 - 1024 - TEMPLATE_OVERHEAD_TOKENS and "clamped" in small.notice
    assert context_limits(2048, 256, 1024).answer_max_tokens == 256


def test_cut_to_tokens_keeps_head_and_tail():
    text = " ".join(f"w{i}" for i in range(10_000))
    cut, was_cut = cut_to_tokens(text, 100, words, marker=" [...] ")
    assert was_cut and words(cut) <= 100 and words(cut) >= 95
    assert cut.startswith("w0 w1 ") and cut.endswith("w9999") and " [...] " in cut
    assert cut_to_tokens("short question", 100, words) == ("short question", False)


def test_entity_rows_are_csv_with_rank_ids():
    from hxd2_ray.retrieval.results import ContextEntity

    e = ContextEntity(
        key="k", name='Name, "quoted"', type="person", description="line1\nline2", degree=3, origin="matched", score=1.0
    )
    assert entity_rows([e, e])[1] == '2,"Name, ""quoted""",person,"line1\nline2",3'
    assert csv_line([1, None, "x"]) == "1,,x"


@pytest.mark.parametrize("available", [0, 5, 50, 137, 1000])
def test_fit_total_never_exceeds(available):
    rows = {"entities": [7, 3, 11], "relations": [1, 1, 1, 1, 30], "chunks": [13, 2]}
    headers = {"entities": 3, "relations": 3, "chunks": 3}
    out = fit_total(rows, headers, {"entities": 3, "relations": 5, "chunks": 2}, available)
    assert sum(table_tokens(rows[s], headers[s], out[s]) for s in out) <= available


def _rank_matches_full_sort(pairs, limit):
    """The straightforward form rank_matches must equal: every key ranked, then cut."""
    from hxd2_ray.retrieval.ranking import SCORE_DECIMALS, RankedMatch

    grouped = {}
    for key, hit in pairs:
        grouped.setdefault(key, []).append(hit)
    ranked = []
    for key, hits in grouped.items():
        best = {}
        for h in sorted(hits, key=lambda h: (-h.score, h.channel, h.query)):
            best.setdefault((h.channel, h.query), h)
        unique = list(best.values())
        ranked.append(RankedMatch(key=key, score=unique[0].score, hits=tuple(unique)))
    ranked.sort(key=lambda m: (-round(m.score, SCORE_DECIMALS), -len({h.channel for h in m.hits}), str(m.key)))
    return ranked[: max(0, limit)]


def test_rank_matches_equals_full_sort_on_random_hits():
    import random

    rng = random.Random(7)
    for trial in range(500):
        n_keys, pairs = rng.randint(1, 30), []
        for _ in range(rng.randint(0, 80)):
            key = f"k{rng.randint(0, n_keys)}" if trial % 2 else (f"a{rng.randint(0, 4)}", f"b{rng.randint(0, 4)}")
            score = rng.choice([1.0, 0.99999994, 1.0000001, 0.5, rng.random()])  # float32 noise ties included
            pairs.append((key, ChannelHit(channel=rng.choice("abcd"), query=rng.choice("xyz"), score=score)))
        for limit in (-1, 0, 1, 3, 6, 100):
            assert rank_matches(pairs, limit) == _rank_matches_full_sort(pairs, limit), (trial, limit)
