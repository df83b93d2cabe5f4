"""Documents benchmark (issue 41): the two PDF candidates side by side, and a mixed folder indexed end to end.

``--mode pdf`` (default): the same PDFs, made here with known text, read by PDFium (``pypdfium2``, the default
converter) and by ``pdfminer.six``: pages/s on one core (this process, one thread) and text fidelity, the
word-sequence similarity (rapidfuzz Indel, 1.0 = every word in order) of the extracted text to the text written.
Three kinds: ruled tables (fpdf2), two columns (fpdf2), and an HTML page with a table and CSS columns printed to
PDF by Chromium (skipped when ``chromium`` is missing).

``--mode index``: ``--docs`` generated documents (PDF, DOCX, PPTX, HTML in turn) indexed by ``hxd2 index`` with
the scripted LLM and the hashing embedder; prints pages/s per core of the ingest stage and each stage's time.

    .venv/bin/python bench/documents.py --mode pdf --copies 20
    .venv/bin/python bench/documents.py --mode index --docs 1000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import document_files as files  # noqa: E402 - after the repository root is on the path

WORDS = (
    "harbour survey tide vessel cargo pier lighthouse ferry anchor beacon channel dredge quay berth crane "
    "tonnage pilot chart buoy signal"
).split()


def _sentence(i: int, n: int = 14) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] + str((i + k) % 97) for k in range(n)) + "."


def table_pdf(seed: int) -> tuple[bytes, str]:
    rows = [
        ["Vessel", "Cargo", "Tonnes"],
        *[[f"vessel{seed}x{r}", WORDS[r % len(WORDS)], str(100 + r)] for r in range(12)],
    ]
    pages = [[("h1", f"Report {seed}"), ("p", _sentence(seed)), ("table", rows), ("p", _sentence(seed + 1))]]
    truth = " ".join([f"Report {seed}", _sentence(seed), *(" ".join(r) for r in rows), _sentence(seed + 1)])
    return files.pdf_bytes(pages), truth


def columns_pdf(seed: int) -> tuple[bytes, str]:
    left = [_sentence(seed * 10 + k, 18) for k in range(4)]
    right = [_sentence(seed * 10 + 5 + k, 18) for k in range(4)]
    return files.two_column_pdf(left, right), " ".join(left + right)


def chromium_pdf(seed: int, workdir: Path) -> tuple[bytes, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    rows = [["Vessel", "Cargo"], *[[f"ship{seed}x{r}", WORDS[(r + seed) % len(WORDS)]] for r in range(10)]]
    paragraphs = [_sentence(seed * 10 + k, 16) for k in range(6)]
    table = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    html = (
        "<html><body style='font: 12px sans-serif'><h1>Printed " + str(seed) + "</h1>"
        f"<table border=1>{table}</table><div style='column-count: 2'>"
        + "".join(f"<p>{p}</p>" for p in paragraphs)
        + "</div></body></html>"
    )
    src, out = workdir / f"page{seed}.html", workdir / f"page{seed}.pdf"
    src.write_text(html, encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer", f"--print-to-pdf={out}"]
    subprocess.run([*cmd, src.as_uri()], capture_output=True, timeout=120, check=False)
    if not out.exists():
        return None
    return out.read_bytes(), " ".join([f"Printed {seed}", *(" ".join(r) for r in rows), *paragraphs])


def read_pdfium(data: bytes) -> tuple[str, int]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:
        texts = []
        for i in range(len(pdf)):
            page = pdf[i]
            textpage = page.get_textpage()
            texts.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return "\n".join(texts), len(pdf)
    finally:
        pdf.close()


def read_pdfminer(data: bytes) -> tuple[str, int]:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LAParams, LTTextContainer

    texts, pages = [], 0
    for layout in extract_pages(io.BytesIO(data), laparams=LAParams()):
        pages += 1
        texts.append("\n".join(el.get_text() for el in layout if isinstance(el, LTTextContainer)))
    return "\n".join(texts), pages


def fidelity(extracted: str, truth: str) -> float:
    from rapidfuzz.distance import Indel

    return Indel.normalized_similarity(extracted.split(), truth.split())


def bench_pdf(copies: int) -> None:
    readers: dict[str, Callable[[bytes], tuple[str, int]]] = {"pypdfium2": read_pdfium, "pdfminer.six": read_pdfminer}
    with tempfile.TemporaryDirectory() as tmp:
        kinds: dict[str, list[tuple[bytes, str]]] = {
            "tables (fpdf2)": [table_pdf(i) for i in range(copies)],
            "two columns (fpdf2)": [columns_pdf(i) for i in range(copies)],
        }
        printed = [p for p in (chromium_pdf(i, Path(tmp)) for i in range(min(copies, 5))) if p is not None]
        if printed:
            kinds["table + CSS columns (Chromium print)"] = printed
        print("| PDFs | reader | pages/s (1 core) | fidelity (mean) | fidelity (min) |")
        print("| --- | --- | ---: | ---: | ---: |")
        for kind, docs in kinds.items():
            for name, read in readers.items():
                read(docs[0][0])  # import and warm up outside the clock
                scores, pages, spent = [], 0, 0.0
                for data, truth in docs:
                    start = time.process_time()
                    text, n = read(data)
                    spent += time.process_time() - start
                    pages += n
                    scores.append(fidelity(text, truth))
                rate = pages / spent if spent else float("inf")
                mean = sum(scores) / len(scores)
                print(f"| {kind} x{len(docs)} | {name} | {rate:,.0f} | {mean:.3f} | {min(scores):.3f} |")


def bench_index(docs: int) -> None:
    from jobs import index as index_job
    from tests.stand_ins import STAND_INS

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        pages = 0
        for i in range(docs):
            kind = i % 4
            if kind == 0:
                data = files.pdf_bytes([[("h1", f"Report {i}"), ("p", _sentence(i))], [("p", _sentence(i + 1))]])
                (corpus / f"d{i}.pdf").write_bytes(data)
                pages += 2
            elif kind == 1:
                (corpus / f"d{i}.docx").write_bytes(files.docx_bytes([("h1", f"Memo {i}"), ("p", _sentence(i))]))
                pages += 1
            elif kind == 2:
                (corpus / f"d{i}.pptx").write_bytes(files.pptx_bytes([(f"Deck {i}", [("p", _sentence(i))])]))
                pages += 1
            else:
                (corpus / f"d{i}.html").write_text(files.html_page(f"Page {i}", f"<p>{_sentence(i)}</p>"))
                pages += 1
        out = Path(tmp) / "index"
        cpus = os.cpu_count() or 1
        start = time.perf_counter()
        args = ["--input", str(corpus), "--output", str(out), *STAND_INS, "--set", "embedding.dim=64", "--json"]
        buf = io.StringIO()
        saved, sys.stdout = sys.stdout, buf
        try:
            code = index_job.main(args)
        finally:
            sys.stdout = saved
        wall = time.perf_counter() - start
        if code != 0:
            raise SystemExit(f"hxd2 index failed ({code})")
        summary = json.loads(buf.getvalue())
        stages = summary["seconds_per_stage"]
        ingest_s = float(stages.get("ingest", wall))
        print(f"{docs} documents, {pages} pages, {summary['chunks']} chunks, {cpus} cores, {wall:.1f} s in all")
        print(f"ingest: {pages / ingest_s / cpus:.1f} pages/s per core ({ingest_s:.1f} s)")
        print("stages (s): " + json.dumps(stages, sort_keys=True))
        print("quarantined: " + json.dumps(summary.get("quarantine_reasons", {})))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("pdf", "index"), default="pdf")
    parser.add_argument("--copies", type=int, default=20, help="PDFs of each kind (--mode pdf)")
    parser.add_argument("--docs", type=int, default=40, help="documents to index (--mode index)")
    args = parser.parse_args()
    bench_pdf(args.copies) if args.mode == "pdf" else bench_index(args.docs)


if __name__ == "__main__":
    main()
