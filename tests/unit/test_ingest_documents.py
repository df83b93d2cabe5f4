"""Documents into text (issue 41): each format's converter keeps headings, tables, reading order and the location of
every chunk; the files made here (tests/document_files.py) hold known text, so what comes back is checked against
it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from hxd2_ray.chunking.splitter import split_document
from hxd2_ray.config import ChunkingConfig, HxdConfig, IngestConfig
from hxd2_ray.ingest.formats import location_of
from hxd2_ray.ingest.sources import read_documents
from hxd2_ray.stages.ingest_stage import ParseAndChunk
from tests import document_files as files

CFG = IngestConfig()
CHUNKING = ChunkingConfig()

REPORT_PAGES = [
    [("h1", "Harbour survey"), ("p", "The survey of the old harbour began in the spring.")],
    [
        ("h2", "Catch by species"),
        ("table", [["Species", "Tonnes"], ["Herring", "412"], ["Mackerel", "237"]]),
        ("p", "The lighthouse keeper Ingrid Volden counted the boats each morning."),
    ],
]


def _one(name: str, data: bytes, cfg: IngestConfig = CFG):
    docs, bad = read_documents(f"/corpus/{name}", data, cfg)
    assert bad == [] and len(docs) == 1, bad
    return docs[0], split_document(docs[0], CHUNKING)


def test_pdf_pages_are_regions_and_page_two_is_named():
    doc, chunks = _one("survey.pdf", files.pdf_bytes(REPORT_PAGES, title="Harbour survey 2024"))
    assert doc.title == "Harbour survey 2024"  # the PDF's own title, not its file name
    assert [label for _, label in doc.regions] == ["page 1", "page 2"]
    keeper = [c for c in chunks if "Ingrid Volden" in c.text]
    assert len(keeper) == 1 and keeper[0].header_path.startswith("page 2")
    assert location_of(doc.source_path, keeper[0].header_path) == "page 2"
    # no chunk spans two pages: each chunk lies inside one region
    bounds = [*(at for at, _ in doc.regions), len(doc.text)]
    for c in chunks:
        i = max(k for k, at in enumerate(bounds[:-1]) if at <= c.start)
        assert c.start + len(c.text) <= bounds[i + 1], c
    # reading order, and the table's cells in row order
    text = doc.text
    assert text.index("harbour began") < text.index("Herring") < text.index("412") < text.index("Mackerel")


def test_docx_headings_become_the_header_path_and_a_table_stays_whole():
    table = [["Port", "Depth (m)", "Berths"], *[[f"Port {i}", str(8 + i), str(i)] for i in range(12)]]
    data = files.docx_bytes(
        [
            ("h1", "Harbour handbook"),
            ("p", "Opening words about the handbook."),
            ("h2", "Depths"),
            ("p", "Each port's depth at the lowest tide."),
            ("table", table),
            ("h2", "Rules"),
            ("li", "Moor bow first."),
        ],
        title="Handbook",
    )
    doc, chunks = _one("handbook.docx", data)
    assert doc.title == "Handbook" and doc.regions == ()
    tables = [c for c in chunks if "| Port | Depth (m) | Berths |" in c.text]
    assert len(tables) == 1 and tables[0].header_path == "Harbour handbook > Depths"
    assert all(f"| Port {i} | {8 + i} | {i} |" in tables[0].text for i in range(12))  # whole, in one chunk
    rules = next(c for c in chunks if "Moor bow first" in c.text)
    assert rules.header_path == "Harbour handbook > Rules" and rules.text.startswith("- ")
    assert location_of(doc.source_path, rules.header_path) == ""  # a DOCX has no pages


def test_pptx_slides_titles_and_tables():
    data = files.pptx_bytes(
        [
            ("Kickoff", [("p", "Welcome to the planning meeting.")]),
            ("Budget", [("p", "Figures agreed in March."), ("table", [["Item", "Cost"], ["Boats", "90"]])]),
        ]
    )
    doc, chunks = _one("deck.pptx", data)
    assert [label for _, label in doc.regions] == ["slide 1", "slide 2"]
    budget = [c for c in chunks if "| Boats | 90 |" in c.text]
    assert len(budget) == 1 and budget[0].header_path == "slide 2 > Budget"
    assert doc.text.index("Figures agreed") < doc.text.index("| Item | Cost |")  # top to bottom
    assert location_of(doc.source_path, budget[0].header_path) == "slide 2"


def test_xlsx_sheets_and_rows_are_located_and_repeat_the_header():
    sales = [["Region", "Amount"], *[[f"R{i}", i * 1.0] for i in range(45)]]
    data = files.xlsx_bytes({"Sales": sales, "Staff": [["Name"], ["Ada"]]})
    doc, chunks = _one("book.xlsx", data)
    assert [label for _, label in doc.regions] == [
        "sheet Sales rows 2-21",
        "sheet Sales rows 22-41",
        "sheet Sales rows 42-46",
        "sheet Staff rows 2-2",
    ]
    last = next(c for c in chunks if "| R44 | 44 |" in c.text)  # 44.0 is shown as 44
    assert last.header_path == "sheet Sales rows 42-46" and last.text.startswith("| Region | Amount |")
    assert location_of(doc.source_path, last.header_path) == "sheet Sales rows 42-46"


def test_csv_is_a_located_table():
    doc, chunks = _one("people.csv", "name;city\nÅsa;Bergen\nOla;Tromsø\n".encode())
    assert doc.regions == ((0, "rows 2-3"),)
    assert chunks[0].text == "| name | city |\n|---|---|\n| Åsa | Bergen |\n| Ola | Tromsø |"


def test_html_boilerplate_is_left_out():
    body = (
        "<h1>Tide tables</h1><p>High water at <b>06:12</b> today.</p>"
        "<table><tr><th>Day</th><th>High</th></tr><tr><td>Mon</td><td>06:12</td></tr></table>"
        "<ul><li>Spring tides</li><li>Neap tides</li></ul>"
    )
    doc, chunks = _one("tides.html", files.html_page("Tides", body).encode())
    assert doc.title == "Tides"
    for noise in ("NAV LINK", "SCRIPT TEXT", "FOOTER TEXT", "ASIDE TEXT", "Site Home", "font-family"):
        assert noise not in doc.text
    assert "High water at 06:12 today." in doc.text
    assert "| Day | High |\n|---|---|\n| Mon | 06:12 |" in doc.text
    assert "- Spring tides" in doc.text
    assert chunks[0].header_path == "Tide tables"


def test_html_without_main_still_drops_navigation_scripts_and_footers():
    page = (
        files.html_page("Tides", "<p>Only the body text.</p>").replace("<main>", "<div>").replace("</main>", "</div>")
    )
    doc, _ = _one("plain.html", page.encode())
    assert doc.text == "Only the body text."


def test_epub_chapters_in_spine_order():
    data = files.epub_bytes(
        "Sea stories", [("The storm", "<p>Waves broke the pier.</p>"), ("Calm", "<p>The sun came out.</p>")]
    )
    doc, chunks = _one("stories.epub", data)
    assert doc.title == "Sea stories"
    assert [label for _, label in doc.regions] == ["chapter 1", "chapter 2"]
    assert [c.header_path for c in chunks] == ["chapter 1 > The storm", "chapter 2 > Calm"]


def test_a_scanned_page_is_left_out_with_its_reason_and_the_rest_is_kept():
    data = files.scanned_pdf(["SCANNED HARBOUR LOG"], text_page="The typed second page survives.")
    docs, bad = read_documents("/corpus/scan.pdf", data, CFG)
    assert [(q.reason, q.detail) for q in bad] == [("no_text_layer", "page 1 of 2: no text layer; enable ingest.ocr")]
    assert len(docs) == 1 and docs[0].regions == ((0, "page 2"),)
    assert "typed second page" in docs[0].text


def test_ocr_reads_a_scanned_page_when_on():
    data = files.scanned_pdf(["HARBOUR MASTER LOG", "Ferry arrived at noon"])
    docs, bad = read_documents("/corpus/scan.pdf", data, IngestConfig(ocr=True, ocr_languages="eng"))
    assert bad == [] and len(docs) == 1
    assert "HARBOUR MASTER LOG" in docs[0].text and "Ferry arrived at noon" in docs[0].text
    assert docs[0].regions == ((0, "page 1"),)


def test_the_stage_converts_a_mixed_batch_and_never_fails_on_a_bad_file():
    blobs = {
        "/c/survey.pdf": files.pdf_bytes(REPORT_PAGES),
        "/c/bomb.xlsx": files.zip_bomb("xl/workbook.xml", 8 << 20),
        "/c/notes.md": b"# Notes\n\nPlain text still reads.\n",
        "/c/cut.docx": files.docx_bytes([("p", "text")])[:2000],
    }
    cfg = HxdConfig(ingest=IngestConfig(max_unpacked_bytes=4 << 20))
    batch = pa.table({"path": list(blobs), "bytes": pa.array(list(blobs.values()), pa.binary())})
    rows = ParseAndChunk(cfg)(batch).to_pylist()
    by_path = {r["source_path"]: r for r in rows}
    assert by_path["/c/bomb.xlsx"]["reason"] == "zip_bomb"
    assert by_path["/c/cut.docx"]["reason"] == "corrupt"
    assert by_path["/c/notes.md"]["kind"] == "document"
    survey = by_path["/c/survey.pdf"]
    assert survey["kind"] == "document"
    assert [c["header_path"] for c in survey["chunks"]] == ["page 1", "page 2"]


@pytest.mark.parametrize("name", ["a.pdf", "a.docx", "a.pptx", "a.xlsx", "a.epub"])
def test_a_file_whose_every_byte_is_kept_but_truncated_is_corrupt(name):
    makers = {
        "a.pdf": lambda: files.pdf_bytes(REPORT_PAGES),
        "a.docx": lambda: files.docx_bytes([("p", "words " * 400)]),
        "a.pptx": lambda: files.pptx_bytes([("Title", [("p", "words")])]),
        "a.xlsx": lambda: files.xlsx_bytes({"S": [["a"], ["b"]]}),
        "a.epub": lambda: files.epub_bytes("B", [("C", "<p>text</p>")]),
    }
    data = makers[name]()
    docs, bad = read_documents(name, data[: len(data) * 2 // 3], CFG)
    assert docs == [] and [q.reason for q in bad] == ["corrupt"], bad


def test_references_name_the_page_slide_or_sheet():
    from hxd2_ray.retrieval.results import ContextChunk, references_of
    from jobs.query import format_references

    def chunk(cid: str, path: str, header: str) -> ContextChunk:
        return ContextChunk(cid, path, "text", header, "", path, path, 0, None, 0.0)

    refs = references_of(
        [
            chunk("c1", "/corpus/survey.pdf", "page 2 > Catch by species"),
            chunk("c2", "/corpus/survey.pdf", "page 1"),
            chunk("c3", "/corpus/notes.md", "page 2"),  # a Markdown heading that reads like a page: not a location
        ]
    )
    assert [r.locations for r in refs] == [("page 2", "page 1"), ("",)]
    assert refs[0].to_dict()["locations"] == ["page 2", "page 1"]
    text = format_references([r.to_dict() for r in refs])
    assert "survey.pdf, page 2, page 1" in text and "notes.md," not in text
