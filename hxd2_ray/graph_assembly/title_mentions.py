"""NAMES_TITLE edges: a chunk whose text names another document's title, found once when an index is built.

A corpus of articles links itself: a Wikipedia passage about a game says "created by Lester Smith", and "Lester
Smith" is the title of another passage. A bridge question (HotpotQA, 2Wiki, MuSiQue) is answered by exactly that
pair, and the first passage is what the question resembles. An extractor should see the link as a shared entity,
but a small one often does not (on HotpotQA's 994 passages SmolLM2-135M extracts 134 relations for 1,207 chunks).
The text does, whatever the extractor: this module reads every chunk for the titles of the other documents and
records each (chunk, document) pair. Only the ``ppr`` chunk ranking walks them (:mod:`hxd2_ray.retrieval.ppr`: a
title node between the naming chunks and the named document's chunks).

How a title is found in a text: as a run of whole words (the query side's word pattern) whose merge key equals
the title's (:func:`hxd2_ray.extraction.names.title_key`: "Mark King (musician)" is named by "Mark King"), longest
run first and left to right, so "Dragon Dice" does not also name "Dragon"; and only a run written as a name: a
word in it that is no function word carries a capital letter, or mixes digits and letters ("The Simpsons",
"B-52", but not "the band" for a document titled "The Band", nor a lower-case phrase). Only word positions whose
word starts some title are tried, so the cost is one dictionary lookup per word plus a few per candidate:
~6,000-7,000 chunks of 150 words a second on one core (``bench/title_mentions_build.py``: 100,000 chunks in
16 s). A Chinese chunk (no case, no spaces) is read with the question reader instead
(:func:`~hxd2_ray.extraction.names.named_entities`, jieba words).

They are derived from the chunks and documents alone, and every build (from scratch, or an incremental update,
which rewrites the graph) recomputes them from all of both, so they always agree with what the index holds.
"""

from __future__ import annotations

import re
import time
from typing import Callable, Iterable

import pyarrow as pa

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.config import TitleMentionConfig
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.extraction.names import STOPWORDS, WORD, named_entities, title_key
from hxd2_ray.graph.schema import TITLE_MENTIONS

__all__ = ["TITLE_MENTIONS", "title_mention_edges"]

Progress = Callable[[str], None]


class _Titles:
    """Title keys -> documents, with the first word and the word count of every title for the scan; shaped as the
    graph :func:`named_entities` looks names up in (``get_entities``) for Chinese chunks."""

    def __init__(self, documents: Iterable[tuple[str, str | None]], max_words: int) -> None:
        self.docs: dict[str, list[str]] = {}
        self.lengths: dict[str, list[int]] = {}  # first word's key -> word counts of titles starting with it
        self.max_words = max_words
        for doc_id, title in documents:
            key = title_key(title)
            words = [normalize_name(w) for w in WORD.findall(key)]
            if not key or not words or len(words) > max_words:
                continue
            self.docs.setdefault(key, []).append(doc_id)
            lengths = self.lengths.setdefault(words[0], [])
            if len(words) not in lengths:
                lengths.append(len(words))
                lengths.sort(reverse=True)

    def get_entities(self, keys: Iterable[str]) -> list[dict[str, str]]:
        return [{"key": k} for k in keys if k in self.docs]

    def named_in(self, text: str) -> set[str]:
        """Keys of the titles ``text`` names (module docstring)."""
        if detect_language(text) == "zh":
            return {n.key for n in named_entities(text, self, None, max_words=self.max_words)}
        words = list(WORD.finditer(text))
        keys = [normalize_name(m.group()) for m in words]
        found: set[str] = set()
        i = 0
        while i < len(words):
            step = 1
            for n in self.lengths.get(keys[i], ()):  # longest first
                if i + n > len(words):
                    continue
                span = words[i : i + n]
                key = keys[i] if n == 1 else normalize_name(text[span[0].start() : span[-1].end()])
                if key in self.docs and _written_as_name(span):
                    found.add(key)
                    step = n
                    break
            i += step
        return found


def _written_as_name(span: list[re.Match[str]]) -> bool:
    for m in span:
        word = m.group()
        if any(ch.isupper() for ch in word) and word.lower() not in STOPWORDS:
            return True
        if any(ch.isdigit() for ch in word) and any(ch.isalpha() for ch in word):
            return True
    return False


def title_mention_edges(
    documents: pa.Table,  # id, title
    chunks: pa.Table,  # id, doc_id, text
    cfg: TitleMentionConfig,
    *,
    progress: Progress | None = None,
    log_every_s: float = 30.0,
) -> pa.Table:
    """NAMES_TITLE rows (``schema.TITLE_MENTIONS``: chunk id, document id), sorted: each chunk with every other
    document whose title its text names (a chunk naming its own document's title adds nothing). Empty when
    ``cfg.enabled`` is off or no document has a title; a title named by more than ``cfg.max_naming_chunks`` chunks
    gets no rows."""
    if not cfg.enabled or not documents.num_rows or not chunks.num_rows:
        return TITLE_MENTIONS.empty_table()
    titles = _Titles(zip(documents["id"].to_pylist(), documents["title"].to_pylist()), cfg.max_words)
    if not titles.docs:
        return TITLE_MENTIONS.empty_table()
    naming: dict[str, list[tuple[str, str]]] = {}  # title key -> (chunk id, its document)
    ids, docs, texts = (chunks[c].to_pylist() for c in ("id", "doc_id", "text"))
    started = last = time.perf_counter()
    for done, (cid, doc, text) in enumerate(zip(ids, docs, texts), start=1):
        for key in titles.named_in(text or ""):
            naming.setdefault(key, []).append((cid, doc))
        now = time.perf_counter()
        if progress is not None and now - last >= log_every_s:
            progress(f"title mentions: read {done:,}/{len(ids):,} chunks ({now - started:,.0f}s)")
            last = now
    rows = sorted(
        {
            (cid, named_doc)
            for key, found in naming.items()
            if len(found) <= cfg.max_naming_chunks
            for cid, doc in found
            for named_doc in titles.docs[key]
            if named_doc != doc
        }
    )
    return pa.table({"chunk_id": [c for c, _ in rows], "doc_id": [d for _, d in rows]}, schema=TITLE_MENTIONS)
