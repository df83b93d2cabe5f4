"""Input discovery (local or S3) and turning one file's bytes into documents, quarantining what cannot be read.

``read_documents`` is a pure function of ``(path, bytes, config)`` so Ray workers can run it on the rows of
``ray.data.read_binary_files``; it never raises for bad input, it returns :class:`QuarantinedFile` rows instead.
"""

from __future__ import annotations

import codecs
import json
import posixpath
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hxd2_ray.config import IngestConfig, S3Config
from hxd2_ray.errors import EmptyCorpusError
from hxd2_ray.ingest.conversion import Rejected
from hxd2_ray.ingest.filesystems import resolve_filesystem
from hxd2_ray.ingest.formats import convert, converter_for
from hxd2_ray.ingest.listing import InputListing, walk_inputs
from hxd2_ray.text_validation import surrogate_reason
from hxd2_ray.types import Document, QuarantinedFile, content_hash

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
RECORD_SUFFIXES = (".json", ".jsonl", ".parquet")

# Share of control bytes (other than tab, newlines, form feed, backspace, escape) above which a NUL-free file is
# still treated as binary; real text has next to none.
_CONTROL_RATIO = 0.10
_SNIFF_BYTES = 8192
_CONTROL_BYTES = frozenset(range(0x20)) - {0x08, 0x09, 0x0A, 0x0C, 0x0D, 0x1B} | {0x7F}
_ATX_H1 = re.compile(r"^ {0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


# --------------------------------------------------------------------------------------------- file systems


# --------------------------------------------------------------------------------------------- listing


def list_input_files(uri: str, cfg: IngestConfig, s3: S3Config) -> list[str]:
    """Files under ``uri`` (a file, a folder searched recursively, or a glob with ``*``/``**``/``?``), sorted.

    Names come back in the input's form (``s3://bucket/key`` or an absolute local path); pass each one to
    :func:`resolve_filesystem` to read it. The walk is :func:`hxd2_ray.ingest.listing.walk_inputs` (real paths
    visited once, index folders and hidden names skipped); what it cannot read is dropped here, so call
    ``walk_inputs`` when the quarantine rows matter. A missing file or folder raises ``FileNotFoundError``.
    """
    # suffix filtering is read_documents' job: unsupported files are quarantined, not silently dropped
    return walk_inputs(uri, s3, follow_external_links=cfg.follow_external_links).files


@dataclass
class InputSelection:
    """An input walked and prechecked from names and sizes alone: what to read and what is already rejected."""

    files: list[str]  # every listed file, in the input's URI form
    infos: list[pafs.FileInfo]  # their sizes and times (the input fingerprint)
    readable: list[str]  # the files worth fetching
    rejected: list[QuarantinedFile]  # the walker's rows and the precheck's
    listing: InputListing


def select_inputs(uri: str, cfg: IngestConfig, s3: S3Config, exclude: tuple[str, ...] = ()) -> InputSelection:
    """Walk ``uri`` (never entering ``exclude``) and precheck every file; raise when nothing is left to read.

    ``FileNotFoundError`` for a missing input, :class:`EmptyCorpusError` when no file (or none that could be
    read) is there: both before any work starts, so a rejected input leaves nothing behind.
    """
    listing = walk_inputs(uri, s3, exclude=exclude, follow_external_links=cfg.follow_external_links)
    if not listing.files and not listing.quarantined:
        raise EmptyCorpusError(f"no input files under {uri}{listing.describe_exclusions()}")
    infos: list[pafs.FileInfo] = []
    if listing.files:
        fs, _ = resolve_filesystem(listing.files[0], s3)
        infos = fs.get_file_info([resolve_filesystem(f, s3)[1] for f in listing.files])
    rejected = list(listing.quarantined)
    readable = []
    for file_uri, info in zip(listing.files, infos, strict=True):
        verdict = precheck(file_uri, info.size, cfg)
        (rejected.append(verdict) if verdict else readable.append(file_uri))
    if not readable:
        reasons = Counter(q.reason for q in rejected)
        raise EmptyCorpusError(
            f"no readable input file under {uri}: {len(rejected)} rejected "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(reasons.items()))}); no index was written"
        )
    return InputSelection(files=listing.files, infos=infos, readable=readable, rejected=rejected, listing=listing)


def precheck(path: str, size: int | None, cfg: IngestConfig) -> QuarantinedFile | None:
    """The quarantine row for a file that can be rejected from its name and size alone, without reading it.

    Lets a job skip fetching large or unsupported files; :func:`read_documents` applies the same checks.
    """
    if size is not None and size > cfg.max_file_bytes:
        return QuarantinedFile(path, "too_large", f"{size} bytes > ingest.max_file_bytes={cfg.max_file_bytes}")
    suffix = _suffix(path)
    if suffix not in cfg.extensions:
        return QuarantinedFile(path, "unsupported_type", f"suffix {suffix or '(none)'!r} is not in ingest.extensions")
    if suffix not in TEXT_SUFFIXES + RECORD_SUFFIXES and converter_for(path) is None:
        return QuarantinedFile(path, "unsupported_type", f"suffix {suffix!r}: no reader for it")
    return None


def load_documents(uri: str, cfg: IngestConfig, s3: S3Config) -> tuple[list[Document], list[QuarantinedFile]]:
    """List ``uri`` and read every file in this process (the serial path; Ray jobs call read_documents per file)."""
    listing = walk_inputs(uri, s3)
    docs: list[Document] = []
    quarantined: list[QuarantinedFile] = list(listing.quarantined)
    for file_uri in listing.files:
        fs, path = resolve_filesystem(file_uri, s3)
        try:
            rejected = precheck(file_uri, fs.get_file_info(path).size, cfg)
            if rejected is not None:
                quarantined.append(rejected)
                continue
            with fs.open_input_stream(path) as f:
                data = f.read()
        except OSError as exc:
            quarantined.append(QuarantinedFile(file_uri, "unreadable", str(exc)[:500]))
            continue
        d, q = read_documents(file_uri, data, cfg)
        docs.extend(d)
        quarantined.extend(q)
    return docs, quarantined


# --------------------------------------------------------------------------------------------- reading


def read_documents(path: str, data: bytes, cfg: IngestConfig) -> tuple[list[Document], list[QuarantinedFile]]:
    """Documents in one file's bytes, and quarantine rows for what could not be used (never raises on bad input).

    Text files give one document; .json (an object or a list of objects), .jsonl and .parquet give one per record;
    a PDF, DOCX, PPTX, XLSX, CSV, HTML or EPUB file gives one Markdown document (:mod:`hxd2_ray.ingest.formats`).
    ``source_id`` is the record's id field, else the path (``path#n`` for the n-th record, 1-based; the line
    number for .jsonl). The title is the title field, else the first markdown H1, else the file's basename.
    """
    rejected = precheck(path, len(data), cfg)
    if rejected is not None:
        return [], [rejected]
    suffix = _suffix(path)
    if not data:
        return [], [QuarantinedFile(path, "empty", "file has 0 bytes")]
    if suffix == ".parquet":
        return _read_parquet(path, data, cfg)
    if converter_for(path) is not None:
        return _read_converted(path, data, cfg)

    text, problem = _decode(data)
    if problem is not None:
        return [], [QuarantinedFile(path, *problem)]
    assert text is not None
    if not text:
        return [], [QuarantinedFile(path, "empty", "no text after removing the byte order mark")]
    if not text.strip():
        return [], [QuarantinedFile(path, "whitespace_only", f"{len(text)} whitespace characters")]

    if suffix in TEXT_SUFFIXES:
        title = _markdown_h1(text) or posixpath.basename(path)
        return [Document(content_hash(text), text, path, path, title)], []
    if suffix == ".json":
        return _read_json(path, text, cfg)
    return _read_jsonl(path, text, cfg)


def _read_converted(path: str, data: bytes, cfg: IngestConfig) -> tuple[list[Document], list[QuarantinedFile]]:
    """A PDF, Office, spreadsheet, HTML or EPUB file as one Markdown document (hxd2_ray.ingest.formats)."""
    try:
        converted = convert(path, data, cfg)
    except Rejected as rejected:
        return [], [QuarantinedFile(path, rejected.reason, rejected.detail)]
    skipped = [QuarantinedFile(path, reason, detail) for reason, detail in converted.skipped]
    text = converted.text
    if not text.strip():
        if skipped:  # every page was a scan: the skipped row says why
            return [], skipped
        return [], [QuarantinedFile(path, "empty", "no text in the converted file")]
    bad_text = surrogate_reason([text, converted.title])
    if bad_text:
        return [], [QuarantinedFile(path, "undecodable", bad_text)]
    title = converted.title or _markdown_h1(text) or posixpath.basename(path)
    return [Document(content_hash(text), text, path, path, title, converted.regions)], skipped


def _suffix(path: str) -> str:
    name = posixpath.basename(path.replace("\\", "/"))
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def _decode(data: bytes) -> tuple[str | None, tuple[str, str] | None]:
    """Text with BOM removed and CRLF folded, or a (reason, detail) pair."""
    # UTF-32 first: its little-endian BOM starts with the UTF-16 one.
    for bom, codec in (
        (codecs.BOM_UTF32_LE, "utf-32"),
        (codecs.BOM_UTF32_BE, "utf-32"),
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            try:
                text = data.decode(codec)
            except UnicodeDecodeError as exc:
                return None, ("undecodable", f"{codec} byte order mark, then {exc.reason} at byte {exc.start}")
            if _control_ratio(text[:_SNIFF_BYTES]) > _CONTROL_RATIO or "\x00" in text:
                return None, ("binary", f"control characters in {codec} text")
            return _normalize(text.removeprefix("\ufeff")), None
    head = data[:_SNIFF_BYTES]
    nul = data.find(b"\x00")
    if nul >= 0:
        return None, ("binary", f"NUL byte at offset {nul}")
    if head and sum(b in _CONTROL_BYTES for b in head) / len(head) > _CONTROL_RATIO:
        return None, ("binary", f"more than {_CONTROL_RATIO:.0%} control bytes in the first {len(head)} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, ("undecodable", f"not UTF-8: {exc.reason} at byte {exc.start}")
    return _normalize(text), None


def _control_ratio(text: str) -> float:
    if not text:
        return 0.0
    return sum(ord(c) in _CONTROL_BYTES for c in text) / len(text)


def _normalize(text: str) -> str:
    return text.replace("\r\n", "\n")


def _markdown_h1(text: str) -> str:
    in_fence = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            m = _ATX_H1.match(line)
            if m:
                return m.group(1).strip()
    return ""


def _read_json(path: str, text: str, cfg: IngestConfig) -> tuple[list[Document], list[QuarantinedFile]]:
    try:
        value = json.loads(text)
    except _JSON_ERRORS as exc:
        return [], [QuarantinedFile(path, "malformed_json", _json_error(exc, getattr(exc, "lineno", None)))]
    if isinstance(value, dict):
        return _records(path, [(None, value)], cfg)
    if isinstance(value, list):
        if not value:
            return [], [QuarantinedFile(path, "empty", "empty JSON list")]
        return _records(path, [(f"record {i}", v) for i, v in enumerate(value, 1)], cfg)
    kind = type(value).__name__
    return [], [QuarantinedFile(path, "malformed_json", f"top level is a {kind}, not an object or a list")]


# ValueError covers JSONDecodeError and over-long integer literals; RecursionError, absurdly deep nesting.
_JSON_ERRORS = (ValueError, RecursionError)


def _json_error(exc: BaseException, lineno: int | None) -> str:
    where = f"line {lineno}" if lineno is not None else "document"
    if isinstance(exc, json.JSONDecodeError):
        return f"{where} column {exc.colno}: {exc.msg}"
    return f"{where}: {type(exc).__name__}: {str(exc)[:200]}"


def _read_jsonl(path: str, text: str, cfg: IngestConfig) -> tuple[list[Document], list[QuarantinedFile]]:
    # split("\n"), not splitlines(): U+2028 and friends may sit raw inside a JSON string.
    items: list[tuple[str | None, Any]] = []
    bad: list[QuarantinedFile] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            items.append((f"line {lineno}", json.loads(line)))
        except _JSON_ERRORS as exc:
            bad.append(QuarantinedFile(path, "malformed_json", _json_error(exc, lineno)))
    docs, more_bad = _records(path, items, cfg)
    return docs, bad + more_bad


def _read_parquet(path: str, data: bytes, cfg: IngestConfig) -> tuple[list[Document], list[QuarantinedFile]]:
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        names = set(pf.schema_arrow.names)
        if cfg.text_field not in names:
            detail = f"no column {cfg.text_field!r} (has {sorted(names)})"
            return [], [QuarantinedFile(path, "missing_text_field", detail)]
        columns = [c for c in (cfg.text_field, cfg.id_field, cfg.title_field) if c in names]
        rows = pf.read(columns=list(dict.fromkeys(columns))).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as exc:
        return [], [QuarantinedFile(path, "unreadable", f"parquet: {str(exc)[:300]}")]
    if not rows:
        return [], [QuarantinedFile(path, "empty", "parquet file has no rows")]
    return _records(path, [(f"row {i}", r) for i, r in enumerate(rows, 1)], cfg)


def _records(
    path: str, items: Iterable[tuple[str | None, Any]], cfg: IngestConfig
) -> tuple[list[Document], list[QuarantinedFile]]:
    """Documents from (where, record) pairs; ``where`` is None for a file that holds a single object."""
    docs: list[Document] = []
    bad: list[QuarantinedFile] = []
    for where, rec in items:
        prefix = f"{where}: " if where else ""
        if not isinstance(rec, dict):
            bad.append(QuarantinedFile(path, "malformed_json", f"{prefix}a {type(rec).__name__}, not an object"))
            continue
        bad_text = surrogate_reason([rec.get(cfg.text_field), rec.get(cfg.id_field), rec.get(cfg.title_field)])
        if bad_text:  # a JSON "\ud800" escape: no encoder (Arrow, the chunker, the models) accepts it
            bad.append(QuarantinedFile(path, "undecodable", f"{prefix}{bad_text}"))
            continue
        text = rec.get(cfg.text_field)
        if not isinstance(text, str) or not text:
            what = "missing" if text is None else ("empty" if text == "" else f"a {type(text).__name__}")
            bad.append(QuarantinedFile(path, "missing_text_field", f"{prefix}field {cfg.text_field!r} is {what}"))
            continue
        text = _normalize(text)
        if not text.strip():
            bad.append(QuarantinedFile(path, "whitespace_only", f"{prefix}field {cfg.text_field!r} is blank"))
            continue
        own_id = rec.get(cfg.id_field)
        if own_id is not None and own_id != "":
            source_id = str(own_id)
        elif where is None:
            source_id = path
        else:
            source_id = f"{path}#{where.rsplit(' ', 1)[-1]}"
        title = rec.get(cfg.title_field)
        if not isinstance(title, str) or not title.strip():
            title = _markdown_h1(text) or posixpath.basename(path)
        docs.append(Document(content_hash(text), text, path, source_id, title.strip()))
    return docs, bad


__all__ = [
    "list_input_files",
    "load_documents",
    "precheck",
    "read_documents",
    "resolve_filesystem",
    "select_inputs",
]
