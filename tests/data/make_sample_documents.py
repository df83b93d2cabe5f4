"""Write the sample corpus's two documents (issue 41): a two-page PDF with a table whose second page answers a
sample question, and a short DOCX. Run ``python tests/data/make_sample_documents.py`` to remake them; the text is
ours (facts also in Wikipedia), kept short since each chunk costs the demo's small model about 10 s."""

from __future__ import annotations

import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import document_files  # noqa: E402 - after the repository root is on the path

CORPUS = ROOT / "hxd2_ray" / "sample_data" / "corpus"
PDF_PAGES = [
    [
        ("h1", "Prizes of Stanford neuroscientists"),
        ("p", "This note lists prizes won by Stanford University neuroscientists. The table is on the next page."),
    ],
    [
        ("h2", "Prize table"),
        (
            "table",
            [
                ["Scientist", "Prize", "Year"],
                ["Thomas C. Südhof", "Nobel Prize in Physiology or Medicine", "2013"],
                ["Brian Kobilka", "Nobel Prize in Chemistry", "2012"],
                ["Karl Deisseroth", "Lasker Award", "2021"],
            ],
        ),
        ("p", "Karl Deisseroth shared the 2021 Lasker Award for the development of optogenetics."),
    ],
]
DOCX_BLOCKS: list[tuple[str, str]] = [
    ("h1", "Optogenetics at Stanford"),
    (
        "p",
        "Optogenetics uses light-sensitive proteins from microbes to switch chosen neurons on or off with light. "
        "Karl Deisseroth's laboratory at Stanford University published the method in 2005 with Edward Boyden and "
        "Feng Zhang.",
    ),
]


def main() -> None:
    stamp = datetime(2024, 1, 1, tzinfo=timezone.utc)
    (CORPUS / "stanford_prizes.pdf").write_bytes(
        document_files.pdf_bytes(PDF_PAGES, title="Prizes of Stanford neuroscientists", created=stamp)
    )
    minimal_docx(CORPUS / "optogenetics.docx", DOCX_BLOCKS, title="Optogenetics at Stanford")


# python-docx's own template holds 800 KB of styles; a hand-made package with the one heading style is 2 KB.
_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_PARTS = {
    "[Content_Types].xml": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
        '<Override PartName="/word/styles.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/>'
        '<Override PartName="/docProps/core.xml" '
        'ContentType="application/vnd.openxmlformats-package.core-properties+xml"/></Types>'
    ),
    "_rels/.rels": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'officeDocument" Target="word/document.xml"/>'
        '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/package/2006/relationships/metadata/'
        'core-properties" Target="docProps/core.xml"/></Relationships>'
    ),
    "word/_rels/document.xml.rels": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" '
        'Target="styles.xml"/></Relationships>'
    ),
    "word/styles.xml": (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:styles {_NS}>'
        '<w:style w:type="paragraph" w:default="1" w:styleId="Normal"><w:name w:val="Normal"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/>'
        '<w:basedOn w:val="Normal"/><w:rPr><w:b/><w:sz w:val="32"/></w:rPr></w:style></w:styles>'
    ),
}


def minimal_docx(path: Path, blocks: list[tuple[str, str]], title: str) -> None:
    body = "".join(
        (f'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>{escape(text)}</w:t></w:r></w:p>')
        if kind == "h1"
        else f"<w:p><w:r><w:t>{escape(text)}</w:t></w:r></w:p>"
        for kind, text in blocks
    )
    parts = {
        **_PARTS,
        "word/document.xml": f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {_NS}>'
        f"<w:body>{body}</w:body></w:document>",
        "docProps/core.xml": '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
        f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{escape(title)}</dc:title></cp:coreProperties>',
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, xml in parts.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))  # the same bytes on every run
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, xml)


if __name__ == "__main__":
    main()
