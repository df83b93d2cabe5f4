from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from hxd2_ray.config import IngestConfig, S3Config
from hxd2_ray.index_store.output import open_output
from hxd2_ray.ingest.sources import (
    list_input_files,
    load_documents,
    read_documents,
    resolve_filesystem,
)
from hxd2_ray.types import content_hash

pytestmark = pytest.mark.integration

CFG = IngestConfig()


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


@pytest.fixture
def seeded(s3_client, s3_bucket):
    objects = {
        "corpus/a.txt": b"Alpha passage about Stanford University.\r\n",
        "corpus/sub/b.md": b"# Beta\n\nA markdown passage.\n",
        "corpus/sub/deep/c.jsonl": b'{"id": "c1", "text": "first record"}\n{"text": oops}\n{"text": "third record"}\n',
        "corpus/d.parquet": _parquet_bytes(pa.table({"id": ["d1"], "text": ["parquet row"]})),
        "corpus/bin.txt": b"\x00\x01\x02 binary",
        "corpus/notes.pdf": b"%PDF-1.4",
        "corpus/.hidden.txt": b"never listed",
        "corpus/.cache/x.txt": b"never listed",
        "corpus/empty-dir/": b"",  # a console-made "folder" marker
        "other/z.txt": b"outside the prefix",
    }
    for key, body in objects.items():
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=body)
    return s3_bucket


def test_list_prefix_sorted_recursive_without_hidden(s3_server, seeded):
    s3 = S3Config(endpoint_url=s3_server)
    files = list_input_files(f"s3://{seeded}/corpus", CFG, s3)
    names = ["a.txt", "bin.txt", "d.parquet", "notes.pdf", "sub/b.md", "sub/deep/c.jsonl"]
    assert files == [f"s3://{seeded}/corpus/{k}" for k in names]
    assert list_input_files(f"s3://{seeded}/corpus/", CFG, s3) == files


def test_list_glob_single_file_and_missing(s3_server, seeded):
    s3 = S3Config(endpoint_url=s3_server)
    assert list_input_files(f"s3://{seeded}/corpus/**/*.md", CFG, s3) == [f"s3://{seeded}/corpus/sub/b.md"]
    assert list_input_files(f"s3://{seeded}/*/*.txt", CFG, s3) == [
        f"s3://{seeded}/corpus/a.txt",
        f"s3://{seeded}/corpus/bin.txt",
        f"s3://{seeded}/other/z.txt",
    ]
    assert list_input_files(f"s3://{seeded}/corpus/a.txt", CFG, s3) == [f"s3://{seeded}/corpus/a.txt"]
    with pytest.raises(FileNotFoundError):
        list_input_files(f"s3://{seeded}/nope", CFG, s3)


def test_read_through_resolved_filesystem(s3_server, seeded):
    s3 = S3Config(endpoint_url=s3_server)
    docs, bad = [], []
    for uri in list_input_files(f"s3://{seeded}/corpus", CFG, s3):
        fs, path = resolve_filesystem(uri, s3)
        assert isinstance(fs, pafs.S3FileSystem)
        with fs.open_input_stream(path) as f:
            d, q = read_documents(uri, f.read(), CFG)
        docs += d
        bad += q
    by_source = {d.source_id: d for d in docs}
    assert sorted(by_source) == sorted(
        [
            "c1",
            "d1",
            f"s3://{seeded}/corpus/a.txt",
            f"s3://{seeded}/corpus/sub/b.md",
            f"s3://{seeded}/corpus/sub/deep/c.jsonl#3",
        ]
    )
    alpha = by_source[f"s3://{seeded}/corpus/a.txt"]
    assert alpha.text == "Alpha passage about Stanford University.\n" and alpha.id == content_hash(alpha.text)
    assert by_source[f"s3://{seeded}/corpus/sub/b.md"].title == "Beta"
    assert sorted((q.source_path.rsplit("/", 1)[-1], q.reason) for q in bad) == [
        ("bin.txt", "binary"),
        ("c.jsonl", "malformed_json"),
        ("notes.pdf", "corrupt"),
    ]


def test_load_documents_checks_size_before_reading(s3_server, seeded):
    s3 = S3Config(endpoint_url=s3_server)
    docs, bad = load_documents(f"s3://{seeded}/corpus/sub", IngestConfig(max_file_bytes=40), s3)
    assert [d.title for d in docs] == ["Beta"]
    assert [(q.source_path, q.reason) for q in bad] == [(f"s3://{seeded}/corpus/sub/deep/c.jsonl", "too_large")]


def test_output_filesystem_roundtrip(s3_server, s3_client, s3_bucket, tmp_path):
    s3 = S3Config(endpoint_url=s3_server)
    fs, root = open_output(f"s3://{s3_bucket}/index/v1", s3)
    pq.write_table(pa.table({"x": [1, 2]}), f"{root}/part-0.parquet", filesystem=fs)
    with fs.open_output_stream(f"{root}/manifest.json") as f:
        f.write(json.dumps({"ok": True}).encode())
    keys = sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="index/")["Contents"])
    assert keys == ["index/v1/manifest.json", "index/v1/part-0.parquet"]
    assert pq.read_table(f"{root}/part-0.parquet", filesystem=fs).column("x").to_pylist() == [1, 2]

    local_fs, local_root = open_output(str(tmp_path / "out" / "idx"), s3)
    assert isinstance(local_fs, pafs.LocalFileSystem)
    assert (tmp_path / "out" / "idx").is_dir() and local_root == str(tmp_path / "out" / "idx")
