"""Near-miss entity names ("Thomas Sudhoff" -> "Thomas Südhof") by rapidfuzz, fast enough for a million names.

Names are folded (accents stripped, casefolded, spaces collapsed) and compared with ``fuzz.ratio``, the
normalised Indel similarity ``1 - d / (len1 + len2)``. A full rapidfuzz scan costs ~70 ms per keyword at one
million names, so candidates are found first with bigram and trigram indexes, using bounds that exclude no true match
(the result equals a full scan; the unit tests check that against brute force). With ``S = len1 + len2`` and
``D = floor((1 - c) * S)`` the largest Indel distance that still scores ``c``, a match has a common
subsequence of length ``l >= ceil((S - D) / 2)``, and:

* length: ``l <= min(len1, len2)``, so only lengths where that is possible are looked at;
* shared bigrams: of the ``l - 1`` bigrams of the common subsequence, each deleted character breaks at most
  one, in either string, so the two names share at least ``l - 1 - (S - 2l) = 3l - 1 - S`` bigrams (as a
  multiset);
* shared trigrams: likewise each deleted character breaks at most two of the ``l - 2`` trigrams, so the names
  share at least ``5l - 2 - 2S`` trigrams. That bound is lower but trigrams are far rarer: per length, the
  filter whose counted postings are fewer is used (``bench/fuzzy_names.py`` at ten million names: 7.4 ms a
  keyword against 24.7 ms by bigrams alone);
* counting: the k-th occurrence of an n-gram in a name is its own term, so shared terms are exactly the
  multiset overlap. Per candidate length, the query terms with the fewest postings in that length are counted
  (``bincount``, or ``unique`` when they are few against the length's names); the few with the most (fewer than
  the bound) are skipped, since a name sharing ``bound`` terms shares at least ``bound - skipped`` counted ones,
  and only names reaching that are looked up (binary search) in the skipped terms' postings to get their exact
  count.

Names are numbered by length, so one length's names are one range of numbers and one slice of each
(sorted) posting list. Lengths whose bound is not positive (very short strings, low cutoffs) are scanned in
full.
"""

from __future__ import annotations

import json
import math
import os
import unicodedata
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
from rapidfuzz import fuzz, process

_SEPARATOR = 0  # code point that joins names in the build buffer; never inside a folded name
_META = "names.json"  # written last by FuzzyNameIndex.write
_ARRAYS = ("lengths", "length_start", "vocab", "starts", "postings", "key_ptr")
_TRIGRAM_ARRAYS = ("alphabet", "tri_vocab", "tri_starts", "tri_postings")  # absent in indexes before trigrams


def _mapped_column(path: Path, name: str) -> pa.Array:
    table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()  # zero-copy: points into the mapping
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def fold_name(text: str) -> str:
    """Comparison form of a name: NFKD without combining marks, casefolded, single spaces, no NULs."""
    if text.isascii():  # NFKD and NFKC leave ASCII alone and it has no combining marks: same result, faster
        return " ".join(text.replace("\x00", " ").lower().split())
    decomposed = unicodedata.normalize("NFKD", text.replace("\x00", " "))
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(unicodedata.normalize("NFKC", stripped).casefold().split())


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def _stable_order(codes: np.ndarray, bits: int) -> np.ndarray:
    """Stable argsort of non-negative codes below ``2**bits``: LSD radix passes of 16 bits (numpy sorts
    16-bit keys stably in linear time) where that is cheaper than a comparison sort."""
    if bits > 48:
        return np.argsort(codes, kind="stable")
    order = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
    for shift in range(16, bits, 16):
        digit = ((codes[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    return order


def _gram_terms(
    dense: np.ndarray, separator: np.ndarray, lengths: np.ndarray, n: int, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Postings of every (n-gram, occurrence) term of the names joined in ``dense`` (letter numbers of ``width``
    bits; ``separator`` marks the joins): the k-th occurrence of an n-gram in a name is its own term, so counting
    shared terms counts the multiset overlap of n-grams exactly. Returns the terms' n-gram codes and occurrences
    (sorted), the offsets of each term's postings and the postings (names ascending within a term)."""
    span = len(dense) - n + 1
    valid = np.ones(max(span, 0), bool)
    for i in range(n):
        valid &= ~separator[i : i + span]
    code_type: type[np.signedinteger] = np.int32 if n * width <= 31 else np.int64  # int32: half the memory
    grams: np.ndarray = np.zeros(max(span, 0), code_type)
    for i in range(n):
        grams |= dense[i : i + span].astype(code_type) << (width * (n - 1 - i))
    grams = grams[valid]
    owners = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths + 1)[:span][valid]
    del valid
    order = _stable_order(grams, n * width)  # stable: names ascending within an n-gram
    grams, owners = grams[order], owners[order]
    del order
    # Repeated postings (the same n-gram again in the same name, adjacent now) become later occurrences.
    repeat = np.flatnonzero((grams[1:] == grams[:-1]) & (owners[1:] == owners[:-1])) + 1
    chain = np.concatenate(([True], np.diff(repeat) != 1))  # repeats right after a repeat: one run
    occurrence = np.arange(len(repeat)) - np.flatnonzero(chain)[np.cumsum(chain) - 1] + 1
    rep_grams, rep_owners = grams[repeat], owners[repeat]
    if len(repeat):
        keep = np.ones(len(grams), bool)
        keep[repeat] = False
        grams, owners = grams[keep], owners[keep]
        del keep
        by_term = np.lexsort((occurrence, rep_grams))  # stable: names ascending within a term
        rep_grams, rep_owners, occurrence = rep_grams[by_term], rep_owners[by_term], occurrence[by_term]
    # Terms: (n-gram, 0) from the first occurrences, (n-gram, k) from the repeats; postings per term in
    # (n-gram, occurrence) order, each n-gram's later occurrences right after its first ones.
    first = np.flatnonzero(np.concatenate(([True], grams[1:] != grams[:-1])))[: len(grams)]
    rep_first = np.flatnonzero(
        np.concatenate(([True], (rep_grams[1:] != rep_grams[:-1]) | (occurrence[1:] != occurrence[:-1])))
    )[: len(repeat)]
    term_gram = np.concatenate((grams[first], rep_grams[rep_first]))
    term_occ = np.concatenate((np.zeros(len(first), np.int64), occurrence[rep_first]))
    term_size = np.concatenate((np.diff(np.append(first, len(grams))), np.diff(np.append(rep_first, len(repeat)))))
    postings = np.insert(owners, np.searchsorted(grams, rep_grams, side="right"), rep_owners)
    term_order = np.lexsort((term_occ, term_gram))
    starts = np.concatenate(([0], np.cumsum(term_size[term_order]))).astype(np.int64)
    return term_gram[term_order].astype(np.int64), term_occ[term_order].astype(np.int64), starts, postings


class FuzzyNameIndex:
    """Folded entity keys with bigram and trigram indexes; :meth:`search` returns ``(key, ratio)`` best first."""

    # Per length, the query terms with the most postings are checked per candidate instead of counted.
    _MAX_SKIPPED = 2
    # Which filter counts a length: the one reading fewer postings ("cheaper"), or one forced ("bigrams",
    # "trigrams": the tests and bench/fuzzy_names.py compare them).
    gram_filter: str = "cheaper"

    def __init__(self, keys: Sequence[str]):
        by_folded: dict[str, list[str] | str] = {}
        for key in keys:
            folded = fold_name(key)
            if not folded:
                continue
            if folded == key:
                folded = key  # one string object for both (already-folded keys are the common case)
            seen = by_folded.get(folded)
            if seen is None:
                by_folded[folded] = key
            elif isinstance(seen, str):
                by_folded[folded] = [seen, key]
            else:
                seen.append(key)
        self.size = len(keys)
        n = len(by_folded)
        lengths = np.fromiter((len(s) for s in by_folded), dtype=np.int64, count=n)
        # Names are numbered by length (stable): one length's names are one range of numbers.
        order = np.argsort(lengths, kind="stable")
        # (fromiter: np.array would turn equal-length key lists into a 2-D array)
        folded_all = np.fromiter(by_folded, dtype=object, count=n)
        groups = np.fromiter(by_folded.values(), dtype=object, count=n)
        del by_folded
        folded = folded_all[order].tolist()
        # A folded form's keys: one, or several sorted; flattened, with each name's span in _key_ptr.
        key_lists = [(g,) if isinstance(g, str) else tuple(sorted(g)) for g in groups[order].tolist()]
        del folded_all, groups
        self._key_ptr = np.zeros(n + 1, np.int64)
        np.cumsum([len(k) for k in key_lists], out=self._key_ptr[1:])
        self._key_flat = pa.array([k for ks in key_lists for k in ks], pa.large_string())
        del key_lists
        self._lengths = lengths[order]
        max_len = int(self._lengths[-1]) if n else 0
        # _length_start[L]: the first name of length >= L (L = 0 .. max_len + 1).
        self._length_start = np.searchsorted(self._lengths, np.arange(max_len + 2), side="left").astype(np.int64)
        self._build_grams(folded)
        self._folded = pa.array(folded, pa.large_string())

    # -- files: written once per generation, memory-mapped by every reader -----------------------------------

    def write(self, folder: str | os.PathLike[str]) -> None:
        """Write this index into ``folder`` (beside the graph's read structures) for :meth:`open` to map."""
        root = Path(folder)
        root.mkdir(parents=True, exist_ok=True)
        table = pa.table({"folded": self._folded})
        keys = pa.table({"key": self._key_flat})
        for name, t in (("names_folded", table), ("names_keys", keys)):
            with pa.OSFile(str(root / f"{name}.arrow"), "wb") as sink, pa.ipc.new_file(sink, t.schema) as out:
                out.write_table(t.combine_chunks(), max_chunksize=max(t.num_rows, 1))
        for name in _ARRAYS + (_TRIGRAM_ARRAYS if self._tri_width else ()):
            np.save(root / f"names_{name}.npy", np.ascontiguousarray(getattr(self, f"_{name}")))
        meta = {"size": self.size, "trigram_width": self._tri_width}
        (root / _META).write_text(json.dumps(meta) + "\n", encoding="utf-8")

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> "FuzzyNameIndex | None":
        """The index written in ``folder``, memory-mapped; None when there is none (an older index)."""
        root = Path(folder)
        if not (root / _META).is_file():
            return None
        index = cls.__new__(cls)
        meta = json.loads((root / _META).read_text(encoding="utf-8"))
        index.size = int(meta["size"])
        tri_width = int(meta.get("trigram_width", 0))  # an index written before trigrams has none
        setattr(index, "_tri_width", tri_width)
        for name in _ARRAYS + (_TRIGRAM_ARRAYS if tri_width else ()):
            path = root / f"names_{name}.npy"
            try:
                setattr(index, f"_{name}", np.load(path, mmap_mode="r"))
            except ValueError:  # numpy cannot map an array of no elements
                setattr(index, f"_{name}", np.load(path))
        setattr(index, "_folded", _mapped_column(root / "names_folded.arrow", "folded"))
        setattr(index, "_key_flat", _mapped_column(root / "names_keys.arrow", "key"))
        return index

    def _build_grams(self, folded: list[str]) -> None:
        """Bigram and trigram postings of every name (see :func:`_gram_terms`). Bigram terms are kept as code
        points (the format older indexes wrote); trigram terms as dense letter numbers, which needs an alphabet
        of at most 2**16 letters and fewer than 2**15 repeats of one trigram in a name (else no trigram index)."""
        n = len(folded)
        self._vocab = np.zeros(0, np.int64)
        self._starts = np.zeros(1, np.int64)
        self._postings = np.zeros(0, np.int32)
        self._tri_width = 0  # 0: no trigram index
        if n == 0 or self._lengths[-1] < 2:  # no name has a bigram
            return
        cps = _codepoints("\x00".join(folded))
        separator = cps == _SEPARATOR
        # Dense letter numbers (code-point order kept), so a gram code is small and few 16-bit radix passes sort it.
        present = np.bincount(cps) > 0
        present[_SEPARATOR] = False
        self._alphabet = np.flatnonzero(present).astype(np.int64)
        width = max(1, int(len(self._alphabet) - 1).bit_length())
        dense = (np.cumsum(present) - 1).astype(np.int32)[cps]  # fewer letters than code points (2**21)
        del cps, present
        gram, occ, self._starts, self._postings = _gram_terms(dense, separator, self._lengths, 2, width)
        mask = (1 << width) - 1
        # Terms as (first code point, second code point, occurrence), sorted (dense numbers keep code-point order).
        self._vocab = (self._alphabet[gram >> width] << 42) | (self._alphabet[gram & mask] << 21) | occ
        if self._lengths[-1] < 3 or 3 * width > 48:
            return
        gram, occ, tri_starts, tri_postings = _gram_terms(dense, separator, self._lengths, 3, width)
        if len(occ) and int(occ.max()) >= 1 << (63 - 3 * width):
            return
        self._tri_width = width
        self._tri_vocab = (gram << (63 - 3 * width)) | occ
        self._tri_starts, self._tri_postings = tri_starts, tri_postings

    def __len__(self) -> int:
        return len(self._folded)

    def search(self, query: str, score_cutoff: float, limit: int) -> list[tuple[str, float]]:
        """Keys whose folded form scores at least ``score_cutoff`` (0-100) against the folded query."""
        q = fold_name(query)
        if not q or limit <= 0 or not len(self._folded):
            return []
        candidates = self._candidates(q, score_cutoff / 100.0)
        if len(candidates) == 0:
            return []
        folded = self._folded.take(pa.array(candidates, pa.int64())).to_pylist()
        found = process.extract(q, folded, scorer=fuzz.ratio, processor=None, score_cutoff=score_cutoff, limit=None)
        scored = sorted(((score, folded[pos], candidates[pos]) for _, score, pos in found), key=lambda t: (-t[0], t[1]))
        out: list[tuple[str, float]] = []
        for score, _, idx in scored:
            lo, hi = int(self._key_ptr[idx]), int(self._key_ptr[idx + 1])
            for key in self._key_flat.slice(lo, hi - lo).to_pylist():
                out.append((key, float(score)))
                if len(out) >= limit:
                    return out
        return out

    # ------------------------------------------------------------------------------ candidates

    def postings(self) -> dict[str, int]:
        """Postings written per filter (trigrams: 0 for an index written before them)."""
        return {"bigrams": len(self._postings), "trigrams": len(self._tri_postings) if self._tri_width else 0}

    def candidate_count(self, query: str, score_cutoff: float) -> int:
        """How many names the filter leaves for rapidfuzz to score (the matches among them)."""
        q = fold_name(query)
        return len(self._candidates(q, score_cutoff / 100.0)) if q and len(self._folded) else 0

    def _candidates(self, q: str, c: float) -> np.ndarray:
        """Numbers of the names that may score ``c`` against ``q`` (a superset of the matches), ascending."""
        n1 = len(q)
        if c <= 0:
            return np.arange(len(self._folded))
        max_len = len(self._length_start) - 2
        lo_len = max(math.ceil(n1 * c / (2 - c) - 1e-9), 1)
        hi_len = min(math.floor(n1 * (2 - c) / c + 1e-9), max_len)
        if lo_len > hi_len:
            return np.zeros(0, np.int64)
        lengths = np.arange(lo_len, hi_len + 1)
        total = n1 + lengths
        max_dist = np.floor((1 - c) * total + 1e-9).astype(np.int64)
        common = (total - max_dist + 1) // 2  # shortest common subsequence of a match
        feasible = common <= np.minimum(n1, lengths)
        bound2 = 3 * common - 1 - total  # bigrams a match shares with the query
        bound3 = 5 * common - 2 - 2 * total  # trigrams: each deleted character breaks at most two
        parts: list[np.ndarray] = []
        starts = self._length_start
        for length in lengths[feasible & (bound2 <= 0)]:
            # No positive bound: every name of this length is a candidate.
            parts.append(np.arange(starts[length], starts[length + 1]))
        counted = feasible & (bound2 > 0)
        if counted.any():
            lengths, bound2, bound3 = lengths[counted], bound2[counted], bound3[counted]
            plan2 = self._plan(self._bigram_terms(q), self._vocab, self._starts, self._postings, lengths, bound2)
            plan3 = None
            if self._tri_width and (bound3 > 0).any():
                terms = self._trigram_terms(q)
                plan3 = self._plan(terms, self._tri_vocab, self._tri_starts, self._tri_postings, lengths, bound3)
            for j in range(len(lengths)):
                # Per length, the filter that counts fewer postings (trigrams are rarer, their bound lower).
                plan = plan2
                if plan3 is not None and bound3[j] > 0 and self.gram_filter != "bigrams":
                    if self.gram_filter == "trigrams" or plan3.cost(j) < plan2.cost(j):
                        plan = plan3
                first, end = int(self._length_start[lengths[j]]), int(self._length_start[lengths[j] + 1])
                found = plan.count(j, first, end - first)
                if found is not None:
                    parts.append(found)
        if not parts:
            return np.zeros(0, np.int64)
        return np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0]

    def _bigram_terms(self, q: str) -> np.ndarray:
        """The query's bigram terms, encoded as the index's bigram vocabulary (code points, occurrence)."""
        cps = _codepoints(q).astype(np.int64)
        return _with_occurrence(np.sort((cps[:-1] << 21) | cps[1:]), 21)

    def _trigram_terms(self, q: str) -> np.ndarray:
        """The query's trigram terms as the index's trigram vocabulary; trigrams with a letter no name has are
        left out (no name shares them)."""
        width = self._tri_width
        cps = _codepoints(q).astype(np.int64)
        if len(cps) < 3:
            return np.zeros(0, np.int64)
        dense = np.minimum(np.searchsorted(self._alphabet, cps), len(self._alphabet) - 1)
        known = self._alphabet[dense] == cps
        grams = (dense[:-2] << (2 * width)) | (dense[1:-1] << width) | dense[2:]
        grams = grams[known[:-2] & known[1:-1] & known[2:]]
        return _with_occurrence(np.sort(grams), 63 - 3 * width)

    def _plan(
        self,
        terms: np.ndarray,
        vocab: np.ndarray,
        starts: np.ndarray,
        postings: np.ndarray,
        lengths: np.ndarray,
        bound: np.ndarray,
    ) -> "_CountPlan":
        """Where each of ``terms``' postings in names of each length lie, and which are counted."""
        if len(vocab) and len(terms):
            pos = np.minimum(np.searchsorted(vocab, terms), len(vocab) - 1)
            pos = pos[vocab[pos] == terms]  # terms no name has cannot be shared
        else:
            pos = np.zeros(0, np.int64)
        # Offsets into postings of term i's postings in names of length lengths[j]: lo[i, j] .. hi[i, j].
        # (int32 like the postings: searchsorted would otherwise copy each posting list to int64)
        edges = np.concatenate((self._length_start[lengths], self._length_start[lengths + 1])).astype(np.int32)
        cut = np.empty((len(pos), len(edges)), np.int64)
        for i, p in enumerate(pos):
            a, b = starts[p], starts[p + 1]
            cut[i] = a + np.searchsorted(postings[a:b], edges)
        return _CountPlan(postings, cut[:, : len(lengths)], cut[:, len(lengths) :], lengths, bound, self._MAX_SKIPPED)


def _with_occurrence(sorted_grams: np.ndarray, bits: int) -> np.ndarray:
    """Terms ``gram << bits | occurrence`` of sorted n-gram codes: the k-th equal one is occurrence k - 1."""
    new_run = np.concatenate(([True], sorted_grams[1:] != sorted_grams[:-1]))
    occurrence = np.arange(len(sorted_grams)) - np.flatnonzero(new_run)[np.cumsum(new_run) - 1]
    return (sorted_grams << bits) | occurrence


class _CountPlan:
    """One n-gram filter over some lengths: term i's postings in names of length ``lengths[j]`` are
    ``postings[lo[i, j]:hi[i, j]]``; a name is a candidate when it shares ``bound[j]`` terms with the query.

    Per length, the terms with most postings are left out of the count (at most ``max_skipped``, fewer than the
    bound): a name needs ``bound - skipped`` counted terms to be checked against the skipped ones."""

    def __init__(
        self,
        postings: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        lengths: np.ndarray,
        bound: np.ndarray,
        max_skipped: int,
    ):
        self.postings, self.lo, self.hi, self.lengths, self.bound = postings, lo, hi, lengths, bound
        self.sizes = hi - lo
        rank = np.argsort(np.argsort(-self.sizes, axis=0, kind="stable"), axis=0, kind="stable")
        self.skipped = rank < np.minimum(bound - 1, max_skipped)[None, :]
        self.threshold = bound - self.skipped.sum(axis=0)

    def cost(self, j: int) -> int:
        """Postings counted for length ``lengths[j]``."""
        return int(self.sizes[~self.skipped[:, j], j].sum())

    def count(self, j: int, first: int, size: int) -> np.ndarray | None:
        """Candidates of length ``lengths[j]``, whose ``size`` names are numbered from ``first``; None when a match
        would need more shared terms than the query has."""
        if len(self.sizes) < self.bound[j]:
            return None
        postings, lo, hi, sizes, skipped = self.postings, self.lo, self.hi, self.sizes, self.skipped
        counted = [postings[lo[i, j] : hi[i, j]] for i in np.flatnonzero(~skipped[:, j] & (sizes[:, j] > 0))]
        if not counted:
            return None
        # One length at a time: its names are one range of numbers, counted in an array of that size, or by
        # sorting when the postings are few against it (trigrams' usually are).
        flat = np.concatenate(counted) - first
        if len(flat) * 16 < size:
            names, shared = np.unique(flat, return_counts=True)
            keep = shared >= self.threshold[j]
            found, total = names[keep], shared[keep]
        else:
            per_name = np.bincount(flat, minlength=size)
            found = np.flatnonzero(per_name >= self.threshold[j])
            total = per_name[found]
        if len(found) and self.threshold[j] < self.bound[j]:
            at_names = (found + first).astype(np.int32)
            for i in np.flatnonzero(skipped[:, j] & (sizes[:, j] > 0)):
                part = postings[lo[i, j] : hi[i, j]]
                at = np.minimum(np.searchsorted(part, at_names), len(part) - 1)
                total = total + (part[at] == at_names)
            found = found[total >= self.bound[j]]
        return found.astype(np.int64) + first
