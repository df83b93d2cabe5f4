"""Index manifest: roundtrip, atomic local write, object-store write, missing/corrupt/mismatch errors."""

from __future__ import annotations

import json

import pyarrow.fs as pafs
import pytest

import hxd2_ray
from hxd2_ray.config import HashingEmbeddingConfig, HxdConfig
from hxd2_ray.errors import IndexMismatchError, IndexNotFoundError
from hxd2_ray.graph.base import GRAPH_SCHEMA_VERSION
from hxd2_ray.index_store.manifest import (
    MANIFEST_FORMAT_VERSION,
    IndexManifest,
    build_manifest,
    check_compatible,
    read_manifest,
    write_manifest,
)

FAMILIES = {"entity_name": {"family": "entity_name", "dim": 64, "count": 3, "index_type": "flat", "num_shards": 2}}
COUNTS = {"documents": 1, "chunks": 2, "entities": 3, "relations": 1, "mentions": 3}


def _manifest() -> IndexManifest:
    return build_manifest(HxdConfig(), "p1", COUNTS, FAMILIES)


def test_build_fills_from_config():
    m = _manifest()
    cfg = HxdConfig()
    assert m.fingerprint == cfg.index_fingerprint("p1") and m.prompt_version == "p1"
    assert m.llm_model_id == "scripted-echo" and m.embedding_model_id == "hashing-v1" and m.embedding_dim == 64
    assert m.graph_schema_version == GRAPH_SCHEMA_VERSION and m.format_version == MANIFEST_FORMAT_VERSION
    assert m.hxd2_ray_version == hxd2_ray.__version__
    assert m.created_at.endswith("Z") and "T" in m.created_at
    assert m.config["vectors"]["num_shards"] == cfg.vectors.num_shards
    with pytest.raises(Exception):
        m.counts = {}  # frozen


def test_local_roundtrip_atomic(tmp_path):
    m = _manifest()
    where = write_manifest(tmp_path / "idx", m)
    assert where.endswith("idx/manifest.json")
    assert read_manifest(tmp_path / "idx") == m
    assert read_manifest(tmp_path / "idx" / "manifest.json") == m
    assert read_manifest(f"file://{tmp_path}/idx") == m
    # Overwrite leaves only the manifest (no temp files).
    write_manifest(tmp_path / "idx", m.model_copy(update={"prompt_version": "p2"}))
    assert [p.name for p in (tmp_path / "idx").iterdir()] == ["manifest.json"]
    assert read_manifest(tmp_path / "idx").prompt_version == "p2"


def test_filesystem_roundtrip():
    fs = pafs._MockFileSystem()  # a non-local pyarrow filesystem, like S3 for this code path
    fs.create_dir("bucket/idx")
    m = _manifest()
    write_manifest("bucket/idx", m, filesystem=fs)
    assert read_manifest("bucket/idx", filesystem=fs) == m
    with pytest.raises(IndexNotFoundError, match="no manifest.json at bucket/other/manifest.json"):
        read_manifest("bucket/other", filesystem=fs)


def test_missing_and_corrupt(tmp_path):
    with pytest.raises(IndexNotFoundError, match="the index is missing or was never completed"):
        read_manifest(tmp_path / "nothing")
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(IndexNotFoundError, match="unreadable"):
        read_manifest(tmp_path)


def test_newer_format_and_unknown_fields(tmp_path):
    data = _manifest().model_dump(mode="json")
    data["future_field"] = 1  # newer writers may add fields
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    assert read_manifest(tmp_path).fingerprint == data["fingerprint"]
    data["format_version"] = MANIFEST_FORMAT_VERSION + 1
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(IndexMismatchError, match="upgrade"):
        read_manifest(tmp_path)


def test_check_compatible():
    m = build_manifest(HxdConfig(embedding=HashingEmbeddingConfig(dim=32)), "p1", COUNTS, {})
    check_compatible(m, "hashing-v1", 32)
    with pytest.raises(IndexMismatchError, match="'hashing-v1' \\(dim 32\\).*'bce-embedding' \\(dim 768\\)"):
        check_compatible(m, "bce-embedding", 768)
    with pytest.raises(IndexMismatchError, match="dim 64"):
        check_compatible(m, "hashing-v1", 64)
    with pytest.raises(IndexMismatchError, match="graph schema"):
        check_compatible(m.model_copy(update={"graph_schema_version": GRAPH_SCHEMA_VERSION + 1}), "hashing-v1", 32)


def test_create_and_family_info_roundtrip(tmp_path):
    from hxd2_ray.vectors.base import FamilyInfo

    info = FamilyInfo(
        family="chunk",
        dim=8,
        count=5,
        index_type="ivf",
        num_shards=2,
        params={"nlist": 1, "nprobe": 16},
        shard_counts=(2, 3),
    )
    m = IndexManifest.create(
        fingerprint="f",
        prompt_version="p",
        llm_model_id="l",
        embedding_model_id="e",
        embedding_dim=8,
        counts=COUNTS,
        vector_families={"chunk": info.to_dict()},
        config={},
    )
    write_manifest(tmp_path / "manifest.json", m)  # the manifest path itself works too
    back = read_manifest(tmp_path)
    assert FamilyInfo.from_dict(back.vector_families["chunk"]) == info
