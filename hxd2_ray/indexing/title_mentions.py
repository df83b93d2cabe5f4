"""NAMES_TITLE edges: a chunk whose text names another document's title, found once when an index is built.

A corpus of articles links itself: a Wikipedia passage about a game says "created by Lester Smith", and "Lester
Smith" is the title of another passage. A bridge question (HotpotQA, 2Wiki, MuSiQue) is answered by exactly that
pair, and the first passage is what the question resembles. An extractor should see the link as a shared entity,
but a small one often does not (on HotpotQA's 994 passages SmolLM2-135M extracts 134 relations for 1,207 chunks).
The text does, whatever the extractor: this module reads every chunk for the titles of the other documents, the
way the query side reads a question for names (:func:`hxd2_ray.retrieval.names.named_entities`: name-like word
n-grams up to ``max_words`` words, exact merge key, longest match first, a trailing "(disambiguation)" of a title
dropped), and records each (chunk, document) pair. Only the ``ppr`` chunk ranking walks them
(:mod:`hxd2_ray.retrieval.ppr`: a title node between the naming chunks and the named document's chunks).

They are derived from the chunks and documents alone, and every build (from scratch, or an incremental update,
which rewrites the graph) recomputes them from all of both, so they always agree with what the index holds.
Cost: one pass over the text, ~0.6 ms per HotpotQA chunk on one core (1,207 chunks: 0.7 s).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

import pyarrow as pa

from hxd2_ray.config import TitleMentionConfig
from hxd2_ray.graph.schema import TITLE_MENTIONS
from hxd2_ray.retrieval.names import named_entities, title_key

__all__ = ["TITLE_MENTIONS", "title_mention_edges"]

Progress = Callable[[str], None]


class _Titles:
    """Title keys -> documents, shaped as the graph :func:`named_entities` looks names up in (``get_entities``)."""

    def __init__(self, documents: Iterable[tuple[str, str | None]]) -> None:
        self.docs: dict[str, list[str]] = {}
        for doc_id, title in documents:
            key = title_key(title)
            if key:
                self.docs.setdefault(key, []).append(doc_id)

    def get_entities(self, keys: Iterable[str]) -> list[dict[str, str]]:
        return [{"key": k} for k in keys if k in self.docs]


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
    titles = _Titles(zip(documents["id"].to_pylist(), documents["title"].to_pylist()))
    if not titles.docs:
        return TITLE_MENTIONS.empty_table()
    naming: dict[str, list[tuple[str, str]]] = {}  # title key -> (chunk id, its document)
    ids, docs, texts = (chunks[c].to_pylist() for c in ("id", "doc_id", "text"))
    started = last = time.perf_counter()
    for done, (cid, doc, text) in enumerate(zip(ids, docs, texts), start=1):
        for named in named_entities(text or "", titles, None, max_words=cfg.max_words):
            naming.setdefault(named.key, []).append((cid, doc))
        now = time.perf_counter()
        if progress is not None and now - last >= log_every_s:
            progress(f"title mentions: read {done:,}/{len(ids):,} chunks ({now - started:,.0f}s)")
            last = now
    rows = sorted({(cid, named_doc) for key, found in naming.items() if len(found) <= cfg.max_naming_chunks
                   for cid, doc in found for named_doc in titles.docs[key] if named_doc != doc})
    return pa.table({"chunk_id": [c for c, _ in rows], "doc_id": [d for _, d in rows]}, schema=TITLE_MENTIONS)
