"""What every document converter shares: its result (Markdown text with located regions), its refusal, its bounds.

A converter turns one file's bytes into Markdown: headings as ``#`` lines (the chunker's header path), tables as
Markdown tables, in reading order. Each region of the text records where it came from (``page 2``, ``slide 3``,
``sheet Sales rows 2-21``): the chunker never lets a chunk straddle two regions and puts the region's label first
in the chunk's header path, so a chunk and every reference to it name its page.

A file that cannot be converted raises :class:`Rejected` with a quarantine reason; a part of a file that is left
out (a scanned page with OCR off) is recorded in :attr:`Converted.skipped` and the rest is kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hxd2_ray.config import IngestConfig

# Every location label starts with one of these words (the chunker's header path puts it first; the references
# read it back from there): hxd2_ray.ingest.locations.location_of.
LOCATION_WORDS = ("page", "slide", "sheet", "rows", "chapter")


@dataclass(frozen=True, slots=True)
class Converted:
    """A converted file: its Markdown text, where each located region starts, and what was left out."""

    text: str
    regions: tuple[tuple[int, str], ...] = ()  # (offset in text, label), ascending offsets
    title: str = ""  # the document's own title (metadata or first heading); "" lets the caller pick the file name
    skipped: tuple[tuple[str, str], ...] = ()  # (quarantine reason, detail) for each part left out
    pages: int = 0  # pages, slides, sheets or chapters read: the bench's pages/s


class Rejected(Exception):
    """The file cannot be converted: ``reason`` is the quarantine reason, ``detail`` says why for a person."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class Bounds:
    """The per-file limits a converter checks as it goes: a deadline, a page count, an unpacked size."""

    cfg: IngestConfig
    started: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float:
        """The ``time.monotonic()`` by which the file must be converted."""
        return self.started + self.cfg.max_convert_s

    def check_time(self, where: str) -> None:
        """Raise once the file has taken longer than ``ingest.max_convert_s`` (checked between pages, slides,
        sheets and chapters: a converter cannot be interrupted inside a library call, so one page bounds the
        overshoot)."""
        spent = time.monotonic() - self.started
        if spent > self.cfg.max_convert_s:
            raise Rejected(
                "timeout", f"conversion took over ingest.max_convert_s={self.cfg.max_convert_s:g} s (at {where})"
            )

    def check_pages(self, count: int, unit: str) -> None:
        if count > self.cfg.max_pages:
            raise Rejected("too_many_pages", f"{count} {unit}s > ingest.max_pages={self.cfg.max_pages}")


class MarkdownBuilder:
    """Markdown text assembled block by block (blocks apart by a blank line), with region labels at offsets."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self._regions: list[tuple[int, str]] = []
        self.skipped: list[tuple[str, str]] = []
        self.first_heading = ""

    def region(self, label: str) -> None:
        """The blocks added from here on come from ``label`` (until the next region)."""
        at = self._length + (2 if self._parts else 0)  # the next block starts after the blank line
        if self._regions and self._regions[-1][0] == at:
            self._regions[-1] = (at, label)  # an empty region: nothing to locate
        else:
            self._regions.append((at, label))

    def block(self, text: str) -> None:
        text = text.strip("\n")
        if not text.strip():
            return
        if self._parts:
            self._parts.append("\n\n")
            self._length += 2
        self._parts.append(text)
        self._length += len(text)

    def heading(self, level: int, text: str) -> None:
        text = " ".join(text.split())
        if not text:
            return
        self.first_heading = self.first_heading or text
        self.block(f"{'#' * max(1, min(level, 6))} {text}")

    def table(self, rows: list[list[str]]) -> None:
        self.block(markdown_table(rows))

    def build(self, title: str = "", pages: int = 0) -> Converted:
        text = "".join(self._parts)
        regions = tuple((at, label) for at, label in self._regions if at < len(text))
        return Converted(text, regions, title or self.first_heading, tuple(self.skipped), pages)


def markdown_table(rows: list[list[str]]) -> str:
    """A Markdown table, the first row its header; ragged rows are padded, ``|`` and line breaks escaped."""
    rows = [[_cell(c) for c in row] for row in rows if any((c or "").strip() for c in row)]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _cell(value: str | None) -> str:
    return " ".join((value or "").split()).replace("|", "\\|")


def clean_text(text: str) -> str:
    """Line breaks folded to ``\\n``; NULs, other C0 controls and U+FFFE (PDFium's mark of a hyphen at a line
    break) dropped; runs of blank lines cut to one."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(c for c in text if (c >= " " or c in "\n\t") and c != "\ufffe")
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip()
