from __future__ import annotations

import random
from pathlib import Path

import pytest

from hxd2_ray.chunking.splitter import detect_language, split_document
from hxd2_ray.config import ChunkingConfig, IngestConfig, S3Config
from hxd2_ray.ingest.sources import load_documents
from hxd2_ray.types import Document, content_hash

SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data" / "corpus"

EN_WORDS = "graph retrieval entity relation chunk index vector shard actor node edge keyword summary".split()
ZH_SENTENCES = [
    "水稻是世界上最重要的粮食作物之一。",
    "分蘖角度决定了水稻的株型！",
    "TAC4基因调节内源性生长素的含量和分布？",
    "研究人员在日本晴中定位了这个基因；",
    "该基因位于2号染色体的正链上，编码一种核蛋白。",
]


def _doc(text: str, path: str = "/c/doc.txt") -> Document:
    return Document(content_hash(text), text, path, path, "t")


def _english(n_words: int, seed: int = 0, newline_every: int = 0) -> str:
    rng = random.Random(seed)
    words = []
    for i in range(n_words):
        words.append(rng.choice(EN_WORDS) + ("." if i % 11 == 10 else ""))
        if newline_every and i % newline_every == newline_every - 1:
            words.append("\n\n" if i % (3 * newline_every) == 0 else "\n")
    return " ".join(words).replace(" \n", "\n").replace("\n ", "\n")


def _chinese(n_sentences: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(ZH_SENTENCES) for _ in range(n_sentences))


def _check_invariants(doc: Document, chunks, cfg: ChunkingConfig):
    assert [c.order for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert doc.text[c.start : c.start + len(c.text)] == c.text
        assert len(c.text) <= cfg.chunk_size_chars
        assert len(c.text.strip()) >= cfg.min_chunk_chars
        assert c.doc_id == doc.id
        assert c.id == content_hash(doc.id, str(c.start), c.text)
    starts = [c.start for c in chunks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


# ------------------------------------------------------------------------------------------ language


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("The rice gene TAC4 controls tiller angle.", "en"),
        ("水稻分蘖角度由TAC4基因控制。", "zh"),
        ("OsAL50是oryza sativa albino leaf 50，在光合色素代谢、光合作用和叶绿体生成的调节中发挥作用。", "zh"),
        ("The Chinese name 水稻 means rice; the rest of this sentence is plain English prose.", "en"),
        ("", "en"),
        ("12345 !!! ---", "en"),
    ],
)
def test_detect_language(text, lang):
    assert detect_language(text) == lang


# ------------------------------------------------------------------------------------------ offsets and sizes


@pytest.mark.parametrize("size,overlap", [(50, 0), (100, 20), (300, 64), (768, 32)])
@pytest.mark.parametrize("kind", ["en", "en_lines", "zh", "repeat", "mixed"])
def test_chunks_are_verbatim_slices_within_size(kind, size, overlap):
    text = {
        "en": _english(800),
        "en_lines": _english(800, seed=1, newline_every=17),
        "zh": _chinese(120),
        "repeat": "abc def ghi. " * 300,
        "mixed": _english(200, seed=2) + "\n\n" + _chinese(40, seed=3) + "\n" + "x" * 1000 + "\n\n" + _english(50),
    }[kind]
    cfg = ChunkingConfig(chunk_size_chars=size, overlap_chars=overlap, min_chunk_chars=1)
    doc = _doc(text)
    chunks = split_document(doc, cfg)
    assert chunks
    _check_invariants(doc, chunks, cfg)
    # Nothing but whitespace is lost between neighbouring chunks.
    covered = [False] * len(text)
    for c in chunks:
        covered[c.start : c.start + len(c.text)] = [True] * len(c.text)
    assert all(ok or text[i].isspace() for i, ok in enumerate(covered))


def test_unbreakable_run_is_cut_to_size():
    cfg = ChunkingConfig(chunk_size_chars=64, overlap_chars=8)
    doc = _doc("y" * 1000)
    chunks = split_document(doc, cfg)
    _check_invariants(doc, chunks, cfg)
    assert chunks[0].start == 0 and chunks[-1].start + len(chunks[-1].text) == 1000
    assert all(b.start <= a.start + len(a.text) for a, b in zip(chunks, chunks[1:]))


def test_overlap_between_neighbours_of_long_english_text():
    cfg = ChunkingConfig(chunk_size_chars=120, overlap_chars=30)
    doc = _doc(_english(600))
    chunks = split_document(doc, cfg)
    assert len(chunks) > 5
    overlaps = []
    for a, b in zip(chunks, chunks[1:]):
        end_a = a.start + len(a.text)
        assert b.start < end_a, "neighbours should share text"
        overlaps.append(end_a - b.start)
        assert doc.text[b.start : end_a] == a.text[b.start - a.start :]
    assert max(overlaps) <= cfg.overlap_chars


def test_no_overlap_when_disabled():
    cfg = ChunkingConfig(chunk_size_chars=120, overlap_chars=0)
    chunks = split_document(_doc(_english(600)), cfg)
    for a, b in zip(chunks, chunks[1:]):
        assert b.start >= a.start + len(a.text)


def test_chinese_splits_at_sentence_punctuation():
    cfg = ChunkingConfig(chunk_size_chars=60, overlap_chars=0, min_chunk_chars=1)
    text = _chinese(60, seed=5)
    doc = _doc(text)
    chunks = split_document(doc, cfg)
    assert len(chunks) > 5
    _check_invariants(doc, chunks, cfg)
    for c in chunks:
        assert c.language == "zh"
        assert c.text[-1] in "。！？；", c.text  # punctuation stays at the end of its sentence
        assert c.text[0] not in "。！？；，"
    assert sum(c.text.endswith("。") for c in chunks) >= len(chunks) // 2


def test_chinese_comma_fallback_for_long_sentence():
    cfg = ChunkingConfig(chunk_size_chars=40, overlap_chars=0, min_chunk_chars=1)
    text = "，".join(["水稻日本晴基因组第三代测序结果显示"] * 12) + "。"
    chunks = split_document(_doc(text), cfg)
    assert all(c.text.endswith(("，", "。")) for c in chunks)


# ------------------------------------------------------------------------------------------ markdown


MARKDOWN = """Preface text before any header.

# Guide

Intro of the guide.

## Install

Run the installer.

```bash
# this is a shell comment, not a header
pip install hxd2
```

### Details

Deep detail text here.

#### Too deep

Still part of Details.

## Usage

Usage text.

# Appendix

Closing words.
"""


def test_markdown_header_paths_and_fenced_code():
    cfg = ChunkingConfig(chunk_size_chars=2000, overlap_chars=0, min_chunk_chars=5)
    doc = _doc(MARKDOWN, "/c/guide.md")
    chunks = split_document(doc, cfg)
    _check_invariants(doc, chunks, cfg)
    got = [(c.header_path, c.text.split("\n")[0]) for c in chunks]
    assert got == [
        ("", "Preface text before any header."),
        ("Guide", "Intro of the guide."),
        ("Guide > Install", "Run the installer."),
        ("Guide > Install > Details", "Deep detail text here."),
        ("Guide > Usage", "Usage text."),
        ("Appendix", "Closing words."),
    ]
    install = chunks[2].text
    assert "# this is a shell comment, not a header" in install and install.endswith("```")
    assert "#### Too deep" in chunks[3].text
    assert all(not c.text.lstrip().startswith(("# ", "## ", "### ")) for c in chunks)  # header lines not in text


def test_markdown_header_levels_setting():
    cfg = ChunkingConfig(chunk_size_chars=2000, overlap_chars=0, markdown_header_levels=1)
    chunks = split_document(_doc(MARKDOWN, "/c/guide.md"), cfg)
    assert [c.header_path for c in chunks] == ["", "Guide", "Appendix"]
    assert "## Install" in chunks[1].text

    flat_cfg = ChunkingConfig(chunk_size_chars=2000, markdown_header_levels=0)
    flat = split_document(_doc(MARKDOWN, "/c/guide.md"), flat_cfg)
    assert [c.header_path for c in flat] == [""] and flat[0].text == MARKDOWN.strip()


def test_markdown_detected_in_txt_by_header_lines_but_not_hashtags():
    chunks = split_document(_doc("# Title\n\nBody of the text file.\n"), ChunkingConfig())
    assert [(c.header_path, c.text) for c in chunks] == [("Title", "Body of the text file.")]
    text = "#hashtag is not a header\nplain text follows here."
    chunks = split_document(_doc(text), ChunkingConfig())
    assert [(c.header_path, c.text) for c in chunks] == [("", text)]


def test_long_markdown_section_is_split_and_keeps_its_path():
    text = "# Top\n\n## Part\n\n" + _english(400) + "\n\n## Other\n\n" + _chinese(50)
    cfg = ChunkingConfig(chunk_size_chars=150, overlap_chars=20)
    doc = _doc(text, "x.md")
    chunks = split_document(doc, cfg)
    _check_invariants(doc, chunks, cfg)
    paths = [c.header_path for c in chunks]
    assert paths[0] == "Top > Part" and paths[-1] == "Top > Other"
    assert paths == sorted(paths, key=["Top > Part", "Top > Other"].index)
    assert {c.language for c in chunks if c.header_path == "Top > Other"} == {"zh"}
    assert {c.language for c in chunks if c.header_path == "Top > Part"} == {"en"}


# ------------------------------------------------------------------------------------------ ids and filtering


def test_deterministic():
    doc = _doc(_english(500) + "\n\n" + _chinese(30))
    cfg = ChunkingConfig(chunk_size_chars=100, overlap_chars=16)
    assert split_document(doc, cfg) == split_document(doc, cfg)


def test_ids_change_with_text_and_are_unique():
    cfg = ChunkingConfig(chunk_size_chars=100, overlap_chars=16)
    text = _english(300)
    a = split_document(_doc(text), cfg)
    b = split_document(_doc(text.replace("graph", "GRAPH", 1)), cfg)
    assert len({c.id for c in a}) == len(a)
    assert a[0].id != b[0].id
    assert a[0].doc_id != b[0].doc_id
    # The same chunk text at a different offset or in another document gets another id.
    same = split_document(_doc("short text one"), cfg)[0]
    moved = split_document(_doc("  short text one"), cfg)[0]
    assert same.text == moved.text and same.id != moved.id


def test_min_chunk_chars_drops_short_chunks():
    text = "# A\n\nok\n\n# B\n\nthis section is long enough to keep\n"
    cfg = ChunkingConfig(min_chunk_chars=10)
    chunks = split_document(_doc(text, "a.md"), cfg)
    assert [(c.order, c.header_path, c.text) for c in chunks] == [(0, "B", "this section is long enough to keep")]
    assert split_document(_doc("tiny"), cfg) == []
    assert len(split_document(_doc("tiny"), ChunkingConfig(min_chunk_chars=4))) == 1


def test_sample_corpus_chunks():
    docs, _ = load_documents(str(SAMPLE), IngestConfig(), S3Config())
    cfg = ChunkingConfig()
    langs = set()
    for doc in docs:
        chunks = split_document(doc, cfg)
        assert chunks
        _check_invariants(doc, chunks, cfg)
        langs |= {c.language for c in chunks}
    assert langs == {"en", "zh"}
