"""Properties of the ingest decoders (``hxd2_ray/ingest/sources.py``): a file's bytes are untrusted input.

``read_documents`` never raises: every file gives documents or quarantine rows with a known reason, and
every document is what the Arrow tables and the chunker need (valid Unicode, content-hash id, no CRLF).
"""

from __future__ import annotations

import codecs
import json

from hypothesis import given
from hypothesis import strategies as st

from hxd2_ray.config import IngestConfig
from hxd2_ray.ingest.sources import read_documents
from hxd2_ray.types import content_hash
from tests.property.strategies import any_text, is_valid_unicode, json_values, small_json

CFG = IngestConfig(max_file_bytes=4096)
REASONS = {
    "too_large",
    "unsupported_type",
    "empty",
    "whitespace_only",
    "binary",
    "undecodable",
    "malformed_json",
    "missing_text_field",
    "unreadable",
    # the documents' converters (hxd2_ray/ingest: .pdf and the Office, web and book formats)
    "type_mismatch",
    "corrupt",
    "encrypted",
    "zip_bomb",
    "too_many_pages",
    "no_text_layer",
    "timeout",
}
SUFFIXES = [".txt", ".md", ".json", ".jsonl", ".parquet", ".pdf", "", ".TXT", ".markdown"]
BOMS = [b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE]


def _check(path, data):
    docs, bad = read_documents(path, data, CFG)
    assert docs or bad, "a file vanished without a document or a quarantine row"
    for q in bad:
        assert q.reason in REASONS and q.source_path == path and is_valid_unicode(q.detail), q
    for d in docs:
        assert d.text.strip() and "\r\n" not in d.text and d.id == content_hash(d.text)
        for value in (d.text, d.title, d.source_id, d.source_path):
            assert isinstance(value, str) and is_valid_unicode(value), d
    return docs, bad


@given(st.binary(max_size=600), st.sampled_from(SUFFIXES), st.sampled_from(BOMS))
def test_any_bytes_under_any_name(data, suffix, bom):
    _check(f"/corpus/file{suffix}", bom + data)


@given(any_text(200), st.sampled_from([".txt", ".md"]), st.sampled_from(["utf-8", "utf-16", "utf-32", "utf-8-sig"]))
def test_any_text_in_any_unicode_encoding(text, suffix, encoding):
    _check(f"/corpus/doc{suffix}", text.encode(encoding, "surrogatepass"))


records = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"text": st.one_of(any_text(80), small_json)},
        optional={"id": st.one_of(any_text(10), small_json), "title": st.one_of(any_text(20), small_json)},
    ),
)


@given(st.lists(records, max_size=6), st.booleans())
def test_json_and_jsonl_records(items, as_lines):
    if as_lines:
        data = "\n".join(json.dumps(r) for r in items).encode()
        _check("/corpus/records.jsonl", data)
    else:
        _check("/corpus/records.json", json.dumps(items).encode())


@given(st.lists(st.text(max_size=60), max_size=5), st.integers(0, 4))
def test_jsonl_with_broken_lines_keeps_the_good_ones(texts, broken_at):
    good = [t for t in texts if t.strip()]
    lines = [json.dumps({"text": t}) for t in good]
    lines.insert(min(broken_at, len(lines)), '{"text": "cut off')
    docs, bad = _check("/corpus/half.jsonl", "\n".join(lines).encode())
    assert [d.text for d in docs] == [t.replace("\r\n", "\n") for t in good]
    assert [q.reason for q in bad if q.reason == "malformed_json"] == ["malformed_json"]
