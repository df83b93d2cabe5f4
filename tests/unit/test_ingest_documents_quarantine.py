"""Bad documents are quarantined with their reason and bounded in time and memory (issue 41); converter versions and
settings are part of the index fingerprint."""

from __future__ import annotations

from importlib import metadata

import pytest

from hxd2_ray.config import HxdConfig, IngestConfig, load_config
from hxd2_ray.config.sources import CONVERTER_PACKAGES, DOCUMENT_SUFFIXES
from hxd2_ray.ingest import formats
from hxd2_ray.ingest.sources import precheck, read_documents
from tests import document_files as files

CFG = IngestConfig()
PAGES = [[("h1", "Title"), ("p", "A page of text about the harbour.")], [("p", "Second page.")]]


def _rows(name: str, data: bytes, cfg: IngestConfig = CFG) -> list[tuple[str, str]]:
    docs, bad = read_documents(name, data, cfg)
    assert docs == [], docs
    return [(q.reason, q.detail) for q in bad]


def test_an_encrypted_pdf():
    [(reason, detail)] = _rows("locked.pdf", files.pdf_bytes(PAGES, user_password="secret"))
    assert reason == "encrypted" and "password" in detail


def test_an_encrypted_office_file_is_an_ole2_container_with_its_encryption_info():
    data = files.OLE2 + b"\0" * 500 + "EncryptionInfo".encode("utf-16-le") + b"\0" * 100
    assert _rows("locked.docx", data)[0][0] == "encrypted"
    assert _rows("old.xlsx", files.OLE2 + b"\0" * 600)[0][0] == "type_mismatch"  # a legacy .xls renamed


def test_a_zip_bomb_is_refused_from_its_declared_size_before_any_member_is_read():
    bomb = files.zip_bomb("word/document.xml", 64 << 20)
    assert len(bomb) < 200_000  # about a thousand to one
    [(reason, detail)] = _rows("bomb.docx", bomb, IngestConfig(max_unpacked_bytes=32 << 20))
    assert reason == "zip_bomb" and "ingest.max_unpacked_bytes=33554432" in detail


@pytest.mark.parametrize("fmt, core", [("docx", "word/document.xml"), ("xlsx", "xl/workbook.xml")])
def test_a_zip_bomb_that_lies_about_its_size_fails_its_crc(fmt, core):
    # The document part itself unpacks to 8 MiB of zeros but declares 100 bytes: the reader stops at 100 bytes
    # (memory stays bounded) and the CRC check fails.
    honest = files.zip_bomb(core, 8 << 20)
    lying = files.lying_zip(honest, "bomb.bin", 100)
    lying = files.lying_zip(lying, core, 100)
    [(reason, _)] = _rows(f"liar.{fmt}", lying, IngestConfig(max_unpacked_bytes=1 << 20))
    assert reason == "corrupt"


def test_ten_thousand_pages_are_refused_before_their_text_is_read():
    data = files.many_pages_pdf(10_000)
    [(reason, detail)] = _rows("huge.pdf", data)
    assert reason == "too_many_pages" and detail == "10000 pages > ingest.max_pages=2000"
    docs, bad = read_documents("huge.pdf", data, IngestConfig(max_pages=10_000))
    assert bad == [] or bad[0].reason == "empty"  # blank pages: no text, but read


@pytest.mark.parametrize(
    "name, data, found",
    [
        ("report.docx", files.pdf_bytes(PAGES), "a PDF"),
        ("report.pdf", files.docx_bytes([("p", "text")]), "a zip archive"),
        ("report.pdf", b"just some text, not a PDF at all", "text or another format"),
        ("slides.pptx", files.docx_bytes([("p", "text")]), "without ppt/presentation.xml"),
        ("page.html", files.pdf_bytes(PAGES), "a PDF"),
        ("table.csv", files.xlsx_bytes({"S": [["a"]]}), "a zip archive"),
    ],
)
def test_an_extension_that_lies_about_the_content(name, data, found):
    [(reason, detail)] = _rows(name, data)
    assert reason == "type_mismatch" and found in detail


def test_a_file_past_its_time_bound():
    # a bound shorter than any real work: the first page's check finds it spent
    [(reason, detail)] = _rows("slow.pdf", files.pdf_bytes(PAGES), IngestConfig(max_convert_s=1e-9))
    assert reason == "timeout" and detail.startswith("conversion took over ingest.max_convert_s=1e-09 s (at page 1")


def test_a_converter_bug_costs_the_file_not_the_job(monkeypatch):
    def broken(data, bounds):
        raise KeyError("a parser bug")

    monkeypatch.setitem(formats.CONVERTERS, ".pdf", formats.Converter("pdf", "pypdfium2", broken, located=True))
    [(reason, detail)] = _rows("any.pdf", files.pdf_bytes(PAGES))
    assert reason == "corrupt" and "KeyError" in detail


def test_document_suffixes_pass_the_precheck_and_other_suffixes_do_not():
    for suffix in DOCUMENT_SUFFIXES:
        assert precheck(f"a{suffix}", 10, CFG) is None, suffix
        assert formats.converter_for(f"a{suffix}") is not None
    assert precheck("a.doc", 10, CFG).reason == "unsupported_type"
    assert precheck("a.pdf", 10, IngestConfig(extensions=(".txt",))).reason == "unsupported_type"


def test_the_fingerprint_names_every_converter_package():
    assert {c.package for c in formats.CONVERTERS.values()} == set(CONVERTER_PACKAGES)


def test_converter_versions_and_settings_change_the_fingerprint(monkeypatch):
    base = HxdConfig()
    fp, staging = base.index_fingerprint("p"), base.staging_fingerprint("p")
    assert load_config(None, ["ingest.ocr=true"]).staging_fingerprint("p") != staging
    assert load_config(None, ["ingest.sheet_rows_per_block=5"]).staging_fingerprint("p") != staging
    # limits decide what is quarantined, as the file filters do: not in the fingerprint
    assert load_config(None, ["ingest.max_pages=5"]).index_fingerprint("p") == fp
    real = metadata.version

    def newer_pdfium(name: str) -> str:
        return "99.0" if name == "pypdfium2" else real(name)

    monkeypatch.setattr("hxd2_ray.config.sources.metadata.version", newer_pdfium)
    assert base.staging_fingerprint("p") != staging and base.index_fingerprint("p") != fp


def test_with_ocr_on_the_tesseract_version_is_in_the_fingerprint(monkeypatch):
    cfg = load_config(None, ["ingest.ocr=true"])
    before = cfg.staging_fingerprint("p")
    monkeypatch.setattr("hxd2_ray.config.sources.tesseract_version", lambda: "tesseract 9.9.9")
    assert cfg.staging_fingerprint("p") != before
    assert HxdConfig().staging_fingerprint("p") == HxdConfig().staging_fingerprint("p")
