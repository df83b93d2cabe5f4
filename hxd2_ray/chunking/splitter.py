"""Markdown-aware, size-bounded chunking whose chunks are verbatim slices of the document text.

Markdown sections are found by a line scan (fenced code blocks are not scanned for headers); the header lines
themselves are left out of the chunk text and recorded as ``header_path``. A converted file's sections are also
cut where each of its regions starts (``Document.regions``: a PDF page, a slide, a block of sheet rows), so no
chunk spans two pages, and the region's label leads the header path (``page 2 > Results``). Each section is then
cut to size by langchain's ``RecursiveCharacterTextSplitter``, with sentence punctuation as separators for Chinese.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache

from langchain_text_splitters import RecursiveCharacterTextSplitter

from hxd2_ray.config import ChunkingConfig
from hxd2_ray.types import Chunk, Document, content_hash

HEADER_SEPARATOR = " > "
MARKDOWN_SUFFIXES = (".md", ".markdown")

# Chinese text has no spaces: fall back from paragraphs and lines to sentence, clause and comma punctuation.
# keep_separator="end" leaves the punctuation at the end of its sentence.
ZH_SEPARATORS = ("\n\n", "\n", "。|！|？", r"\.\s|\!\s|\?\s", r"；|;\s", r"，|,\s", " ", "")
EN_SEPARATORS = ("\n\n", "\n", " ", "")

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADER_LINE = re.compile(r"^ {0,3}#{1,6}[ \t]", re.MULTILINE)


def detect_language(text: str) -> str:
    """``"zh"`` when the text has at least as many CJK ideographs as Latin words, else ``"en"``.

    Words, not letters: one ideograph carries about what one short English word does, and Chinese technical
    text quotes many Latin names (genes, databases, binomials) that a letter count would let win. An English
    passage quoting a Chinese name stays ``"en"``; text with neither script is ``"en"``.
    """
    cjk = len(_CJK.findall(text))
    if not cjk:
        return "en"
    return "zh" if cjk >= len(_LATIN_WORD.findall(text)) else "en"


@dataclass(frozen=True, slots=True)
class _Section:
    start: int  # offset of the body in the document text
    text: str
    header_path: str


def split_document(doc: Document, cfg: ChunkingConfig) -> list[Chunk]:
    """Chunks of ``doc`` in reading order; ``doc.text[c.start:c.start + len(c.text)] == c.text`` for each."""
    chunks: list[Chunk] = []
    for section in _sections(doc, cfg):
        splitter = _splitter(detect_language(section.text), cfg.chunk_size_chars, cfg.overlap_chars)
        for offset, piece in _locate(section.text, splitter.split_text(section.text), cfg):
            if len(piece.strip()) < cfg.min_chunk_chars:
                continue
            start = section.start + offset
            chunks.append(
                Chunk(
                    id=content_hash(doc.id, str(start), piece),
                    doc_id=doc.id,
                    order=len(chunks),
                    start=start,
                    text=piece,
                    header_path=section.header_path,
                    language=detect_language(piece),
                )
            )
    return chunks


def looks_like_markdown(doc: Document) -> bool:
    return doc.source_path.lower().endswith(MARKDOWN_SUFFIXES) or bool(_HEADER_LINE.search(doc.text))


def _sections(doc: Document, cfg: ChunkingConfig) -> list[_Section]:
    return _cut_at_regions(_heading_sections(doc, cfg), doc.regions)


def _cut_at_regions(sections: list[_Section], regions: tuple[tuple[int, str], ...]) -> list[_Section]:
    """``sections`` cut where each region starts; each piece's header path led by its region's label."""
    if not regions:
        return sections
    starts = [at for at, _ in regions]
    out: list[_Section] = []
    for section in sections:
        lo, hi = section.start, section.start + len(section.text)
        cuts = [lo, *(at for at in starts if lo < at < hi), hi]
        for a, b in zip(cuts, cuts[1:]):
            piece = section.text[a - lo : b - lo]
            if not piece.strip():
                continue
            i = bisect_right(starts, a) - 1
            label = regions[i][1] if i >= 0 else ""
            out.append(_Section(a, piece, HEADER_SEPARATOR.join(p for p in (label, section.header_path) if p)))
    return out


def _heading_sections(doc: Document, cfg: ChunkingConfig) -> list[_Section]:
    if cfg.markdown_header_levels == 0 or not looks_like_markdown(doc):
        return [_Section(0, doc.text, "")]
    sections: list[_Section] = []
    path: list[tuple[int, str]] = []
    body_start = 0
    pos = 0
    fence: str | None = None
    text = doc.text
    # Only "\n" ends a line here (CRLF was folded at ingest); str.splitlines would also break at U+2028 etc.
    for bare in text.split("\n"):
        line_start, pos = pos, pos + len(bare) + 1
        m = _FENCE.match(bare)
        if m:
            marker = m.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not bare.strip()[len(marker) :].strip():
                fence = None
            continue
        if fence is not None:
            continue
        h = _ATX.match(bare)
        if h is None or len(h.group(1)) > cfg.markdown_header_levels:
            continue
        sections.append(_Section(body_start, text[body_start:line_start], _join(path)))
        level, title = len(h.group(1)), (h.group(2) or "").strip()
        path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, title)]
        body_start = pos
    if body_start <= len(text):
        sections.append(_Section(body_start, text[body_start:], _join(path)))
    return [s for s in sections if s.text.strip()]


def _join(path: list[tuple[int, str]]) -> str:
    return HEADER_SEPARATOR.join(t for _, t in path if t)


@lru_cache(maxsize=32)
def _splitter(language: str, chunk_size: int, overlap: int) -> RecursiveCharacterTextSplitter:
    zh = language == "zh"
    return RecursiveCharacterTextSplitter(
        separators=list(ZH_SEPARATORS if zh else EN_SEPARATORS),
        keep_separator="end",
        is_separator_regex=zh,
        chunk_size=chunk_size,
        chunk_overlap=overlap,
        length_function=len,
        strip_whitespace=True,
    )


def _locate(text: str, pieces: list[str], cfg: ChunkingConfig) -> list[tuple[int, str]]:
    """Offsets of the splitter's pieces in ``text``, scanning forward.

    The splitter only concatenates neighbouring splits and strips whitespace, so each piece is a substring that
    starts after the previous one and at most ``overlap`` characters before the previous one ends.
    """
    out: list[tuple[int, str]] = []
    prev_start, prev_end = -1, 0
    for piece in pieces:
        lo = max(prev_start + 1, prev_end - cfg.overlap_chars)
        at = text.find(piece, lo)
        if at < 0:
            at = text.find(piece, prev_start + 1)
        if at < 0:
            raise AssertionError(f"splitter returned a piece that is not a slice of its input: {piece[:60]!r}")
        for i in range(0, len(piece), cfg.chunk_size_chars):
            # The splitter keeps an over-long split whole only when it has no separator left, which the final ""
            # separator rules out; cut anyway so the size bound holds whatever the library does.
            out.append((at + i, piece[i : i + cfg.chunk_size_chars]))
        prev_start, prev_end = at, at + len(piece)
    return out
