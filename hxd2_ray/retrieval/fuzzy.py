"""Near-miss entity names ("Thomas Sudhoff" -> "Thomas Südhof") by rapidfuzz, fast enough for a million names.

Names are folded (accents stripped, casefolded, spaces collapsed) and compared with ``fuzz.ratio``, the
normalised Indel similarity ``1 - d / (len1 + len2)``. A full rapidfuzz scan costs ~70 ms per keyword at one
million names, so candidates are found first with a bigram index, using two bounds that exclude no true
match (the result equals a full scan; the unit tests check that against brute force):

* length: ``d >= |len1 - len2|``, so similarity >= c needs ``len2`` within ``[len1*c/(2-c), len1*(2-c)/c]``;
* shared bigrams: each inserted or deleted character breaks at most two bigrams, so a name within Indel
  distance ``d`` of the query shares at least ``max(len1, len2) - 1 - 2d`` of the query's bigrams (as a
  multiset); one ``bincount`` over the postings of the query's bigrams counts them for every name.

Lengths whose bound is not positive (very short strings, low cutoffs) are scanned in full.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Sequence

import numpy as np
from rapidfuzz import fuzz, process

_SEPARATOR = 0  # code point that joins names in the build buffer; never inside a folded name


def fold_name(text: str) -> str:
    """Comparison form of a name: NFKD without combining marks, casefolded, single spaces, no NULs."""
    decomposed = unicodedata.normalize("NFKD", text.replace("\x00", " "))
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(unicodedata.normalize("NFKC", stripped).casefold().split())


def _bigram_codes(codepoints: np.ndarray) -> np.ndarray:
    # Code points are < 2**21, so two fit in one int64 without collision.
    return (codepoints[:-1].astype(np.int64) << 21) | codepoints[1:].astype(np.int64)


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


class FuzzyNameIndex:
    """Folded entity keys with a bigram index; :meth:`search` returns ``(key, ratio)`` best first."""

    def __init__(self, keys: Sequence[str]):
        by_folded: dict[str, list[str]] = {}
        for key in keys:
            folded = fold_name(key)
            if folded:
                by_folded.setdefault(folded, []).append(key)
        self.size = len(keys)
        self._folded: list[str] = list(by_folded)
        self._folded_array = np.array(self._folded, dtype=object)  # fancy indexing without a Python loop
        self._keys: list[list[str]] = [sorted(v) for v in by_folded.values()]
        n = len(self._folded)
        self._lengths = np.fromiter((len(s) for s in self._folded), dtype=np.int64, count=n)
        # Names sorted by length: a length window is one slice of this order.
        self._by_length = np.argsort(self._lengths, kind="stable")
        self._sorted_lengths = self._lengths[self._by_length]
        self._build_bigrams()

    def _build_bigrams(self) -> None:
        if not self._folded:
            self._vocab = np.zeros(0, np.int64)
            self._starts = np.zeros(1, np.int64)
            self._postings = np.zeros(0, np.int32)
            return
        cps = _codepoints("\x00".join(self._folded))
        owner = np.repeat(np.arange(len(self._folded), dtype=np.int32), self._lengths + 1)[: len(cps)]
        valid = (cps[:-1] != _SEPARATOR) & (cps[1:] != _SEPARATOR)
        grams = _bigram_codes(cps)[valid]
        owners = owner[:-1][valid]
        order = np.argsort(grams, kind="stable")
        grams, owners = grams[order], owners[order]
        self._vocab, first = np.unique(grams, return_index=True)
        self._starts = np.append(first, len(grams)).astype(np.int64)
        self._postings = owners.astype(np.int32)

    def __len__(self) -> int:
        return len(self._folded)

    def search(self, query: str, score_cutoff: float, limit: int) -> list[tuple[str, float]]:
        """Keys whose folded form scores at least ``score_cutoff`` (0-100) against the folded query."""
        q = fold_name(query)
        if not q or limit <= 0 or not self._folded:
            return []
        candidates = self._candidates(q, score_cutoff / 100.0)
        if len(candidates) == 0:
            return []
        choices = self._folded_array[candidates].tolist()
        found = process.extract(q, choices, scorer=fuzz.ratio, processor=None, score_cutoff=score_cutoff,
                                limit=None)
        scored = sorted(((score, self._folded[candidates[pos]], candidates[pos]) for _, score, pos in found),
                        key=lambda t: (-t[0], t[1]))
        out: list[tuple[str, float]] = []
        for score, _, idx in scored:
            for key in self._keys[idx]:
                out.append((key, float(score)))
                if len(out) >= limit:
                    return out
        return out

    # ------------------------------------------------------------------------------ candidates

    def _candidates(self, q: str, c: float) -> np.ndarray:
        n1 = len(q)
        if c <= 0:
            return np.arange(len(self._folded))
        lo_len = math.ceil(n1 * c / (2 - c) - 1e-9)
        hi_len = math.floor(n1 * (2 - c) / c + 1e-9)
        lengths = np.arange(max(lo_len, 1), hi_len + 1)
        if len(lengths) == 0:
            return np.zeros(0, np.int64)
        # Largest Indel distance allowed per candidate length, then the bigram lower bound per length.
        max_dist = np.floor((1 - c) * (n1 + lengths) + 1e-9)
        bound = np.maximum(n1, lengths) - 1 - 2 * max_dist
        parts: list[np.ndarray] = []
        scan = lengths[bound <= 0]
        if len(scan):
            # No positive bound at these lengths: every name of these lengths is a candidate.
            parts.append(self._names_with_lengths(int(scan.min()), int(scan.max())))
        positive = bound > 0
        if positive.any():
            parts.append(self._bigram_candidates(q, c, int(bound[positive].min()), int(lengths[positive].min()),
                                                 int(lengths[positive].max())))
        if not parts:
            return np.zeros(0, np.int64)
        return np.unique(np.concatenate(parts))

    def _names_with_lengths(self, lo: int, hi: int) -> np.ndarray:
        a = np.searchsorted(self._sorted_lengths, lo, side="left")
        b = np.searchsorted(self._sorted_lengths, hi, side="right")
        return self._by_length[a:b].astype(np.int64)

    def _bigram_candidates(self, q: str, c: float, min_shared: int, lo_len: int, hi_len: int) -> np.ndarray:
        """Names of length lo_len..hi_len sharing enough of the query's bigrams for their own length's bound."""
        grams = _bigram_codes(_codepoints(q)) if len(q) > 1 else np.zeros(0, np.int64)
        distinct, multiplicity = np.unique(grams, return_counts=True)
        if len(self._vocab) == 0 or len(distinct) == 0:
            return np.zeros(0, np.int64)
        pos = np.minimum(np.searchsorted(self._vocab, distinct), len(self._vocab) - 1)
        known = np.flatnonzero(self._vocab[pos] == distinct)
        # Shared bigrams per name: each posting counted once per occurrence in the query. That is at least
        # the multiset overlap, so the filter never loses a true match.
        postings = [self._postings[self._starts[pos[i]] : self._starts[pos[i] + 1]]
                    for i in known for _ in range(int(multiplicity[i]))]
        if not postings:
            return np.zeros(0, np.int64)
        shared = np.bincount(np.concatenate(postings), minlength=len(self._folded))
        cands = np.flatnonzero(shared >= min_shared)
        l2 = self._lengths[cands]
        max_dist = np.floor((1 - c) * (len(q) + l2) + 1e-9)
        bound = np.maximum(len(q), l2) - 1 - 2 * max_dist
        keep = (l2 >= lo_len) & (l2 <= hi_len) & (shared[cands] >= bound)
        return cands[keep].astype(np.int64)
