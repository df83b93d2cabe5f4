"""Fuzzy entity-name matching: folding, near misses, and equality with a brute-force rapidfuzz scan."""

from __future__ import annotations

import random
import string

import pytest
from rapidfuzz import fuzz, process

from hxd2_ray.retrieval.fuzzy import FuzzyNameIndex, fold_name


def test_fold_name_strips_accents_case_and_space():
    assert fold_name("  Thomas   SÜDHOF ") == "thomas sudhof"
    assert fold_name("Ｆｕｌｌ\x00width") == "full width"
    assert fold_name("神经元") == "神经元"


def test_near_miss_name_matches():
    index = FuzzyNameIndex(["thomas südhof", "robert malenka", "stanford university", "neurexin"])
    hits = index.search("Thomas Sudhoff", 85, 5)
    assert hits[0][0] == "thomas südhof"
    assert hits[0][1] == pytest.approx(100 * 2 * 13 / 27, abs=0.01)
    assert index.search("Thomas Edison", 85, 5) == []
    assert index.search("NEUREXIN", 85, 5) == [("neurexin", 100.0)]


def test_keys_sharing_a_folded_form_all_come_back_sorted_and_limited():
    index = FuzzyNameIndex(["südhof", "sudhof", "SUDHOF", "other"])
    assert index.search("sudhof", 90, 10) == [("SUDHOF", 100.0), ("sudhof", 100.0), ("südhof", 100.0)]
    assert len(index.search("sudhof", 90, 2)) == 2
    assert index.search("sudhof", 90, 0) == []
    assert index.search("   ", 90, 5) == []


def test_empty_index():
    index = FuzzyNameIndex([])
    assert len(index) == 0 and index.search("anything", 80, 5) == []


def _random_names(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = "aeioustrnlm" + "éü"  # few letters, so near misses are common
    names = set()
    while len(names) < n:
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7))) for _ in range(rng.randint(1, 3))]
        names.add(" ".join(words))
    return sorted(names)


def _mutate(name: str, rng: random.Random) -> str:
    chars = list(name)
    for _ in range(rng.randint(0, 2)):
        op = rng.choice("ids")
        pos = rng.randrange(len(chars) + (op == "i")) if chars else 0
        if op == "i":
            chars.insert(pos, rng.choice(string.ascii_lowercase))
        elif chars and op == "d":
            del chars[pos]
        elif chars:
            chars[pos] = rng.choice(string.ascii_lowercase)
    return "".join(chars) or "a"


@pytest.mark.parametrize("cutoff", [60, 75, 85, 95, 100])
def test_bigram_filter_finds_exactly_what_a_full_scan_finds(cutoff):
    names = _random_names(3000, seed=cutoff)
    index = FuzzyNameIndex(names)
    folded = [fold_name(n) for n in names]
    rng = random.Random(7)
    queries = [_mutate(rng.choice(names), rng) for _ in range(150)] + ["a", "ab", "zzzz", "a a", "é"]
    for q in queries:
        fq = fold_name(q)
        brute = process.extract(fq, folded, scorer=fuzz.ratio, processor=None, score_cutoff=cutoff, limit=None)
        expected = sorted(((names[i], s) for _, s, i in brute), key=lambda t: (-t[1], fold_name(t[0]), t[0]))
        got = index.search(q, cutoff, limit=len(names))
        assert got == expected, q
