"""A damaged index under a valid manifest gets a clear error naming the damaged file, never a traceback.

Issue 17, item 12: a truncated ``graph.kuzu`` or a missing Faiss shard ended in a Kùzu / Faiss traceback. The
manifest records a size and a sha256 per file; opening an index checks the sizes (checksums on request:
``retrieval.verify_checksums`` or ``hxd2 index verify``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hxd2_ray.config import load_config

TRIPLES = "Alice|knows|Bob\nBob|works_at|Acme\nAcme|located_in|Paris\nCarol|knows|Alice\nDave|founded|Acme\n"


@pytest.fixture(scope="module")
def kb_index(tmp_path_factory) -> Path:
    """A small complete index (the KB path: no Ray, hashing embedder) — copied per test before damaging it."""
    from hxd2_ray.indexer.kb_index import build_kb_index

    folder = tmp_path_factory.mktemp("kb")
    (folder / "kb.txt").write_text(TRIPLES, encoding="utf-8")
    build_kb_index(load_config(None, ["embedding.dim=16"]), folder / "kb.txt", folder / "index", progress=None)
    return folder / "index"


@pytest.fixture
def index(kb_index, tmp_path) -> Path:
    return Path(shutil.copytree(kb_index, tmp_path / "index"))


def _query(capsys, index: Path, *extra: str) -> tuple[int, str]:
    from jobs import query

    code = query.main(["--index", str(index), "--mode", "dual", "--set", "embedding.dim=16", *extra, "Who knows Bob?"])
    err = capsys.readouterr().err
    return code, err


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_the_manifest_records_size_and_sha256_of_every_file_the_query_side_reads(index):
    import hashlib

    from hxd2_ray.index_store.manifest import read_manifest

    files = read_manifest(index).files
    on_disk = sorted(
        str(p.relative_to(index))
        for p in index.rglob("*")
        if p.is_file() and p.name not in ("manifest.json", "index_summary.json")
    )
    assert sorted(files) == on_disk and "graph.kuzu" in files
    for rel, meta in files.items():
        data = (index / rel).read_bytes()
        assert meta == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, rel


def test_a_truncated_graph_is_named_not_a_traceback(index, capsys):
    graph = index / "graph.kuzu"
    graph.write_bytes(graph.read_bytes()[:100_000])
    code, err = _query(capsys, index)
    assert code == 2
    line = _error_line(err)
    assert "graph.kuzu" in line and "100000 bytes" in line and "rebuild" in line


def test_a_missing_faiss_shard_is_named_not_a_traceback(index, capsys):
    (index / "vectors" / "entity_name" / "shard-0001.faiss").unlink()
    code, err = _query(capsys, index)
    assert code == 2
    assert "vectors/entity_name/shard-0001.faiss is missing" in _error_line(err)


def test_a_flipped_byte_is_caught_only_when_checksums_are_verified(index, capsys):
    from hxd2_ray.errors import IndexDamagedError
    from hxd2_ray.retrieval.index import open_index

    shard = index / "vectors" / "relation_mix" / "shard-0000.faiss"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    open_index(index, load_config(None, ["embedding.dim=16"])).close()  # sizes match: opens
    with pytest.raises(IndexDamagedError, match=r"vectors/relation_mix/shard-0000\.faiss .*sha256"):
        open_index(index, load_config(None, ["embedding.dim=16", "retrieval.verify_checksums=true"]))
    code, err = _query(capsys, index, "--set", "retrieval.verify_checksums=true")
    assert code == 2 and "shard-0000.faiss" in _error_line(err)


def test_hxd2_index_verify(index, capsys):
    from jobs import index as index_job

    assert index_job.main(["verify", "--index", str(index)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "files" in out
    (index / "vectors" / "chunk" / "keys.arrow").write_bytes(b"ARROW1")
    assert index_job.main(["verify", "--index", str(index), "--json"]) == 2
    captured = capsys.readouterr()
    assert "vectors/chunk/keys.arrow" in _error_line(captured.err)
    assert json.loads(captured.out)["damaged"][0]["file"] == "vectors/chunk/keys.arrow"


def test_an_index_whose_manifest_predates_checksums_still_opens(index):
    from hxd2_ray.retrieval.index import open_index

    manifest = json.loads((index / "manifest.json").read_text())
    manifest.pop("files", None)
    (index / "manifest.json").write_text(json.dumps(manifest))
    open_index(index, load_config(None, ["embedding.dim=16", "retrieval.verify_checksums=true"])).close()
