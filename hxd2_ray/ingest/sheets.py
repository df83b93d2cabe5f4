"""Spreadsheets to Markdown tables: XLSX (``openpyxl``, read-only, cached cell values) and CSV (the standard library).

A sheet's first non-empty row is its header. The rows below it are cut into blocks of ``ingest.sheet_rows_per_block``
rows, each a Markdown table that repeats the header, and each one region (``sheet Sales rows 2-21``; a CSV's
``rows 2-21``): a block is kept whole in one chunk where it fits, and the chunk names its sheet and rows.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any, Iterable

from hxd2_ray.ingest.containers import expect_kind, open_zip
from hxd2_ray.ingest.conversion import Bounds, Converted, MarkdownBuilder, Rejected

# csv's own field limit (128 KiB) is kept: a longer "field" is a file that is not CSV.
_SNIFF_CHARS = 16_384


def convert_xlsx(data: bytes, bounds: Bounds) -> Converted:
    open_zip(data, "xlsx", bounds).close()
    import openpyxl

    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise Rejected("corrupt", f"not a readable .xlsx ({type(exc).__name__}: {str(exc)[:200]})") from exc
    try:
        sheets = book.worksheets
        bounds.check_pages(len(sheets), "sheet")
        out = MarkdownBuilder()
        for sheet in sheets:
            bounds.check_time(f"sheet {sheet.title}")
            rows = ([_value(v) for v in row] for row in sheet.iter_rows(values_only=True))
            _blocks(rows, f"sheet {sheet.title} ", out, bounds)
        title = (book.properties.title or "").strip() if book.properties is not None else ""
        return out.build(title=title, pages=len(sheets))
    except Rejected:
        raise
    except Exception as exc:
        raise Rejected("corrupt", f"reading the workbook: {type(exc).__name__}: {str(exc)[:200]}") from exc
    finally:
        book.close()


def convert_csv(data: bytes, bounds: Bounds) -> Converted:
    expect_kind(data, "csv")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Rejected("undecodable", f"not UTF-8: {exc.reason} at byte {exc.start}") from exc
    if "\x00" in text:
        raise Rejected("type_mismatch", "binary content (NUL bytes), not CSV")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    out = MarkdownBuilder()
    try:
        _blocks(csv.reader(io.StringIO(text, newline=""), dialect), "", out, bounds)
    except csv.Error as exc:
        raise Rejected("corrupt", f"not readable as CSV: {exc}") from exc
    return out.build(pages=1)


def _blocks(rows: Iterable[list[str]], prefix: str, out: MarkdownBuilder, bounds: Bounds) -> None:
    """Markdown tables of ``ingest.sheet_rows_per_block`` rows under the first non-empty row (the header)."""
    per_block = bounds.cfg.sheet_rows_per_block
    header: list[str] | None = None
    block: list[tuple[int, list[str]]] = []  # (row number in the sheet, cells)
    for number, row in enumerate(rows, 1):
        if number % 1000 == 0:
            bounds.check_time(f"{prefix}row {number}")
        while row and not row[-1].strip():
            row = row[:-1]
        if not any(c.strip() for c in row):
            continue
        if header is None:
            header = row
            continue
        block.append((number, row))
        if len(block) == per_block:
            _emit(prefix, header, block, out)
            block = []
    if block:
        assert header is not None
        _emit(prefix, header, block, out)


def _emit(prefix: str, header: list[str], block: list[tuple[int, list[str]]], out: MarkdownBuilder) -> None:
    out.region(f"{prefix}rows {block[0][0]}-{block[-1][0]}".strip())
    out.table([header, *(cells for _, cells in block)])


def _value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="seconds").removesuffix(" 00:00:00")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)
