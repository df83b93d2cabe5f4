"""Sharded Faiss families against the NumPy oracle: exactness (flat), recall (ivf/hnsw), layout, ids, errors."""

from __future__ import annotations

import inspect
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pytest

from hxd2_ray.config import VectorsConfig
from hxd2_ray.errors import IndexMismatchError, IndexNotFoundError
from hxd2_ray.types import vector_id
from hxd2_ray.vectors import base as vbase
from hxd2_ray.vectors.base import auto_nlist, family_dir, training_sample
from hxd2_ray.vectors.exact_index import ExactVectorIndex
from hxd2_ray.vectors.faiss_index import FaissFamilyIndex, write_family


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _clustered(seed=0, n=2000, d=32, clusters=20):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, d)).astype(np.float32) * 3
    labels = np.sort(rng.integers(0, clusters, n))  # sorted by cluster: a first-batch sample would be biased
    x = centers[labels] + rng.standard_normal((n, d)).astype(np.float32)
    q = centers[rng.integers(0, clusters, 100)] + rng.standard_normal((100, d)).astype(np.float32)
    return [f"e{i}" for i in range(n)], x, q


def _recall(got, want, k):
    hits = sum(len({key for key, _ in g[:k]} & {key for key, _ in w[:k]}) for g, w in zip(got, want))
    return hits / (k * len(want))


@pytest.mark.parametrize("index_class", [FaissFamilyIndex, ExactVectorIndex])
def test_index_declares_the_protocol(index_class):
    members = [n for n, m in vars(vbase.VectorIndex).items() if callable(m) and not n.startswith("_")]
    assert sorted(members) == ["close", "search"]
    for name in members:
        assert inspect.signature(getattr(index_class, name)) == inspect.signature(getattr(vbase.VectorIndex, name))


def test_flat_matches_exact_oracle(tmp_path):
    rng = np.random.default_rng(1)
    x = _unit(rng, 500, 48)
    keys = [f"key-{i}" for i in range(500)]
    info = write_family(tmp_path, "entity_name", keys, x, VectorsConfig(index_type="flat", num_shards=3))
    assert info.index_type == "flat" and info.count == 500 and sum(info.shard_counts) == 500
    index = FaissFamilyIndex.open(tmp_path, "entity_name")
    oracle = ExactVectorIndex(keys, x)
    queries = _unit(rng, 40, 48)
    got, want = index.search(queries, 10), oracle.search(queries, 10)
    for g, w in zip(got, want):
        assert [k for k, _ in g] == [k for k, _ in w]
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], atol=1e-5)
    # A stored vector finds itself first with cosine 1.
    self_hit = index.search(x[7] * 5.0, 1)  # 1-d query, not normalised: normalised inside
    assert self_hit[0][0][0] == "key-7" and self_hit[0][0][1] == pytest.approx(1.0, abs=1e-5)
    # k larger than the family returns everything; k=0 returns nothing.
    assert len(index.search(queries[:1], 10_000)[0]) == 500
    assert index.search(queries[:2], 0) == [[], []]


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_ann_recall_on_clustered_data(tmp_path, kind):
    keys, x, q = _clustered()
    cfg = VectorsConfig(index_type=kind, num_shards=2, ivf_nprobe=8)
    info = write_family(tmp_path, "chunk", keys, x, cfg, seed=3)
    assert info.index_type == kind
    if kind == "ivf":
        assert info.params["nlist"] == auto_nlist(2000, None, cfg.train_sample_size) == 51
        assert info.params["train_size"] == 2000
    got = FaissFamilyIndex.open(tmp_path, "chunk").search(q, 10)
    want = ExactVectorIndex(keys, x).search(q, 10)
    assert _recall(got, want, 10) >= 0.9


def test_ivf_trains_on_sample_across_whole_family(tmp_path):
    keys, x, q = _clustered(n=4000)
    cfg = VectorsConfig(index_type="ivf", num_shards=2, train_sample_size=800, ivf_nprobe=4)
    info = write_family(tmp_path, "chunk", keys, x, cfg)
    assert info.params["train_size"] == 800 and info.params["nlist"] == 800 // 39
    got = FaissFamilyIndex.open(tmp_path, "chunk").search(q, 10)
    assert _recall(got, ExactVectorIndex(keys, x).search(q, 10), 10) >= 0.9


def test_auto_picks_flat_then_ivf(tmp_path):
    keys, x, _ = _clustered(n=1000)
    small = write_family(tmp_path, "a", keys, x, VectorsConfig(num_shards=2, flat_max_vectors=600))
    assert small.index_type == "flat"
    big = write_family(tmp_path, "b", keys, x, VectorsConfig(num_shards=2, flat_max_vectors=400))
    assert big.index_type == "ivf" and big.params["requested_index_type"] == "auto"


def test_stable_ids_and_results_across_runs(tmp_path):
    keys, x, q = _clustered(n=1500)
    cfg = VectorsConfig(index_type="ivf", num_shards=3)
    runs = []
    for name in ("run1", "run2"):
        write_family(tmp_path / name, "entity_mix", keys, x, cfg, seed=7)
        folder = family_dir(tmp_path / name, "entity_mix")
        idmap = ((folder / "ids.npy").read_bytes(), (folder / "keys.arrow").read_bytes())
        runs.append((idmap, FaissFamilyIndex.open(tmp_path / name, "entity_mix").search(q, 5)))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]


def test_layout_shards_and_idmap_roundtrip(tmp_path):
    rng = np.random.default_rng(2)
    keys = [f"k{i}" for i in range(300)]
    info = write_family(tmp_path, "relation_mix", keys, _unit(rng, 300, 8), VectorsConfig(num_shards=4))
    folder = family_dir(tmp_path, "relation_mix")
    assert sorted(p.name for p in folder.iterdir()) == [
        "family.json",
        "ids.npy",
        "keys.arrow",
        "shard-0000.faiss",
        "shard-0000.ids.npy",
        "shard-0001.faiss",
        "shard-0001.ids.npy",
        "shard-0002.faiss",
        "shard-0002.ids.npy",
        "shard-0003.faiss",
        "shard-0003.ids.npy",
    ]
    meta = json.loads((folder / "family.json").read_text())
    assert meta["dim"] == 8 and meta["count"] == 300 and meta["num_shards"] == 4 and meta["metric"] == "ip"
    assert meta["index_type"] == "flat" and meta["shard_counts"] == list(info.shard_counts)
    assert meta["format_version"] == 2
    ids = np.load(folder / "ids.npy")
    assert ids.dtype == np.int64
    assert (np.diff(ids) > 0).all()  # sorted, unique
    id_keys = pa.ipc.open_file(str(folder / "keys.arrow")).read_all()["key"].to_pylist()
    for vid, key in zip(ids.tolist(), id_keys, strict=True):
        assert vid == vector_id(key)
    assert sorted(id_keys) == sorted(keys)
    assert vbase.family_keys(tmp_path, "relation_mix").to_pylist() == id_keys
    for shard in range(4):  # a flat shard's positions' ids, each in its shard
        assert (np.load(folder / f"shard-{shard:04d}.ids.npy") % 4 == shard).all()
    # Rewriting swaps the folder whole and leaves no temp or old folders behind.
    write_family(tmp_path, "relation_mix", keys[:10], _unit(rng, 10, 8), VectorsConfig(num_shards=2))
    assert sorted(p.name for p in folder.parent.iterdir()) == ["relation_mix"]
    assert FaissFamilyIndex.open(tmp_path, "relation_mix").count == 10


def test_empty_family(tmp_path):
    info = write_family(tmp_path, "relation_keywords", [], np.zeros((0, 16), np.float32), VectorsConfig())
    assert info.count == 0 and info.dim == 16
    folder = family_dir(tmp_path, "relation_keywords")
    assert not list(folder.glob("*.faiss"))
    assert json.loads((folder / "family.json").read_text())["count"] == 0
    index = FaissFamilyIndex.open(tmp_path, "relation_keywords")
    assert index.search(np.ones((2, 16), np.float32), 5) == [[], []]
    with pytest.raises(IndexMismatchError):
        index.search(np.ones((1, 15), np.float32), 5)
    assert ExactVectorIndex([], np.zeros((0, 16), np.float32)).search(np.ones((1, 16)), 3) == [[]]


def test_id_collision_and_duplicate_keys(tmp_path, monkeypatch):
    x = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="duplicate key 'a'"):
        write_family(tmp_path, "f", ["a", "b", "a"], x, VectorsConfig())
    monkeypatch.setattr(vbase, "vector_id", lambda key: 42)
    with pytest.raises(ValueError, match="collision: 'a' and 'b' both hash to 42"):
        write_family(tmp_path, "f", ["a", "b", "c"], x, VectorsConfig())
    assert not family_dir(tmp_path, "f").exists()


def test_dimension_mismatch_and_bad_input(tmp_path):
    rng = np.random.default_rng(3)
    keys = [f"k{i}" for i in range(50)]
    write_family(tmp_path, "chunk", keys, _unit(rng, 50, 16), VectorsConfig(index_type="hnsw"))
    index = FaissFamilyIndex.open(tmp_path, "chunk")
    with pytest.raises(IndexMismatchError, match="dimension 24 but vector family 'chunk' has dimension 16"):
        index.search(np.ones((1, 24), np.float32), 3)
    with pytest.raises(IndexMismatchError):
        ExactVectorIndex(keys, _unit(rng, 50, 16)).search(np.ones((1, 24), np.float32), 3)
    bad = _unit(rng, 50, 16)
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        write_family(tmp_path, "other", keys, bad, VectorsConfig())
    with pytest.raises(ValueError, match="50 keys but 49 vectors"):
        write_family(tmp_path, "other", keys, bad[:49], VectorsConfig())
    with pytest.raises(IndexNotFoundError):
        FaissFamilyIndex.open(tmp_path, "missing")


def test_map_fn_hook_builds_shards_elsewhere(tmp_path):
    keys, x, q = _clustered(n=600)
    with ThreadPoolExecutor(2) as pool:
        write_family(
            tmp_path / "a",
            "chunk",
            keys,
            x,
            VectorsConfig(index_type="flat", num_shards=3),
            map_fn=lambda fn, jobs: pool.map(lambda job: fn(*job), jobs),
        )
    write_family(tmp_path / "b", "chunk", keys, x, VectorsConfig(index_type="flat", num_shards=3))
    assert FaissFamilyIndex.open(tmp_path / "a", "chunk").search(q, 5) == FaissFamilyIndex.open(
        tmp_path / "b", "chunk"
    ).search(q, 5)


def test_sampling_helpers():
    rows = training_sample(10_000, 100, seed=5)
    assert len(rows) == 100 and (np.diff(rows) > 0).all()
    assert rows[0] < 100 and rows[-1] >= 9_900  # spread end to end
    assert (rows == training_sample(10_000, 100, seed=5)).all()
    assert (training_sample(50, 100, seed=0) == np.arange(50)).all()
    assert auto_nlist(10, None, 100_000) == 1
    assert auto_nlist(1_000_000, None, 100_000) == 100_000 // 39
    assert auto_nlist(10_000, 5000, 100_000) == 10_000 // 39


def test_precomputed_ids(tmp_path):
    rng = np.random.default_rng(4)
    keys = [f"k{i}" for i in range(200)]
    x = _unit(rng, 200, 8)
    ids = np.array([vector_id(k) for k in keys], dtype=np.int64)
    write_family(tmp_path / "a", "chunk", keys, x, VectorsConfig(), ids=ids)
    write_family(tmp_path / "b", "chunk", keys, x, VectorsConfig())
    assert FaissFamilyIndex.open(tmp_path / "a", "chunk").search(x[:5], 3) == FaissFamilyIndex.open(
        tmp_path / "b", "chunk"
    ).search(x[:5], 3)
    with pytest.raises(ValueError, match="is not vector_id"):
        write_family(tmp_path / "c", "chunk", keys, x, VectorsConfig(), ids=ids[::-1].copy())
    with pytest.raises(ValueError, match="200 keys but ids of shape"):
        write_family(tmp_path / "c", "chunk", keys, x, VectorsConfig(), ids=ids[:10])
