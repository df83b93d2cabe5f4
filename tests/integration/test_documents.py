"""A folder of real documents indexes end to end on Ray (issue 41): PDF, DOCX, PPTX, XLSX, CSV, HTML and EPUB are
converted by the Ray Data ingest stage; a corrupt, an encrypted and a zip-bomb file are quarantined with their
reasons and the job goes on; the sample question answered on the PDF's second page is retrieved, and its reference
names that page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import index as index_job
from tests import document_files as files
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
FAST = [
    *STAND_INS,
    *("--set", "ray.num_cpus=2", "--set", "ray.ner_batch_size=4", "--set", "embedding.dim=256"),
    *("--set", f"ingest.max_unpacked_bytes={16 << 20}"),
]
QUESTION = "Which award did Karl Deisseroth share in 2021?"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("documents")
    for name in ("stanford_prizes.pdf", "optogenetics.docx", "karl_deisseroth.txt"):
        shutil.copy(SAMPLE / name, folder / name)
    (folder / "deck.pptx").write_bytes(
        files.pptx_bytes([("Lab meeting", [("p", "Agenda: light-gated channels in mice.")])])
    )
    (folder / "budget.xlsx").write_bytes(files.xlsx_bytes({"Costs": [["Item", "Cost"], ["Lasers", 1200]]}))
    (folder / "staff.csv").write_text("name,room\nAda,B12\n", encoding="utf-8")
    (folder / "page.html").write_text(files.html_page("Seminar", "<p>Seminar on neural circuits.</p>"))
    (folder / "book.epub").write_bytes(files.epub_bytes("Notes", [("One", "<p>Chapter one about synapses.</p>")]))
    pages = [[("p", "A page about the harbour survey.")]]
    (folder / "cut.pdf").write_bytes(files.pdf_bytes(pages)[:400])
    (folder / "locked.pdf").write_bytes(files.pdf_bytes(pages, user_password="secret"))
    (folder / "bomb.docx").write_bytes(files.zip_bomb("word/document.xml", 32 << 20))
    return folder


def test_a_folder_of_documents_indexes_and_the_answer_names_its_page(corpus, tmp_path, capsys):
    from jobs import query

    out = tmp_path / "index"
    code = index_job.main(["--input", str(corpus), "--output", str(out), *FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    summary = json.loads(captured.out)
    assert summary["documents"] == 8  # the three sample files and the five good ones made here
    assert summary["quarantine_reasons"] == {"corrupt": 1, "encrypted": 1, "zip_bomb": 1}

    code = query.main(["--index", str(out), "--json", "--mode", "chunk_vector", QUESTION])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    refs = json.loads(captured.out)["references"]
    pdf = [r for r in refs if r["source_path"].endswith("stanford_prizes.pdf")]
    assert pdf and "page 2" in pdf[0]["locations"], refs
