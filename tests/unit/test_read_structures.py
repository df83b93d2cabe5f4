"""Graph read structures (hxd2_ray.graph.read_structures): written at index time, memory-mapped at open, and
read exactly as the structures built in memory from the same Kùzu file; the walk over the mapped typed CSR
equals the walk over edge lists for every choice of weights."""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from hxd2_ray.graph.kuzu_store import KuzuGraphStore
from hxd2_ray.graph.read_structures import (
    READS_DIR,
    KeyLookup,
    build_graph_reads,
    has_graph_reads,
    key_hashes,
    open_graph_reads,
    write_graph_reads_from,
)
from hxd2_ray.graph.resident import LazyStore, ResidentGraph, open_resident
from hxd2_ray.graph.walk_matrix import build_walk_matrix
from hxd2_ray.retrieval.ppr import EdgeWeights, PropagationGraph
from tests.unit.test_kuzu_store import open_store, richer_path  # noqa: F401 - fixture

WEIGHTS = [
    EdgeWeights(),
    EdgeWeights(mention=2.0, related=0.5, synonym=3.0, title=0.25),
    EdgeWeights(mention_idf=True),
    EdgeWeights(related=0.0),  # a kind switched off: its pairs leave the walk
    EdgeWeights(synonym=0.0, title=0.0),
    EdgeWeights(mention=0.0),
]


def test_a_key_lookup_finds_every_key_and_no_other():
    keys = [f"k{i}" for i in range(500)] + ["", "é", "水稻", "k1 "]
    lookup = KeyLookup.build(pa.array(keys, pa.large_string()))
    assert lookup.find(keys) == list(range(len(keys)))
    assert lookup.find(["nope", "K1", "k1\x00"]) == [None, None, None]
    assert lookup.find([]) == []


def test_a_hash_collision_is_settled_by_the_key_itself():
    column = pa.array(["a", "b", "c"], pa.large_string())
    h = int(key_hashes(["b"])[0])
    # Force "a" and "b" under b's hash (a collision): the lookup must compare the stored key.
    lookup = KeyLookup(np.array([h, h, h + 1], np.uint64), np.array([0, 1, 2], np.int64), column)
    assert lookup.find(["b", "a"]) == [1, None]


def test_written_structures_map_back_equal(richer_path, tmp_path):  # noqa: F811
    with open_store(richer_path) as store:
        built = build_graph_reads(store.scan_tables())
        write_graph_reads_from(store, tmp_path / READS_DIR)
    assert has_graph_reads(tmp_path / READS_DIR) and not has_graph_reads(tmp_path)
    mapped = open_graph_reads(tmp_path / READS_DIR)
    for name in ("entities", "chunks", "documents", "edges"):
        assert getattr(mapped, name).equals(getattr(built, name)), name
    for name, array in built.arrays.items():
        assert np.array_equal(mapped.arrays[name], array), name
    for name, array in built.walk.arrays().items():
        assert np.array_equal(getattr(mapped.walk, name), array), name
    assert mapped.walk.counts() == built.walk.counts() and mapped.n_titles == built.n_titles
    # Mapped, not read: the arrays are memory maps (non-empty ones) and the columns point into the file.
    for array in (mapped.walk.indices, mapped.arrays["adj_ptr"]):
        assert isinstance(array.base, np.memmap) and not array.flags.writeable


def test_a_generation_written_over_is_replaced_whole(richer_path, tmp_path):  # noqa: F811
    with open_store(richer_path) as store:
        write_graph_reads_from(store, tmp_path / READS_DIR)
        (tmp_path / READS_DIR / "stale.npy").write_bytes(b"x")
        write_graph_reads_from(store, tmp_path / READS_DIR)
    assert not (tmp_path / READS_DIR / "stale.npy").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [READS_DIR, richer_path.name]  # no temp folder left


@pytest.mark.parametrize("weights", WEIGHTS, ids=lambda w: repr(w))
def test_the_walk_over_the_mapped_matrix_equals_the_walk_over_edge_lists(richer_path, tmp_path, weights):  # noqa: F811
    with open_store(richer_path) as store:
        write_graph_reads_from(store, tmp_path / READS_DIR)
    mapped = open_graph_reads(tmp_path / READS_DIR)
    with ResidentGraph(LazyStore(lambda: KuzuGraphStore(richer_path)), mapped) as graph:
        e = graph.walk_edges()
        from_edges = PropagationGraph(
            e.n_entities,
            e.n_chunks,
            related=e.related,
            mentions=e.mentions,
            synonyms=e.synonyms,
            titles=e.titles,
            n_titles=e.n_titles,
            weights=weights,
        )
        over = PropagationGraph.over(graph.walk_matrix(), weights)
        assert (over.adjacency != from_edges.adjacency).nnz == 0
        rng = np.random.default_rng(0)
        for _ in range(10):
            seeds = rng.choice(over.size, size=min(3, over.size), replace=False)
            a = over.personalized_pagerank(seeds, [1.0] * len(seeds), radius=2, max_nodes=5, max_fanout=2)
            b = from_edges.personalized_pagerank(seeds, [1.0] * len(seeds), radius=2, max_nodes=5, max_fanout=2)
            assert np.array_equal(a.nodes, b.nodes) and np.allclose(a.scores, b.scores, rtol=1e-12, atol=0)


def test_a_graph_with_structures_never_opens_the_store_for_its_reads(richer_path, tmp_path):  # noqa: F811
    with open_store(richer_path) as store:
        write_graph_reads_from(store, tmp_path / READS_DIR)
    opened = []

    def opener():
        opened.append(1)
        return KuzuGraphStore(richer_path)

    # A limit of 0 MB: every graph file is above it, and read structures are mapped all the same.
    graph = open_resident(LazyStore(opener), "auto", 0, reads_dir=tmp_path / READS_DIR)
    try:
        keys = graph.entity_keys_at(range(3))
        assert graph.get_entities(keys) and graph.neighbors(keys) is not None and graph.chunks_for_entities(keys)
        assert opened == []
        assert graph.counts()["entities"] > 0 and opened == [1]  # counts live in the store of record
    finally:
        graph.close()


def test_an_index_without_structures_says_which_command_writes_them(richer_path, caplog):  # noqa: F811
    with caplog.at_level(logging.WARNING, logger="hxd2_ray.graph.resident"):
        graph = open_resident(KuzuGraphStore(richer_path), "auto", 10_000, reads_dir=None, index="/data/idx")
        assert isinstance(graph, ResidentGraph)  # still held in memory below the limit
        graph.close()
        store = open_resident(KuzuGraphStore(richer_path), "auto", 0, reads_dir=None, index="/data/idx")
        assert isinstance(store, KuzuGraphStore)  # above it: read through Kùzu, and said
        store.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("hxd2 index reindex-reads --index /data/idx" in line for line in lines)
    assert "ppr cannot rank" in lines[1]


def _oracle_adjacency(e, weights: EdgeWeights) -> dict[tuple[int, int], float]:
    """The weighted walk graph from plain edge lists, with none of build_walk_matrix: each edge both ways, a
    self-loop or a non-positive weight dropped, duplicates and kinds on one pair added up; a MENTIONS edge weighs
    ``mention`` (times ``log(1 + chunks / chunks mentioning the entity)`` under ``mention_idf``)."""
    w: dict[tuple[int, int], float] = {}

    def add(a: int, b: int, value: float) -> None:
        if a != b and value > 0:
            w[(a, b)] = w.get((a, b), 0.0) + value
            w[(b, a)] = w.get((b, a), 0.0) + value

    ents = e.n_entities
    chunks_of: dict[int, int] = {}
    for entity in e.mentions[1].tolist():
        chunks_of[entity] = chunks_of.get(entity, 0) + 1
    for a, b in zip(e.related[0].tolist(), e.related[1].tolist()):
        add(a, b, weights.related)
    for chunk, entity in zip(e.mentions[0].tolist(), e.mentions[1].tolist()):
        idf = math.log(1 + max(1, e.n_chunks) / chunks_of[entity]) if weights.mention_idf else 1.0
        add(ents + chunk, entity, weights.mention * idf)
    for a, b, cosine in zip(e.synonyms[0].tolist(), e.synonyms[1].tolist(), e.synonyms[2].tolist()):
        add(a, b, weights.synonym * cosine)
    for chunk, title in zip(e.titles[0].tolist(), e.titles[1].tolist()):
        add(ents + chunk, ents + e.n_chunks + title, weights.title)
    return w


def _oracle_ppr(w: dict[tuple[int, int], float], size: int, seeds: list[int], damping: float) -> np.ndarray:
    """Personalized PageRank by plain power iteration over the pairs (what reaches a node with no edges walks out:
    the walk's scores sum to at most 1)."""
    strength = [0.0] * size
    for (a, _), value in w.items():
        strength[a] += value
    reset = np.zeros(size)
    reset[seeds] = 1.0 / len(seeds)
    x = reset.copy()
    for _ in range(2000):
        nxt = (1 - damping) * reset
        for (a, b), value in w.items():
            nxt[b] += damping * x[a] * value / strength[a]
        if np.abs(nxt - x).sum() < 1e-15:
            break
        x = nxt
    return nxt


@pytest.mark.parametrize("weights", WEIGHTS, ids=lambda w: repr(w))
def test_the_mapped_walk_equals_an_independent_oracle_over_the_stored_edge_lists(richer_path, tmp_path, weights):  # noqa: F811
    """The walk over the mapped matrix against the edge lists walked without build_walk_matrix (issue 40, item 5:
    the test above builds both sides with it, so a wrong weight in it passes there)."""
    with open_store(richer_path) as store:
        write_graph_reads_from(store, tmp_path / READS_DIR)
    mapped = open_graph_reads(tmp_path / READS_DIR)
    with ResidentGraph(LazyStore(lambda: KuzuGraphStore(richer_path)), mapped) as graph:
        e = graph.walk_edges()
        over = PropagationGraph.over(graph.walk_matrix(), weights)
    oracle = _oracle_adjacency(e, weights)
    assert len(e.related[0]) and len(e.mentions[0]) and over.size == e.n_entities + e.n_chunks + e.n_titles
    got = over.adjacency.tocoo()
    assert {
        (int(a), int(b)): pytest.approx(float(v), rel=1e-6) for a, b, v in zip(got.row, got.col, got.data) if v
    } == oracle
    full = dict(radius=over.size, max_nodes=over.size, max_fanout=over.size, tol=1e-14, max_iter=2000)
    for seeds in ([0], [e.n_entities], [0, 1, e.n_entities + 1], list(range(over.size))[-2:]):
        walk = over.personalized_pagerank(seeds, [1.0] * len(seeds), damping=0.5, **full)
        scores = np.zeros(over.size)
        scores[walk.nodes] = walk.scores
        want = _oracle_ppr(oracle, over.size, seeds, 0.5)
        np.testing.assert_allclose(scores / scores.sum(), want / want.sum(), atol=1e-9)


@pytest.mark.parametrize("weights", WEIGHTS, ids=lambda w: repr(w))
def test_the_walk_of_every_edge_kind_equals_the_oracle(weights):
    """The stored graph above has no SYNONYM or title edges: random edge lists of every kind, with duplicates,
    self-loops and a zero cosine, built by build_walk_matrix, against the same oracle."""
    rng = np.random.default_rng(7)
    n_ent, n_chunk, n_titles = 9, 7, 3
    e = SimpleNamespace(
        n_entities=n_ent,
        n_chunks=n_chunk,
        n_titles=n_titles,
        related=(rng.integers(0, n_ent, 14), rng.integers(0, n_ent, 14)),
        mentions=tuple(
            np.array(end) for end in zip(*sorted({(c, x) for c, x in rng.integers(0, 7, (16, 2)).tolist()}))
        ),
        synonyms=(np.array([0, 3, 4, 2]), np.array([5, 7, 4, 2]), np.array([0.9, 0.4, 0.8, 0.0])),
        titles=(np.array([0, 1, 2, 1, 6]), np.array([0, 0, 1, 1, 2])),
    )
    matrix = build_walk_matrix(
        n_ent,
        n_chunk,
        related=e.related,
        mentions=e.mentions,
        synonyms=e.synonyms,
        titles=e.titles,
        n_titles=n_titles,
    )
    over = PropagationGraph.over(matrix, weights)
    oracle = _oracle_adjacency(e, weights)
    got = over.adjacency.tocoo()
    assert {
        (int(a), int(b)): pytest.approx(float(v), rel=1e-6) for a, b, v in zip(got.row, got.col, got.data) if v
    } == oracle
    full = dict(radius=over.size, max_nodes=over.size, max_fanout=over.size, tol=1e-14, max_iter=2000)
    for seeds in ([0], [n_ent + 1], [3, n_ent + 6, n_ent + n_chunk + 2]):
        walk = over.personalized_pagerank(seeds, [1.0] * len(seeds), damping=0.5, **full)
        scores = np.zeros(over.size)
        scores[walk.nodes] = walk.scores
        want = _oracle_ppr(oracle, over.size, seeds, 0.5)
        np.testing.assert_allclose(scores / scores.sum(), want / want.sum(), atol=1e-9)


@pytest.mark.parametrize("weights", [EdgeWeights(), EdgeWeights(mention_idf=True), EdgeWeights(related=0.0)])
def test_hub_rows_are_mirrored_not_read_and_the_walk_is_the_same(monkeypatch, weights):
    from hxd2_ray.retrieval import ppr

    rng = np.random.default_rng(3)
    n_ent, n_chunk = 20_000, 3_000
    hubs = np.array([5, 17, 900])
    a = np.concatenate([np.repeat(hubs, 6_000), rng.integers(0, n_ent, 30_000), [5, 5]])
    b = np.concatenate([rng.integers(0, n_ent, 18_000), rng.integers(0, n_ent, 30_000), [17, 900]])  # hub-hub
    mentions = (rng.integers(0, n_chunk, 40_000), np.concatenate([np.full(5_000, 17), rng.integers(0, n_ent, 35_000)]))
    graph = PropagationGraph(n_ent, n_chunk, related=(a, b), mentions=mentions, weights=weights)
    seeds = [5, 17, 900, 3, n_ent + 7]
    short = graph.personalized_pagerank(seeds, [1.0] * 5, max_nodes=500)
    assert (np.diff(graph.matrix.indptr)[hubs] > 4 * len(short.nodes)).all()  # the hubs' rows were long
    monkeypatch.setattr(ppr, "_LONG_ROW", 0)  # read every row whole
    whole = graph.personalized_pagerank(seeds, [1.0] * 5, max_nodes=500)
    assert np.array_equal(short.nodes, whole.nodes)
    assert np.allclose(short.scores, whole.scores, rtol=1e-12, atol=1e-15) and short.iterations == whole.iterations


def test_reindex_reads_writes_an_older_indexs_structures(tmp_path, capsys):
    import shutil

    from jobs.index_reads import main
    from tests.unit.retrieval_fixtures import build_tiny_index

    tiny = build_tiny_index(tmp_path / "index")
    shutil.rmtree(tmp_path / "index" / READS_DIR)  # as an index written before read structures existed
    assert main(["--index", str(tmp_path / "index")]) == 0
    assert "read structures written for" in capsys.readouterr().out
    assert has_graph_reads(tmp_path / "index" / READS_DIR)
    from hxd2_ray.retrieval import open_index

    with open_index(tiny.root, tiny.cfg) as index:
        assert isinstance(index.graph, ResidentGraph) and index.graph.store._store is None  # mapped, Kùzu unopened
    assert main(["--index", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_the_title_index_is_mapped_from_the_generation_and_answers_as_built(tmp_path):
    from hxd2_ray.extraction.names import TitleIndex, title_index
    from hxd2_ray.retrieval import open_index
    from tests.unit.retrieval_fixtures import build_tiny_index

    tiny = build_tiny_index(tmp_path / "index")
    with open_index(tiny.root, tiny.cfg) as index:
        mapped = title_index(index.graph)
        built = TitleIndex(index.graph.document_chunks())
        assert not isinstance(mapped.chunks, dict) and len(mapped.chunks) == len(built.chunks) > 0
        for key, offsets in built.chunks.items():
            assert key in mapped.chunks and mapped.chunks[key] == offsets
        assert "no such title" not in mapped.chunks and mapped.chunks.get("no such title") is None
        assert list(mapped.chunks) == list(built.chunks)  # iterated as a dict is (the refusal gate's title starts)
        keys = [*built.chunks, "no such title"]
        assert mapped.get_entities(keys) == built.get_entities(keys)


@pytest.fixture
def tmpfs_10m(tmp_path) -> Iterator[Path]:
    """A real 10 MB tmpfs (root can mount one; elsewhere the test is skipped, saying why)."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=10m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill_leaving(folder: Path, free: int) -> Path:
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        fh.write(b"\0" * max(0, shutil.disk_usage(folder).free - free))
    return filler


def test_reindex_reads_on_a_full_disk_is_one_line_and_the_rerun_writes_them(tmpfs_10m, capsys, monkeypatch):
    """Issue 40, item 8: reindex-reads checks its room as a build does, and a write that fails for space is one
    error line; the lock is gone, the old structures stay, and the same command succeeds once there is room."""
    from hxd2_ray.index_store.build_lock import LOCK_NAME
    from hxd2_ray.indexer import reindex_reads as module
    from jobs.index_reads import main
    from tests.unit.retrieval_fixtures import build_tiny_index

    index = tmpfs_10m / "index"
    build_tiny_index(index)
    shutil.rmtree(index / READS_DIR)  # as an index written before read structures existed
    filler = _fill_leaving(tmpfs_10m, 300 * 1024)

    assert main(["--index", str(index)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: not enough space at ") and "MB" in err[0], err
    assert not (index / LOCK_NAME).exists() and not (index / READS_DIR).exists()

    # Past the check (an estimate), the write itself runs out of room: one line too, nothing half written.
    monkeypatch.setattr(module, "GRAPH_BASE_BYTES", 1 << 40)
    monkeypatch.setattr(module, "MB", 0)
    filler.unlink()
    _fill_leaving(tmpfs_10m, 4 * 1024)
    assert main(["--index", str(index)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left on the disk of" in err[0] and "run the same command again" in err[0], err
    assert not (index / LOCK_NAME).exists() and not has_graph_reads(index / READS_DIR)
    assert [p.name for p in index.iterdir() if p.name.startswith(".")] == []  # no temporary folder left

    (tmpfs_10m / "filler").unlink()
    assert main(["--index", str(index)]) == 0
    assert has_graph_reads(index / READS_DIR)
