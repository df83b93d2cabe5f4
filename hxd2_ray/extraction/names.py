"""Entity names a question spells out: its word n-grams looked up among the index's entity names.

A small model's keywords can miss the very name a question asks about ("Qinghe 17" came back as "Research
affiliation", "Field of study"); the question text itself does not. Both the ``ppr`` chunk ranking (as walk
seeds) and the refusal gate (a question that names an entity of the index is never refused) use this.

Which n-grams: runs of up to ``max_words`` words that neither start nor end with a function word and look
like a name: a digit, a capital letter on a word other than the question's first, or two words or more.
A single lower-case word ("film", "river") is a common noun, and an index built by a small extractor has
entities named like that; matching them would let any question through the refusal gate. Chinese questions
are cut into words with jieba, and every run of 2+ characters is name-like.

How: exactly, by the merge stage's key of the n-gram (one lookup in the graph each, a dictionary read when the
graph is resident; hyphens and slashes also read as spaces: "Qinghe-17" names "Qinghe 17"); and, for n-grams of
at least ``FUZZY_MIN_CHARS`` characters (a short word fuzzy-matches too loosely: "Lilu" and "Lulu"), fuzzily
through the index's :class:`~hxd2_ray.retrieval.fuzzy.FuzzyNameIndex` (rapidfuzz ratio >= ``fuzzy_cutoff``).
Longest match first: the parts of a matched name are not names of their own.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.graph.read_structures import KeyLookup

__all__ = [
    "STOPWORDS",
    "WORD",
    "NamedEntity",
    "TitleIndex",
    "candidate_ngrams",
    "named_entities",
    "title_index",
    "title_key",
]

# Function and question words: an n-gram may hold them inside ("Bank of America") but not at its ends.
STOPWORDS = frozenset(
    """
a an the and or but nor of in on at to for from by with about as into onto over under than then that this these
those is are was were be been being am do does did done has have had having will would shall should can could may
might must not no yes it its it's he she they them their his her him we us our you your i me my mine what which
who whom whose when where why how whether if so such there here any some all each every both either neither
more most less least much many few other another same own very just also only too again ever even still yet
one two first second much long tall old new
""".split()
)

FUZZY_MIN_CHARS = 6
_JOINERS = re.compile(r"[-_/·]")
ZH_STOPWORDS = frozenset(
    ("的 了 是 在 和 与 及 或 比 它 他 她 们 这 那 哪 什么 多少 怎么 为什么 吗 呢 吧 有 个 请 问 谁 哪个").split()
)

_TAIL = re.compile(r"[!?.…]+")
WORD = re.compile(r"[^\W_](?:[\w'’&.-]*[^\W_])?")


@dataclass(frozen=True, slots=True)
class NamedEntity:
    text: str  # the n-gram as the question wrote it
    key: str  # the entity it names
    score: float  # 1.0 exact (same merge key); else rapidfuzz ratio / 100


@dataclass(frozen=True, slots=True)
class _Gram:
    text: str
    start: int  # first word
    end: int  # one past the last word
    fuzzy: bool  # long enough to match fuzzily
    tail: str = ""  # punctuation right after it in the question ("!", "?", "..."), tried as part of the name


def _title_word(span: list[tuple[str, int]], at: int, words: list[tuple[str, int]]) -> bool:
    """Whether the function word at ``span[at]`` belongs to a title: capitalised, not the question's first word,
    and the span has another capitalised word."""
    word, pos = span[at]
    if not word[:1].isupper() or pos == words[0][1]:
        return False
    return any(w[:1].isupper() for i, (w, _) in enumerate(span) if i != at)


def _en_ngrams(question: str, max_words: int) -> list[_Gram]:
    """Name-like n-grams, longest first (module docstring)."""
    words = [(m.group(), m.start()) for m in WORD.finditer(question)]
    out: list[_Gram] = []
    for n in range(min(max_words, len(words)), 0, -1):
        for i in range(len(words) - n + 1):
            span = words[i : i + n]
            first, last = span[0][0].lower(), span[-1][0].lower()
            capital = any(any(ch.isupper() for ch in w) for w, pos in span if pos != words[0][1])
            # A function word ends an n-gram only where it is written as part of a title: capitalised, past the
            # question's first word, in a name that has another capital ("From Up on Poppy Hill", "The Harvey
            # Girls", "Horton Hears a Who"); "the director of" stays out.
            if (first in STOPWORDS and not _title_word(span, 0, words)) or (
                last in STOPWORDS and not _title_word(span, len(span) - 1, words)
            ):
                continue
            # A digit marks a name ("Qinghe 17", "B-52") only beside letters: a bare number is not one.
            digit = any(ch.isdigit() for w, _ in span for ch in w) and any(ch.isalpha() for w, _ in span for ch in w)
            if not (n >= 2 or capital or digit):
                continue
            end = span[-1][1] + len(span[-1][0])
            text = question[span[0][1] : end]
            # Punctuation right after the words may be the name's own ("Fired Up!", "Quo Vadis, Baby?").
            tail = _TAIL.match(question, end)
            out.append(_Gram(text, i, i + n, len(text) >= FUZZY_MIN_CHARS, tail.group() if tail else ""))
    return out


def _zh_ngrams(question: str, max_words: int) -> list[_Gram]:
    import jieba  # noqa: PLC0415 - about 0.2 s (pkg_resources), and its dictionary: only for a Chinese question

    words = [w for w in jieba.lcut(question) if w.strip() and not re.fullmatch(r"\W+", w)]
    out: list[_Gram] = []
    for n in range(min(max_words, len(words)), 0, -1):
        for i in range(len(words) - n + 1):
            if words[i] in ZH_STOPWORDS or words[i + n - 1] in ZH_STOPWORDS:
                continue
            text = "".join(words[i : i + n])
            if len(text) >= 2 and not text.isdigit():
                out.append(_Gram(text, i, i + n, len(text) >= FUZZY_MIN_CHARS // 2))  # a CJK character ~ 2 letters
    return out


def _grams(question: str, max_words: int) -> list[_Gram]:
    return (_zh_ngrams if detect_language(question) == "zh" else _en_ngrams)(question, max_words)


def candidate_ngrams(question: str, max_words: int = 4) -> list[tuple[str, bool]]:
    """The question's name-like n-grams, longest first, each once: (text, long enough to match fuzzily)."""
    return list(dict.fromkeys((g.text, g.fuzzy) for g in _grams(question, max_words)))


def named_entities(
    question: str,
    graph: Any,  # GraphStore: get_entities(keys)
    names: Any | None = None,  # FuzzyNameIndex: search(text, cutoff, limit); None: exact names only
    *,
    fuzzy_cutoff: float = 90.0,
    max_words: int = 4,
    fuzzy_limit: int = 3,
) -> list[NamedEntity]:
    """Entities the question names, best first (score, then longer n-gram); one entry per entity.

    Longest match first: once an n-gram names an entity, the shorter n-grams inside it name nothing more
    ("Tampa Bay Buccaneers" matched, "Tampa" and "Bay" are not looked at), as a reader links a name.
    """
    grams = _grams(question, max_words)
    if not grams:
        return []
    variants = {
        g: {normalize_name(g.text), normalize_name(_JOINERS.sub(" ", g.text))}
        | ({normalize_name(g.text + g.tail)} if g.tail else set())
        for g in grams
    }
    known = {row["key"] for row in graph.get_entities(list({k for keys in variants.values() for k in keys}))}
    covered: set[int] = set()
    found: dict[str, NamedEntity] = {}

    def take(gram: _Gram, key: str, score: float) -> None:
        # A name that takes the punctuation after the words spells more of the question ("Moulin Rouge!" beside
        # "Moulin Rouge"): its text includes it, so it ranks first.
        text = gram.text + gram.tail if gram.tail and key == normalize_name(gram.text + gram.tail) else gram.text
        if key not in found or found[key].score < score:
            found[key] = NamedEntity(text=text, key=key, score=score)

    for gram in grams:  # longest first
        if covered.issuperset(range(gram.start, gram.end)):
            continue
        hits = [k for k in sorted(variants[gram]) if k in known]
        if not hits and names is not None and gram.fuzzy and fuzzy_cutoff < 100:
            fuzzy = names.search(gram.text, fuzzy_cutoff, fuzzy_limit)
            for key, ratio in fuzzy:
                take(gram, key, ratio / 100.0)
            hits_fuzzy = bool(fuzzy)
        else:
            hits_fuzzy = False
        for key in hits:
            take(gram, key, 1.0)
        if hits or hits_fuzzy:
            covered.update(range(gram.start, gram.end))
    return sorted(found.values(), key=lambda m: (-m.score, -len(m.text), m.key))


_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")


def title_key(title: str | None) -> str:
    """A document title as a name: its merge key, a trailing "(disambiguation)" dropped ("Mark King (musician)" is
    named by "Mark King"); "" for no title."""
    return normalize_name(_DISAMBIGUATION.sub("", title or ""))


class TitleIndex:
    """Document titles as names: normalised title (a trailing "(disambiguation)" dropped) -> chunk offsets.
    Quacks like a graph for :func:`named_entities` (``get_entities``). Written with the generation's read
    structures (:meth:`write`) and memory-mapped by its readers (:meth:`open`)."""

    def __init__(self, documents: Any) -> None:
        self.chunks: Any = {}  # title key -> chunk offsets (a dict, or _MappedTitleChunks once opened)
        for title, offsets in documents:
            key = title_key(title)
            if key:
                self.chunks.setdefault(key, []).extend(int(o) for o in offsets)

    def get_entities(self, keys: Any) -> list[dict[str, str]]:
        return [{"key": k} for k in keys if k in self.chunks]

    def write(self, folder: str | os.PathLike[str]) -> None:
        root = Path(folder)
        keys = list(self.chunks)
        column = pa.array(keys, pa.large_string())
        lookup = KeyLookup.build(column)
        ptr = np.zeros(len(keys) + 1, np.int64)
        np.cumsum([len(self.chunks[k]) for k in keys], out=ptr[1:])
        flat = np.asarray([o for k in keys for o in self.chunks[k]], np.int64)
        table = pa.table({"key": column})
        with pa.OSFile(str(root / "titles_keys.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
            out.write_table(table, max_chunksize=max(table.num_rows, 1))
        for name, array in (("hash", lookup.hashes), ("hash_row", lookup.rows), ("ptr", ptr), ("chunks", flat)):
            np.save(root / f"titles_{name}.npy", array)

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> "TitleIndex | None":
        """The title index written in ``folder``, memory-mapped; None where there is none (an older index)."""
        root = Path(folder)
        if not (root / "titles_keys.arrow").is_file():
            return None
        column = pa.ipc.open_file(pa.memory_map(str(root / "titles_keys.arrow"), "r")).read_all().column("key")
        arrays = {name: _mapped(root / f"titles_{name}.npy") for name in ("hash", "hash_row", "ptr", "chunks")}
        index = cls([])
        index.chunks = _MappedTitleChunks(
            KeyLookup(arrays["hash"], arrays["hash_row"], column.combine_chunks()), arrays["ptr"], arrays["chunks"]
        )
        return index


def _mapped(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r")
    except ValueError:  # numpy cannot map an array of no elements
        return np.load(path)


class _MappedTitleChunks:
    """Title key -> chunk offsets over mapped arrays: ``in``, ``[]`` and ``get`` as a dict answers them."""

    def __init__(self, lookup: KeyLookup, ptr: np.ndarray, chunks: np.ndarray):
        self._lookup, self._ptr, self._chunks = lookup, ptr, chunks

    def get(self, key: str, default: Any = None) -> Any:
        row = self._lookup.get(key)
        if row is None:
            return default
        return [int(o) for o in self._chunks[self._ptr[row] : self._ptr[row + 1]]]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._lookup.get(key) is not None

    def __getitem__(self, key: str) -> list[int]:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __len__(self) -> int:
        return len(self._lookup)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lookup.column.to_pylist())


_TITLES: "weakref.WeakKeyDictionary[object, TitleIndex]" = weakref.WeakKeyDictionary()
_TITLES_LOCK = threading.Lock()


def title_index(graph: Any) -> TitleIndex:
    """The title index of a resident graph, built once and kept with it (empty for a graph without documents)."""
    with _TITLES_LOCK:
        index = _TITLES.get(graph)
        if index is None:
            # Mapped from the generation's read structures where the index job wrote it; built otherwise.
            folder = getattr(getattr(graph, "reads", None), "folder", None)
            index = TitleIndex.open(folder) if folder is not None else None
            if index is None:
                docs = getattr(graph, "document_chunks", None)
                index = TitleIndex(docs() if callable(docs) else [])
            _TITLES[graph] = index
        return index
