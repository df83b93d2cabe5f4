from __future__ import annotations

import codecs
import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hxd2_ray.config import IngestConfig, S3Config
from hxd2_ray.ingest.sources import list_input_files, load_documents, precheck, read_documents, resolve_filesystem
from hxd2_ray.types import content_hash

CFG = IngestConfig()
S3 = S3Config()
DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data"


def _reasons(quarantined):
    return [q.reason for q in quarantined]


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


# ------------------------------------------------------------------------------------------ formats


def test_txt_is_one_document_with_hash_id_and_path_source_id():
    docs, bad = read_documents("/c/a.txt", b"Hello world.\nSecond line.\n", CFG)
    assert bad == []
    [doc] = docs
    assert doc.text == "Hello world.\nSecond line.\n"
    assert doc.id == content_hash(doc.text)
    assert doc.source_path == doc.source_id == "/c/a.txt"
    assert doc.title == "a.txt"


def test_markdown_title_is_first_h1_outside_code():
    text = "```\n# not a title\n```\nintro\n\n# Real Title #\n\n## Sub\nbody\n"
    [doc], _ = read_documents("notes.markdown", text.encode(), CFG)
    assert doc.title == "Real Title"
    assert doc.text == text


def test_json_object_and_list():
    obj = {"id": 7, "title": "Seven", "text": "the seventh"}
    [doc], bad = read_documents("one.json", json.dumps(obj).encode(), CFG)
    assert bad == [] and doc.source_id == "7" and doc.title == "Seven" and doc.text == "the seventh"

    records = [{"text": "first"}, {"text": "# Heading\nsecond", "id": "b"}]
    docs, bad = read_documents("/x/many.json", json.dumps(records).encode(), CFG)
    assert bad == []
    assert [d.source_id for d in docs] == ["/x/many.json#1", "b"]
    assert [d.title for d in docs] == ["many.json", "Heading"]
    assert all(d.source_path == "/x/many.json" for d in docs)


def test_jsonl_one_document_per_line_and_line_numbers_in_source_id():
    data = b'{"text": "alpha"}\n\n{"text": "beta", "title": "B"}\r\n'
    docs, bad = read_documents("/x/r.jsonl", data, CFG)
    assert bad == []
    assert [(d.text, d.source_id, d.title) for d in docs] == [
        ("alpha", "/x/r.jsonl#1", "r.jsonl"),
        ("beta", "/x/r.jsonl#3", "B"),
    ]


def test_jsonl_keeps_line_separator_characters_inside_strings():
    data = json.dumps({"text": "a\u2028b"}, ensure_ascii=False).encode()
    [doc], bad = read_documents("u.jsonl", data, CFG)
    assert bad == [] and doc.text == "a\u2028b"


def test_custom_field_names():
    cfg = IngestConfig(text_field="body", id_field="doc_no", title_field="headline")
    [doc], _ = read_documents("c.jsonl", b'{"body": "x y z", "doc_no": 3, "headline": "H"}', cfg)
    assert (doc.text, doc.source_id, doc.title) == ("x y z", "3", "H")


def test_parquet_rows():
    table = pa.table({"id": ["p1", None], "title": ["T1", None], "text": ["row one", "row two"], "extra": [1, 2]})
    docs, bad = read_documents("/d/t.parquet", _parquet_bytes(table), CFG)
    assert bad == []
    assert [(d.text, d.source_id, d.title) for d in docs] == [
        ("row one", "p1", "T1"),
        ("row two", "/d/t.parquet#2", "t.parquet"),
    ]


def test_parquet_without_text_column_and_with_bad_rows():
    docs, bad = read_documents("a.parquet", _parquet_bytes(pa.table({"body": ["x"]})), CFG)
    assert docs == [] and _reasons(bad) == ["missing_text_field"]

    docs, bad = read_documents("b.parquet", _parquet_bytes(pa.table({"text": ["ok", None, ""]})), CFG)
    assert [d.text for d in docs] == ["ok"]
    assert _reasons(bad) == ["missing_text_field", "missing_text_field"]
    assert "row 2" in bad[0].detail and "row 3" in bad[1].detail

    docs, bad = read_documents("c.parquet", b"PAR1 not really parquet PAR1", CFG)
    assert docs == [] and _reasons(bad) == ["unreadable"]


def test_same_text_same_id_across_files():
    a, _ = read_documents("a.txt", b"same words", CFG)
    b, _ = read_documents("b.md", b"same words", CFG)
    c, _ = read_documents("c.jsonl", b'{"text": "same words"}', CFG)
    assert a[0].id == b[0].id == c[0].id == content_hash("same words")


# ------------------------------------------------------------------------------------------ normalization


def test_utf8_bom_is_stripped_and_crlf_folded():
    [doc], _ = read_documents("b.txt", codecs.BOM_UTF8 + b"line one\r\nline two\r\n", CFG)
    assert doc.text == "line one\nline two\n"
    assert doc.id == content_hash("line one\nline two\n")


def test_lone_cr_and_other_text_kept_verbatim():
    [doc], _ = read_documents("b.txt", b"  a\rb\t\n", CFG)
    assert doc.text == "  a\rb\t\n"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_bom(codec):
    bom = {"utf-16-be": codecs.BOM_UTF16_BE}.get(codec, b"")
    data = bom + "水稻 rice\r\n".encode(codec)
    [doc], bad = read_documents("z.txt", data, CFG)
    assert bad == [] and doc.text == "水稻 rice\n"


def test_bom_in_json():
    [doc], bad = read_documents("j.json", codecs.BOM_UTF8 + b'{"text": "t"}', CFG)
    assert bad == [] and doc.text == "t"


# ------------------------------------------------------------------------------------------ quarantine


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("nul.txt", b"text\x00with a NUL", "binary"),
        ("ctl.md", bytes([1, 2, 3, 4, 5, 6, 7, 14, 15, 16]) * 10 + b"abc", "binary"),
        ("latin.txt", "déjà vu".encode("latin-1"), "undecodable"),
        ("empty.md", b"", "empty"),
        ("bom_only.txt", codecs.BOM_UTF8, "empty"),
        ("ws.txt", b" \n\t \n", "whitespace_only"),
        ("ws.jsonl", b"\n\n  \n", "whitespace_only"),
        ("x.pdf", b"%PDF", "type_mismatch"),  # too short to hold a PDF header
        ("x.mp4", b"\0\0\0\x18ftypmp42", "unsupported_type"),
        ("noext", b"plain", "unsupported_type"),
        ("bad.json", b'{"text": "x",}', "malformed_json"),
        ("scalar.json", b"42", "malformed_json"),
        ("nolist.json", b"[]", "empty"),
        ("miss.json", b'{"body": "x"}', "missing_text_field"),
        ("num.json", b'{"text": 5}', "missing_text_field"),
        ("blank.json", b'{"text": ""}', "missing_text_field"),
        ("wsrec.json", b'{"text": "  "}', "whitespace_only"),
    ],
)
def test_quarantine_reasons(name, data, reason):
    docs, bad = read_documents(name, data, CFG)
    assert docs == []
    assert _reasons(bad) == [reason]
    assert bad[0].source_path == name and bad[0].detail


def test_suffix_outside_configured_extensions_is_unsupported():
    cfg = IngestConfig(extensions=(".txt",))
    _, bad = read_documents("a.md", b"# hi", cfg)
    assert _reasons(bad) == ["unsupported_type"]
    _, bad = read_documents("a.odt", b"a,b", IngestConfig(extensions=(".odt",)))
    assert _reasons(bad) == ["unsupported_type"] and "no reader" in bad[0].detail


def test_too_large():
    docs, bad = read_documents("big.txt", b"x" * 101, IngestConfig(max_file_bytes=100))
    assert docs == [] and _reasons(bad) == ["too_large"]


def test_precheck_rejects_by_name_and_size_only():
    cfg = IngestConfig(max_file_bytes=100)
    assert precheck("a.txt", 100, cfg) is None
    assert precheck("a.TXT", None, cfg) is None
    assert precheck("a.txt", 101, cfg).reason == "too_large"
    assert precheck("movie.mp4", 5, cfg).reason == "unsupported_type"


def test_load_documents_quarantines_large_files_without_reading(tmp_path):
    (tmp_path / "big.txt").write_text("x" * 200)
    (tmp_path / "ok.txt").write_text("small file")
    docs, bad = load_documents(str(tmp_path), IngestConfig(max_file_bytes=100), S3)
    assert [d.text for d in docs] == ["small file"]
    assert [(Path(q.source_path).name, q.reason) for q in bad] == [("big.txt", "too_large")]


def test_partly_bad_jsonl_keeps_good_lines():
    data = b'{"text": "good one"}\n{"text": broken\n[1, 2]\n{"text": "good two"}\n{"nope": 1}\n'
    docs, bad = read_documents("p.jsonl", data, CFG)
    assert [d.text for d in docs] == ["good one", "good two"]
    assert [(q.reason, q.detail.split(":")[0]) for q in bad] == [
        ("malformed_json", "line 2 column 10"),
        ("malformed_json", "line 3"),
        ("missing_text_field", "line 5"),
    ]


def test_never_raises_on_random_bytes():
    import random

    rng = random.Random(0)
    for i in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        for suffix in (".txt", ".json", ".jsonl", ".parquet", ".md"):
            docs, bad = read_documents(f"r{i}{suffix}", data, CFG)
            assert docs or bad


# ------------------------------------------------------------------------------------------ bad_inputs folder


def _bad_input_spec():
    spec = importlib.util.spec_from_file_location("make_bad_inputs", DATA / "make_bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bad_inputs_folder_is_up_to_date_and_quarantined():
    spec = _bad_input_spec()
    folder = DATA / "bad_inputs"
    assert sorted(p.name for p in folder.iterdir()) == sorted(spec.FILES)
    for name, (data, reasons, n_docs) in spec.FILES.items():
        assert (folder / name).read_bytes() == data, f"{name} is stale: rerun tests/data/make_bad_inputs.py"
        docs, bad = read_documents(str(folder / name), data, CFG)
        assert _reasons(bad) == list(reasons), name
        assert len(docs) == n_docs, name

    docs, bad = load_documents(str(folder), CFG, S3)
    assert [d.source_id for d in docs] == ["good-1"]
    assert sorted(_reasons(bad)) == sorted(r for _, rs, _ in spec.FILES.values() for r in rs)


# ------------------------------------------------------------------------------------------ listing


@pytest.fixture
def tree(tmp_path):
    for rel in [
        "b.txt",
        "a.md",
        "sub/c.jsonl",
        "sub/deep/d.txt",
        "sub/deep/e.pdf",
        ".hidden.txt",
        ".git/x.txt",
        "sub/.cache/y.md",
    ]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("content of " + rel)
    return tmp_path


def test_list_folder_recursive_sorted_without_hidden(tree):
    files = list_input_files(str(tree), CFG, S3)
    assert files == [str(tree / r) for r in ["a.md", "b.txt", "sub/c.jsonl", "sub/deep/d.txt", "sub/deep/e.pdf"]]
    assert list_input_files(str(tree) + "/", CFG, S3) == files


def test_list_single_file_and_missing(tree):
    assert list_input_files(str(tree / "sub" / "c.jsonl"), CFG, S3) == [str(tree / "sub" / "c.jsonl")]
    with pytest.raises(FileNotFoundError):
        list_input_files(str(tree / "nope"), CFG, S3)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("*.txt", ["b.txt"]),
        ("*", ["a.md", "b.txt"]),
        ("**/*.txt", ["b.txt", "sub/deep/d.txt"]),
        ("sub/**", ["sub/c.jsonl", "sub/deep/d.txt", "sub/deep/e.pdf"]),
        ("sub/*/?.txt", ["sub/deep/d.txt"]),
        ("**/[ab].*", ["a.md", "b.txt"]),
        ("nothing/*.md", []),
    ],
)
def test_list_glob(tree, pattern, expected):
    assert list_input_files(f"{tree}/{pattern}", CFG, S3) == [str(tree / r) for r in expected]


def test_relative_and_file_uri(tree, monkeypatch):
    monkeypatch.chdir(tree)
    assert list_input_files("sub/deep", CFG, S3) == [str(tree / "sub/deep/d.txt"), str(tree / "sub/deep/e.pdf")]
    assert list_input_files(f"file://{tree}/b.txt", CFG, S3) == [str(tree / "b.txt")]


def test_resolve_s3_filesystem_from_endpoint_url():
    import pyarrow.fs as pafs

    s3 = S3Config(endpoint_url="http://127.0.0.1:9", region="eu-west-1")
    fs, path = resolve_filesystem("s3://bucket/some/prefix/", s3)
    assert isinstance(fs, pafs.S3FileSystem)
    assert path == "bucket/some/prefix"
    assert fs.region == "eu-west-1"


# ------------------------------------------------------------------------------------------ bundled sample corpus


def test_sample_corpus_reads_cleanly():
    docs, bad = load_documents(str(SAMPLE / "corpus"), CFG, S3)
    assert bad == []
    assert len(docs) >= 12
    assert len({d.id for d in docs}) == len(docs)
    titles = {d.title for d in docs}
    assert {"Thomas C. Südhof", "Carla J. Shatz", "TAC4（Tiller Angle Control 4）"} <= titles
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 60_000
    for line in (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        assert set(q) == {"id", "question", "answers"} and q["answers"]
