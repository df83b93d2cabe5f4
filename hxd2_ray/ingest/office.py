"""Word (DOCX, ``python-docx``) and PowerPoint (PPTX, ``python-pptx``) to Markdown.

DOCX: the body in document order; paragraphs styled ``Title`` or ``Heading N`` become headings, list paragraphs
``-`` items, tables Markdown tables. A DOCX has no pages until a word processor lays it out, so its chunks are
located by their headings alone. PPTX: one region per slide (``slide N``), the title placeholder as its heading,
the other shapes in reading order (top to bottom, then left to right), tables as Markdown, the speaker notes last.
Both open the zip only after :func:`hxd2_ray.ingest.containers.open_zip` has bounded its unpacked size.
"""

from __future__ import annotations

import io
import re
from typing import Any, Iterator

from hxd2_ray.ingest.containers import open_zip
from hxd2_ray.ingest.conversion import Bounds, Converted, MarkdownBuilder, Rejected

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)


def convert_docx(data: bytes, bounds: Bounds) -> Converted:
    open_zip(data, "docx", bounds).close()
    import docx
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:
        raise Rejected("corrupt", f"not a readable .docx ({type(exc).__name__}: {str(exc)[:200]})") from exc
    out = MarkdownBuilder()
    for n, item in enumerate(document.iter_inner_content()):
        if n % 200 == 0:
            bounds.check_time(f"block {n + 1}")
        if isinstance(item, Table):
            out.table(_docx_rows(item))
            continue
        text = item.text.strip()
        if not text:
            continue
        style = (item.style.name if item.style is not None else "") or ""
        level = _heading_level(style)
        if level:
            out.heading(level, text)
        elif "list" in style.lower():
            out.block(f"- {text}")
        else:
            out.block(text)
    title = (document.core_properties.title or "").strip()
    return out.build(title=title, pages=1)


def _heading_level(style: str) -> int:
    if style.lower() == "title":
        return 1
    m = _HEADING_STYLE.match(style.strip())
    return int(m.group(1)) if m else 0


def _docx_rows(table: Any) -> list[list[str]]:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = cell.text
            if cells and cell._tc is getattr(row.cells[len(cells) - 1], "_tc", None):  # noqa: SLF001 - merged cell
                text = ""  # a horizontally merged cell repeats in python-docx; keep its text once
            cells.append(text)
        rows.append(cells)
    return rows


def convert_pptx(data: bytes, bounds: Bounds) -> Converted:
    open_zip(data, "pptx", bounds).close()
    import pptx

    try:
        deck = pptx.Presentation(io.BytesIO(data))
        slides = list(deck.slides)
    except Exception as exc:
        raise Rejected("corrupt", f"not a readable .pptx ({type(exc).__name__}: {str(exc)[:200]})") from exc
    bounds.check_pages(len(slides), "slide")
    out = MarkdownBuilder()
    for number, slide in enumerate(slides, 1):
        bounds.check_time(f"slide {number} of {len(slides)}")
        out.region(f"slide {number}")
        title_shape = slide.shapes.title
        if title_shape is not None and title_shape.has_text_frame:
            out.heading(1, title_shape.text_frame.text)
        shapes = [s for s in slide.shapes if title_shape is None or s.shape_id != title_shape.shape_id]
        for shape in _reading_order(shapes):
            if getattr(shape, "has_table", False) and shape.has_table:
                out.table([[cell.text for cell in row.cells] for row in shape.table.rows])
            elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
                out.block("\n".join(p.text for p in shape.text_frame.paragraphs if p.text.strip()))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                out.block(f"Notes: {notes.text.strip()}")
    title = (deck.core_properties.title or "").strip()
    return out.build(title=title, pages=len(slides))


def _reading_order(shapes: list[Any]) -> Iterator[Any]:
    """Shapes top to bottom, then left to right; a group's shapes in their own order, where the group sits."""
    for shape in sorted(shapes, key=lambda s: ((s.top or 0), (s.left or 0))):
        if hasattr(shape, "shapes"):  # a group
            yield from _reading_order(list(shape.shapes))
        else:
            yield shape
