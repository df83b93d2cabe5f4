"""bench/fuzzy_names.py at a small size: every filter finds what the bigram filter finds, and the filters differ."""

from __future__ import annotations

from bench.fuzzy_names import FILTERS, measure


def test_fuzzy_names_bench_compares_the_filters(tmp_path):
    result = measure(20_000, 20, 85.0, tmp_path)
    assert result["postings"]["bigrams"] > result["postings"]["trigrams"] > 0
    searches = result["searches"]
    assert len(searches) == 2 * len(FILTERS)
    assert all(s["same_results"] for s in searches.values())
    # The trigram bound is lower: it leaves more candidates, so the bench did switch filters.
    for label in ("exact", "one letter changed"):
        by_trigrams, by_bigrams = searches[f"{label} / trigrams"], searches[f"{label} / bigrams"]
        assert by_trigrams["median_candidates"] > by_bigrams["median_candidates"]
    assert not list(tmp_path.iterdir())  # the written index is removed
