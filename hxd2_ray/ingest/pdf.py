"""PDF to Markdown with page boundaries, through PDFium (``pypdfium2``); scanned pages OCRed when asked.

PDFium was picked over pdfminer.six by the measurement in the documents benchmark (docs/benchmarks/documents.md):
several times the pages/s per core, and text as faithful on the generated tables and two-column pages. Each page
is one region (``page N``), so no chunk spans two pages. A page with no text layer but images on it is a scan: it
is OCRed (hxd2_ray.ingest.ocr) when ``ingest.ocr`` is on, else left out with the reason "no text layer; enable
ingest.ocr" while the other pages are kept.

PDFium is not thread-safe (one library state per process): conversions in one process take turns on a lock.
"""

from __future__ import annotations

import threading
from typing import Any

from hxd2_ray.ingest.containers import expect_kind
from hxd2_ray.ingest.conversion import Bounds, Converted, MarkdownBuilder, Rejected, clean_text
from hxd2_ray.ingest.ocr import ocr_image

_PDFIUM_LOCK = threading.Lock()
# PDFium's load errors, as pypdfium2 words them, mapped to quarantine reasons.
_LOAD_ERRORS = (("password", "encrypted"), ("security", "encrypted"), ("format", "corrupt"), ("file", "corrupt"))


def convert_pdf(data: bytes, bounds: Bounds) -> Converted:
    expect_kind(data, "pdf")
    import pypdfium2 as pdfium

    with _PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            message = str(exc)
            reason = next((r for key, r in _LOAD_ERRORS if key in message.lower()), "corrupt")
            detail = "password-protected PDF; save it without a password" if reason == "encrypted" else message
            raise Rejected(reason, detail) from exc
        try:
            return _pages(pdf, bounds)
        finally:
            pdf.close()


def _pages(pdf: Any, bounds: Bounds) -> Converted:
    import pypdfium2.raw as pdfium_c

    count = len(pdf)
    bounds.check_pages(count, "page")
    if count == 0:
        raise Rejected("empty", "the PDF has no pages")
    out = MarkdownBuilder()
    scans: list[int] = []  # pages with no text layer left out (OCR off), or where OCR read nothing
    for i in range(count):
        bounds.check_time(f"page {i + 1} of {count}")
        page = pdf[i]
        try:
            textpage = page.get_textpage()
            text = clean_text(textpage.get_text_range())
            textpage.close()
            if not text and _has_images(page, pdfium_c.FPDF_PAGEOBJ_IMAGE):
                text = _ocr(page, i + 1, bounds) if bounds.cfg.ocr else ""
                if not text:
                    scans.append(i + 1)
        finally:
            page.close()
        out.region(f"page {i + 1}")
        out.block(text)
    if scans:
        what = "OCR found no text" if bounds.cfg.ocr else "no text layer; enable ingest.ocr"
        out.skipped.append(("no_text_layer", f"{_pages_list(scans)} of {count}: {what}"))
    title = _metadata_title(pdf)
    return out.build(title=title, pages=count)


def _has_images(page: Any, image_type: int) -> bool:
    return any(True for _ in page.get_objects(filter=[image_type], max_depth=2))


def _ocr(page: Any, number: int, bounds: Bounds) -> str:
    # 300 dpi by default: Tesseract's accuracy drops fast below it on book-size type.
    image = page.render(scale=bounds.cfg.ocr_dpi / 72).to_pil()
    return ocr_image(image, bounds.cfg, f"page {number}", bounds.deadline)


def _pages_list(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:20])) + (f" and {len(numbers) - 20} more" if len(numbers) > 20 else "")
    return f"page{'s' if len(numbers) > 1 else ''} {shown}"


def _metadata_title(pdf: Any) -> str:
    import pypdfium2 as pdfium

    try:
        title = (pdf.get_metadata_dict().get("Title") or "").strip()
    except (pdfium.PdfiumError, UnicodeDecodeError, ValueError):  # a broken info dictionary costs the title only
        return ""
    return " ".join(title.split())
