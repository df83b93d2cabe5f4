"""The registry of document converters: which suffix is read by which converter, with which package.

:func:`convert` is what :func:`hxd2_ray.ingest.sources.read_documents` calls for a document suffix; it never raises
for a bad file, the caller gets :class:`~hxd2_ray.ingest.conversion.Rejected` rows. The converters' packages
(and their versions) are part of the index fingerprint through ``hxd2_ray.config.sources.CONVERTER_PACKAGES``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Callable

from hxd2_ray.config import IngestConfig
from hxd2_ray.ingest.conversion import LOCATION_WORDS, Bounds, Converted, Rejected
from hxd2_ray.ingest.office import convert_docx, convert_pptx
from hxd2_ray.ingest.pdf import convert_pdf
from hxd2_ray.ingest.sheets import convert_csv, convert_xlsx
from hxd2_ray.ingest.web import convert_epub, convert_html

HEADER_SEPARATOR = " > "  # the chunker's (hxd2_ray.chunking.splitter); the chunking layer sits beside this one


@dataclass(frozen=True, slots=True)
class Converter:
    name: str  # the format: pdf, docx, ...
    package: str  # the PyPI package that reads it
    convert: Callable[[bytes, Bounds], Converted]
    located: bool  # its chunks' header paths start with a location (page, slide, sheet rows, chapter)


CONVERTERS: dict[str, Converter] = {
    ".pdf": Converter("pdf", "pypdfium2", convert_pdf, located=True),
    ".docx": Converter("docx", "python-docx", convert_docx, located=False),
    ".pptx": Converter("pptx", "python-pptx", convert_pptx, located=True),
    ".xlsx": Converter("xlsx", "openpyxl", convert_xlsx, located=True),
    ".csv": Converter("csv", "openpyxl", convert_csv, located=True),  # the standard library: no package of its own
    ".html": Converter("html", "lxml", convert_html, located=False),
    ".htm": Converter("html", "lxml", convert_html, located=False),
    ".xhtml": Converter("html", "lxml", convert_html, located=False),
    ".epub": Converter("epub", "ebooklib", convert_epub, located=True),
}


def converter_for(path: str) -> Converter | None:
    return CONVERTERS.get(suffix_of(path))


def convert(path: str, data: bytes, cfg: IngestConfig) -> Converted:
    """The file's Markdown; raises :class:`Rejected` (with its quarantine reason) for a file that cannot be read.

    Anything else a converter's library raises on a hostile file is reported as ``corrupt``: a parser bug must
    cost one file, never the job."""
    converter = converter_for(path)
    if converter is None:
        raise Rejected("unsupported_type", f"suffix {suffix_of(path)!r}: no converter for it")
    bounds = Bounds(cfg)
    try:
        converted = converter.convert(data, bounds)
    except Rejected:
        raise
    except RecursionError as exc:
        raise Rejected("corrupt", f"{converter.name}: nested too deeply to read") from exc
    except MemoryError as exc:
        raise Rejected("too_large", f"{converter.name}: out of memory converting it") from exc
    except Exception as exc:
        raise Rejected("corrupt", f"{converter.name}: {type(exc).__name__}: {str(exc)[:300]}") from exc
    bounds.check_time("the end")
    return converted


def location_of(source_path: str, header_path: str) -> str:
    """Where a chunk sits in its file ("page 2", "slide 3", "sheet Sales rows 2-21"), from its header path; "" for
    a file whose chunks are located by their headings alone (text, Markdown, DOCX, HTML)."""
    converter = converter_for(source_path)
    if converter is None or not converter.located or not header_path:
        return ""
    first = header_path.split(HEADER_SEPARATOR, 1)[0]
    return first if first.split(" ", 1)[0] in LOCATION_WORDS else ""


def suffix_of(path: str) -> str:
    name = posixpath.basename(path.replace("\\", "/"))
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""
