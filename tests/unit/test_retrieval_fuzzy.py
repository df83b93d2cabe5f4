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


def _fold_reference(text: str) -> str:
    """fold_name without its ASCII shortcut."""
    import unicodedata

    decomposed = unicodedata.normalize("NFKD", text.replace("\x00", " "))
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(unicodedata.normalize("NFKC", stripped).casefold().split())


def test_fold_name_ascii_shortcut_matches_the_unicode_path():
    rng = random.Random(3)
    ascii_chars = [chr(i) for i in range(128)]
    samples = ["".join(rng.choice(ascii_chars) for _ in range(rng.randint(0, 30))) for _ in range(2000)]
    samples += ["  Thomas\t\nSUDHOF\x00x ", "a\x1fb\x1cc", "\x00", "MiXeD CaSe"]
    for text in samples:
        assert fold_name(text) == _fold_reference(text), repr(text)


def _brute_force(names: list[str], query: str, cutoff: float) -> list[tuple[str, float]]:
    folded = [fold_name(n) for n in names]
    fq = fold_name(query)
    if not fq:
        return []
    keep = [i for i, f in enumerate(folded) if f]
    found = process.extract(
        fq, [folded[i] for i in keep], scorer=fuzz.ratio, processor=None, score_cutoff=cutoff, limit=None
    )
    return sorted(((names[keep[i]], s) for _, s, i in found), key=lambda t: (-t[1], folded[names.index(t[0])], t[0]))


def _stress_names(n: int, rng: random.Random) -> list[str]:
    """Repeated bigrams ("abab", "aaaa"), lengths 1..45, accents, CJK, astral code points, folded duplicates."""
    pools = ["ab", "abc ", "aé", "a", "xyz", "神经元", "𝒜𝒷", "ö"]
    names = set()
    while len(names) < n:
        pool = rng.choice(pools) + rng.choice(pools)
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 45])
        name = "".join(rng.choice(pool) for _ in range(rng.randint(1, length)))
        if rng.random() < 0.1:
            name = name.upper()
        names.add(name)
    return sorted(names)


@pytest.mark.parametrize("gram_filter", ["cheaper", "bigrams", "trigrams"])
@pytest.mark.parametrize("max_skipped", [0, 1, 3, 50])
@pytest.mark.parametrize("cutoff", [50, 66.7, 85, 90.5, 100])
def test_randomized_names_equal_a_full_scan(cutoff, max_skipped, gram_filter, monkeypatch):
    rng = random.Random(int(cutoff * 10) + max_skipped)
    names = _stress_names(400, rng)
    index = FuzzyNameIndex(names)
    monkeypatch.setattr(index, "_MAX_SKIPPED", max_skipped)
    monkeypatch.setattr(index, "gram_filter", gram_filter)
    queries = [_mutate(rng.choice(names), rng) for _ in range(60)]
    queries += [rng.choice(names) for _ in range(20)]
    queries += ["abababababababab", "aaaaaaaaaaaaaaaaaaaa", "神经元神经元", "𝒜𝒷𝒜", "q", "zz", "ÅB ab"]
    for q in queries:
        assert index.search(q, cutoff, limit=len(names)) == _brute_force(names, q, cutoff), q


@pytest.mark.parametrize("gram_filter", ["cheaper", "bigrams", "trigrams"])
def test_long_skewed_names_equal_a_full_scan(gram_filter, monkeypatch):
    """Bench-like names from a few syllables: long posting lists, every length a range of many names."""
    monkeypatch.setattr(FuzzyNameIndex, "gram_filter", gram_filter)
    rng = random.Random(11)
    syllables = "ka ro mi su te na lo vi dra bel tor".split()
    names = sorted(
        {
            " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(rng.randint(1, 3)))
            for _ in range(4000)
        }
    )
    index = FuzzyNameIndex(names)
    for _ in range(120):
        q = _mutate(rng.choice(names), rng)
        for cutoff in (70, 85):
            assert index.search(q, cutoff, limit=len(names)) == _brute_force(names, q, cutoff), q
    hits = index.search(names[0], 85, 3)
    assert hits[0] == (names[0], 100.0) and len(hits) <= 3


def test_single_name_and_unknown_bigrams():
    index = FuzzyNameIndex(["ab"])
    assert index.search("ab", 80, 5) == [("ab", 100.0)]
    assert index.search("abc", 80, 5) == [("ab", 80.0)]
    assert index.search("xy", 50, 5) == []
    index = FuzzyNameIndex(["a"])
    assert index.search("a", 100, 5) == [("a", 100.0)]
    assert index.search("ab", 60, 5) == [("a", pytest.approx(200 / 3))]


def test_every_folded_form_shared_by_the_same_number_of_keys():
    index = FuzzyNameIndex(["Ab", "ab", "Cd", "cd"])
    assert index.search("ab", 100, 5) == [("Ab", 100.0), ("ab", 100.0)]
    assert index.search("CD", 100, 1) == [("Cd", 100.0)]


@pytest.mark.parametrize("names", [[], ["Thomas Südhof"], None], ids=["empty", "one", "random"])
def test_a_written_index_maps_back_and_searches_alike(tmp_path, names):
    import numpy as np

    names = _random_names(3000, 11) + ["Thomas Südhof", "thomas sudhof", "THOMAS SÜDHOF"] if names is None else names
    built = FuzzyNameIndex(names)
    built.write(tmp_path)
    mapped = FuzzyNameIndex.open(tmp_path)
    assert mapped is not None and FuzzyNameIndex.open(tmp_path / "none") is None
    assert len(mapped) == len(built) and mapped.size == built.size
    if len(built):
        assert isinstance(mapped._postings, np.memmap) or not len(built._postings)
    rng = random.Random(5)
    queries = ["Thomas Sudhoff", "thomas südhof", ""] + [_mutate(rng.choice(names), rng) for _ in range(40) if names]
    for q in queries:
        for cutoff in (70, 85):
            assert mapped.search(q, cutoff, 10) == built.search(q, cutoff, 10), q


def test_trigrams_narrow_what_bigrams_leave_and_cheaper_picks_them():
    """On long names from few syllables the trigram filter counts fewer postings for some lengths (the cheaper
    filter then takes it), and both filters' candidates hold every match."""
    rng = random.Random(13)
    syllables = "ka ro mi su te na lo vi dra bel tor".split()
    names = sorted({" ".join("".join(rng.choice(syllables) for _ in range(4)) for _ in range(3)) for _ in range(3000)})
    index = FuzzyNameIndex(names)
    chosen = []
    for q in [_mutate(rng.choice(names), rng) for _ in range(40)]:
        fq = fold_name(q)
        by_filter = {}
        for gram_filter in ("bigrams", "trigrams", "cheaper"):
            index.gram_filter = gram_filter
            by_filter[gram_filter] = set(index._candidates(fq, 0.85).tolist())
        matches = {i for i, name in enumerate(index._folded.to_pylist()) if fuzz.ratio(fq, name) >= 85}
        assert matches <= by_filter["bigrams"] and matches <= by_filter["trigrams"]
        chosen.append(by_filter["cheaper"] == by_filter["trigrams"] != by_filter["bigrams"])
    assert any(chosen)


def test_an_index_written_before_trigrams_opens_and_searches_with_bigrams(tmp_path):
    import json

    names = _random_names(2000, 17)
    built = FuzzyNameIndex(names)
    built.write(tmp_path)
    for old in tmp_path.glob("names_*"):
        if old.stem.removeprefix("names_") in ("alphabet", "tri_vocab", "tri_starts", "tri_postings"):
            old.unlink()
    (tmp_path / "names.json").write_text(json.dumps({"size": built.size}) + "\n", encoding="utf-8")
    older = FuzzyNameIndex.open(tmp_path)
    assert older is not None and older._tri_width == 0 and built._tri_width > 0
    rng = random.Random(2)
    for q in [_mutate(rng.choice(names), rng) for _ in range(40)]:
        assert older.search(q, 80, 10) == built.search(q, 80, 10) == _brute_force(names, q, 80)[:10], q
