"""open_index: manifest first (missing, half-written, mismatched), then graph + families + the name list."""

from __future__ import annotations

import json
import shutil

import pytest

from hxd2_ray.config import HashingEmbeddingConfig
from hxd2_ray.errors import IndexMismatchError, IndexNotFoundError
from hxd2_ray.index_store.manifest import MANIFEST_NAME
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.index import cache_dir_for
from tests.unit.retrieval_fixtures import DIM, build_tiny_index, index_config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_index(tmp_path_factory.mktemp("idx") / "index")


def test_open_reads_everything(tiny):
    with open_index(tiny.root, tiny.cfg) as idx:
        assert idx.manifest.embedding_dim == DIM and idx.manifest.counts["entities"] == 7
        assert set(idx.families) == {"entity_name", "entity_mix", "relation_keywords", "relation_mix", "chunk"}
        assert idx.graph.counts()["entities"] == 7
        assert len(idx.names) == 7 and idx.names.search("neurexin", 90, 1) == [("neurexin", 100.0)]
        assert idx.family("chunk").count == 4
        with pytest.raises(IndexNotFoundError, match="not opened"):
            idx.family("nope")


def test_only_the_families_asked_for_are_opened(tiny):
    with open_index(tiny.root, tiny.cfg, families=("entity_name", "entity_mix", "relation_mix", "chunk")) as idx:
        assert "relation_keywords" not in idx.families


def test_missing_path(tmp_path, tiny):
    with pytest.raises(IndexNotFoundError, match="does not exist"):
        open_index(tmp_path / "nowhere", tiny.cfg)


def test_half_written_index_has_no_manifest(tmp_path):
    built = build_tiny_index(tmp_path / "half", manifest=False)
    with pytest.raises(IndexNotFoundError, match="missing or half-written"):
        open_index(built.root, built.cfg)


def test_unreadable_manifest(tmp_path, tiny):
    root = tmp_path / "copy"
    shutil.copytree(tiny.root, root)
    (root / MANIFEST_NAME).write_text("{ truncated", encoding="utf-8")
    with pytest.raises(IndexNotFoundError, match="unreadable"):
        open_index(root, tiny.cfg)


def test_manifest_without_graph(tmp_path, tiny):
    root = tmp_path / "nograph"
    shutil.copytree(tiny.root, root)
    shutil.rmtree(root / "graph.kuzu") if (root / "graph.kuzu").is_dir() else (root / "graph.kuzu").unlink()
    with pytest.raises(IndexNotFoundError, match="graph.kuzu"):
        open_index(root, tiny.cfg)


@pytest.mark.parametrize(
    "embedding, pattern",
    [
        (HashingEmbeddingConfig(dim=64), r"'hashing-v1' \(dim 128\).*'hashing-v1' \(dim 64\)"),
        (HashingEmbeddingConfig(dim=DIM, model_id="other-model"), r"'hashing-v1'.*'other-model'"),
    ],
)
def test_embedding_mismatch_names_both_models(tiny, embedding, pattern):
    cfg = tiny.cfg.model_copy(update={"embedding": embedding})
    with pytest.raises(IndexMismatchError, match=pattern):
        open_index(tiny.root, cfg)


def test_family_dimension_must_match_the_manifest(tmp_path, tiny):
    root = tmp_path / "baddim"
    shutil.copytree(tiny.root, root)
    manifest = json.loads((root / MANIFEST_NAME).read_text())
    manifest["embedding_dim"] = 32
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))
    cfg = index_config(dim=32)
    with pytest.raises(IndexMismatchError, match="dimension 128 but the manifest says 32"):
        open_index(root, cfg)


def test_cache_dir_differs_per_build(tiny):
    from pathlib import Path

    with open_index(tiny.root, tiny.cfg) as idx:
        a = cache_dir_for(Path("/c"), "s3://b/i", idx.manifest)
        b = cache_dir_for(Path("/c"), "s3://b/i", idx.manifest.model_copy(update={"created_at": "later"}))
        assert a != b and a == cache_dir_for(Path("/c"), "s3://b/i", idx.manifest)
