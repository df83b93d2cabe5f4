"""Documents made at test time (PDF, DOCX, PPTX, XLSX, CSV, HTML, EPUB), good and hostile, for the ingest tests and
bench/documents.py. Each maker returns the file's bytes; the content is known, so what a converter reads back can
be checked against it."""

from __future__ import annotations

import io
import struct
import zipfile
from datetime import datetime
from typing import Sequence

Block = tuple[str, object]  # ("h1".."h3", text) | ("p", text) | ("table", rows)

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # Debian's fonts-dejavu-core (a chromium dependency)
OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # the container of legacy .doc/.xls/.ppt and of encrypted OOXML


# ----------------------------------------------------------------------------------------------------------- PDF


def pdf_bytes(
    pages: Sequence[Sequence[Block]],
    *,
    title: str = "",
    user_password: str | None = None,
    created: datetime | None = None,
) -> bytes:
    """A PDF with one page per item of ``pages``: headings, paragraphs and ruled tables in that order."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    if created is not None:
        pdf.set_creation_date(created)
    if title:
        pdf.set_title(title)
    if user_password is not None:
        pdf.set_encryption(owner_password="owner", user_password=user_password)
    for blocks in pages:
        pdf.add_page()
        for kind, value in blocks:
            if kind.startswith("h"):
                pdf.set_font("helvetica", "B", 18 - 2 * int(kind[1:]))
                pdf.multi_cell(0, 9, str(value), new_x="LMARGIN", new_y="NEXT")
            elif kind == "p":
                pdf.set_font("helvetica", "", 11)
                pdf.multi_cell(0, 6, str(value), new_x="LMARGIN", new_y="NEXT")
            elif kind == "table":
                pdf.set_font("helvetica", "", 10)
                with pdf.table() as table:
                    for row in value:  # type: ignore[attr-defined]
                        cells = table.row()
                        for cell in row:
                            cells.cell(str(cell))
            pdf.ln(3)
    return bytes(pdf.output())


def two_column_pdf(left: Sequence[str], right: Sequence[str]) -> bytes:
    """One page, two columns of paragraphs: the left column is written (and read) first."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.add_page()
    pdf.set_font("helvetica", "", 10)
    for x, paragraphs in ((10, left), (110, right)):
        pdf.set_xy(x, 15)
        for text in paragraphs:
            pdf.set_x(x)
            pdf.multi_cell(90, 5, text, new_x="LEFT", new_y="NEXT")
            pdf.ln(2)
    return bytes(pdf.output())


def scanned_pdf(lines: Sequence[str], text_page: str | None = None) -> bytes:
    """A PDF whose first page is only an image of ``lines`` (a scan, no text layer); ``text_page`` adds a
    second page with a text layer."""
    from fpdf import FPDF
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (1700, 300 + 90 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(FONT, 56)
    for i, line in enumerate(lines):
        draw.text((100, 120 + 90 * i), line, fill=0, font=font)
    pdf = FPDF(format="A4")
    pdf.add_page()
    pdf.image(image, x=0, y=0, w=210)
    if text_page is not None:
        pdf.add_page()
        pdf.set_font("helvetica", "", 11)
        pdf.multi_cell(0, 6, text_page)
    return bytes(pdf.output())


def many_pages_pdf(count: int) -> bytes:
    """``count`` blank pages, made by PDFium in well under a second even for 10,000."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    for _ in range(count):
        pdf.new_page(200, 200)
    buf = io.BytesIO()
    pdf.save(buf)
    pdf.close()
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------------------- Office


def docx_bytes(blocks: Sequence[Block], *, title: str = "") -> bytes:
    import docx

    document = docx.Document()
    if title:
        document.core_properties.title = title
    for kind, value in blocks:
        if kind.startswith("h"):
            document.add_heading(str(value), level=int(kind[1:]))
        elif kind == "p":
            document.add_paragraph(str(value))
        elif kind == "li":
            document.add_paragraph(str(value), style="List Bullet")
        elif kind == "table":
            rows = list(value)  # type: ignore[call-overload]
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = str(cell)
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


def pptx_bytes(slides: Sequence[tuple[str, Sequence[Block]]]) -> bytes:
    """One slide per (title, blocks); paragraphs go in a text box, tables in a table shape, top to bottom."""
    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    layout = deck.slide_layouts[5]  # title only
    for title, blocks in slides:
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = title
        top = 1.6
        for kind, value in blocks:
            if kind == "table":
                rows = list(value)  # type: ignore[call-overload]
                shape = slide.shapes.add_table(len(rows), len(rows[0]), Inches(0.5), Inches(top), Inches(9), Inches(2))
                for r, row in enumerate(rows):
                    for c, cell in enumerate(row):
                        shape.table.cell(r, c).text = str(cell)
                top += 2.2
            else:
                box = slide.shapes.add_textbox(Inches(0.5), Inches(top), Inches(9), Inches(1))
                box.text_frame.text = str(value)
                top += 1.1
    buf = io.BytesIO()
    deck.save(buf)
    return buf.getvalue()


def xlsx_bytes(sheets: dict[str, Sequence[Sequence[object]]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------------ HTML, EPUB


def html_page(title: str, body: str) -> str:
    """A page with boilerplate around ``body``: navigation, a site header and footer, a script, a style."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        "<style>body{font-family:serif}</style><script>var tracking = 'SCRIPT TEXT';</script></head><body>"
        "<header><a href='/'>Site Home</a></header><nav><ul><li>NAV LINK ONE</li><li>NAV LINK TWO</li></ul></nav>"
        f"<main>{body}</main><aside>ASIDE TEXT</aside><footer>FOOTER TEXT</footer></body></html>"
    )


def epub_bytes(title: str, chapters: Sequence[tuple[str, str]]) -> bytes:
    """An EPUB of (chapter title, body HTML) chapters in spine order."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("hxd2-test-book")
    book.set_title(title)
    book.set_language("en")
    items = []
    for i, (name, body) in enumerate(chapters, 1):
        item = epub.EpubHtml(title=name, file_name=f"chap_{i}.xhtml", lang="en")
        item.content = f"<html><body><h1>{name}</h1>{body}</body></html>"
        book.add_item(item)
        items.append(item)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = items
    buf = io.BytesIO()
    epub.write_epub(buf, book)
    return buf.getvalue()


# -------------------------------------------------------------------------------------------------------- hostile


def zip_bomb(core_member: str, unpacked_bytes: int) -> bytes:
    """A zip holding ``core_member`` (so it passes for the format) and one member of ``unpacked_bytes`` zeros,
    which deflate packs about a thousand to one."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr(core_member, "<document/>")
        with archive.open("bomb.bin", "w", force_zip64=True) as member:
            chunk = b"\0" * (1 << 20)
            for _ in range(unpacked_bytes // len(chunk)):
                member.write(chunk)
    return buf.getvalue()


def lying_zip(data: bytes, member: str, declared: int) -> bytes:
    """``data`` (a zip) with ``member``'s unpacked size rewritten to ``declared`` in the central directory: a bomb
    that hides its size."""
    out = bytearray(data)
    signature = b"PK\x01\x02"
    at = out.find(signature)
    while at >= 0:
        name_len = struct.unpack_from("<H", out, at + 28)[0]
        name = bytes(out[at + 46 : at + 46 + name_len]).decode()
        if name == member:
            struct.pack_into("<I", out, at + 24, declared)
        at = out.find(signature, at + 4)
    return bytes(out)
