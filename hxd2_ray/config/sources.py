"""Where a corpus is read from: S3 access, the files and record fields an index takes in, and the bounds and
settings of converting documents (PDF, DOCX, PPTX, XLSX/CSV, HTML, EPUB) into text."""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from importlib import metadata
from typing import Any

from pydantic import Field

from hxd2_ray.config.base import NOT_IN_INDEX, FrozenSection


class S3Config(FrozenSection):
    """Access to s3:// inputs, outputs and caches (credentials come from the environment, never from here)."""

    endpoint_url: str | None = Field(None, description="S3 endpoint, e.g. http://127.0.0.1:9000 for a local server.")
    region: str = Field("us-east-1", description="S3 region.")
    lock_stale_after_s: float = Field(
        900.0,
        gt=0,
        description="An S3 build lock whose heartbeat is older than this is taken over by the next build (a live "
        "build refreshes it every minute or so); a lock left by a dead process on the same host is "
        "taken over at once.",
    )


# Suffixes read by a document converter (hxd2_ray.ingest.formats); the text and record suffixes are read as before.
DOCUMENT_SUFFIXES = (".pdf", ".docx", ".pptx", ".xlsx", ".csv", ".html", ".htm", ".xhtml", ".epub")
# The PyPI packages the converters read documents with: their versions are part of the staging fingerprint, since a
# new version can change the text of the same file. hxd2_ray.ingest.formats names the package of each converter
# (a unit test keeps the two lists equal).
CONVERTER_PACKAGES = ("pypdfium2", "python-docx", "python-pptx", "openpyxl", "lxml", "ebooklib")
# The revision of this project's own conversion code (hxd2_ray/ingest): raise it when the Markdown a converter
# writes for the same file changes, so indexes built with the old text are rebuilt.
CONVERSION_REVISION = 1


class IngestConfig(FrozenSection):
    """Which files of an input are read, and which fields of a record hold the text, id and title.

    The file filters are not part of the index fingerprint: what they let through is, as the input's listing."""

    extensions: tuple[str, ...] = Field(
        (".txt", ".md", ".markdown", ".json", ".jsonl", ".parquet", *DOCUMENT_SUFFIXES),
        description="File suffixes picked up when the input is a folder; other files are quarantined.",
        json_schema_extra=NOT_IN_INDEX,
    )
    text_field: str = Field("text", description="Field holding the text in .json/.jsonl/.parquet records.")
    id_field: str = Field("id", description="Field holding the source's own document id (kept beside the hash).")
    title_field: str = Field("title", description="Field holding a document title.")
    max_file_bytes: int = Field(
        512 * 1024 * 1024, gt=0, description="Larger files are quarantined.", json_schema_extra=NOT_IN_INDEX
    )
    follow_external_links: bool = Field(
        False,
        description="Read what a symbolic link under the input folder points to outside it; off: such a link is "
        "quarantined (reason link_outside_input), so a link cannot pull another folder's files into the index.",
        json_schema_extra=NOT_IN_INDEX,
    )
    max_pages: int = Field(
        2000,
        gt=0,
        description="A PDF with more pages (a deck with more slides, a workbook with more sheets, a book with more "
        "chapters) is quarantined (reason too_many_pages) before its text is read.",
        json_schema_extra=NOT_IN_INDEX,
    )
    max_unpacked_bytes: int = Field(
        512 * 1024 * 1024,
        gt=0,
        description="DOCX, PPTX, XLSX and EPUB files are zips: one whose members add up to more bytes unpacked is "
        "quarantined (reason zip_bomb) before any member is read.",
        json_schema_extra=NOT_IN_INDEX,
    )
    max_convert_s: float = Field(
        300.0,
        gt=0,
        description="Seconds one file's conversion may take; past it the file is quarantined (reason timeout). "
        "Checked between pages, slides, sheets and chapters, and bounding each OCR call.",
        json_schema_extra=NOT_IN_INDEX,
    )
    sheet_rows_per_block: int = Field(
        20,
        gt=0,
        description="Rows of a spreadsheet (XLSX, CSV) per Markdown table; each table repeats the header row and "
        "is one located region ('sheet Sales rows 2-21'), kept whole in one chunk where it fits.",
    )
    ocr: bool = Field(
        False,
        description="OCR a PDF page that has no text layer (a scan) with Tesseract; off: such a page is left out "
        "and recorded in the quarantine (reason no_text_layer), the file's other pages are indexed.",
    )
    ocr_languages: str = Field(
        "eng+chi_sim",
        min_length=1,
        description="Tesseract's -l argument: the language models OCR reads with (Debian's tesseract-ocr-eng "
        "and tesseract-ocr-chi-sim, installed by scripts/install).",
    )
    ocr_dpi: int = Field(300, ge=72, le=600, description="Resolution a scanned page is rendered at for OCR.")


def converter_versions(cfg: IngestConfig) -> dict[str, Any]:
    """What the converters' output depends on beyond their settings: the packages' versions, this project's
    conversion revision, and, with OCR on, the Tesseract binary's version (part of the staging fingerprint)."""
    versions: dict[str, Any] = {"revision": CONVERSION_REVISION}
    for name in CONVERTER_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = ""
    if cfg.ocr:
        versions["tesseract"] = tesseract_version()
    return versions


@lru_cache(maxsize=1)
def tesseract_version() -> str:
    """The installed Tesseract's version line; "" when it is missing."""
    if shutil.which("tesseract") is None:
        return ""
    try:
        done = subprocess.run(["tesseract", "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (done.stdout or done.stderr or "").splitlines()
    return lines[0].strip() if lines else ""
