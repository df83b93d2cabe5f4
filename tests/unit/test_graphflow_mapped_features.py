"""GraphFlow's feature cache is memory-mapped (issue 42): every array, the walk graph's keys, names and chunk
sources included (as :class:`StringColumn` bytes and offsets), is its own ``.npy`` file read back with
``mmap_mode="r"``; a round trip keeps every array, string and the graph hash, the arrays handed out are read-only,
and opening a 40+ MB entry of 100k nodes in a fresh process reads (``rchar``) and makes resident (``VmRSS``) almost
none of it."""

from __future__ import annotations

import json
import mmap
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.graphflow import features as F
from hxd2_ray.graphflow.walk_graph import MENTIONED_IN, MENTIONS, StringColumn, WalkGraph

REPO = Path(__file__).resolve().parents[2]
DIM = 32


def small_graph() -> WalkGraph:
    keys = ["the public eye", "howard franklin", "1992", "c1"]
    directed = (("directed by", "out"),)
    directed_in = (("directed by", "in"),)
    year = (("release year", "out"),)
    year_in = (("release year", "in"),)
    edges = [
        (0, 1, directed),
        (1, 0, directed_in),
        (0, 2, year),
        (2, 0, year_in),
        (0, 3, MENTIONED_IN),
        (3, 0, MENTIONS),
    ]
    return WalkGraph.from_edges(
        keys,
        edges,
        names=["The Public Eye", "Howard Franklin", "1992", "A film"],
        types=["movie", "person", "year", "passage"],
        n_entities=3,
        chunk_sources=["film.md"],
    )


def is_mapped(arr: np.ndarray) -> bool:
    base = arr
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return isinstance(base, mmap.mmap)


def test_round_trip_keeps_arrays_and_hash_and_maps_them_read_only(tmp_path):
    graph = small_graph()
    texts = ["The Public Eye", "Howard Franklin", "1992", "The Public Eye is a 1992 film."]
    built = F.build_features(graph, HashingEmbedder(dim=DIM), texts, progress=None)
    built = F.GraphFeatures(**{**built.__dict__, "index_fingerprint": "fp"})
    folder = tmp_path / "entry"
    F._write(folder, built)

    names = sorted(p.name for p in folder.iterdir())
    assert not [n for n in names if n.endswith(".npz")]
    assert {f"graph-{k}.npy" for k in F.GRAPH_ARRAYS} | {f"features-{k}.npy" for k in F.FEATURE_ARRAYS} <= set(names)
    assert not list(tmp_path.glob(".entry.*"))  # the temp folder was renamed

    back = F._read(folder)
    assert back.graph_hash == built.graph_hash == F.graph_hash(back.graph)
    assert (back.embedder_id, back.dim, back.index_fingerprint) == (built.embedder_id, DIM, "fp")
    pairs = {
        "node_vectors": (back.node_vectors, built.node_vectors),
        "type_vectors": (back.type_vectors, built.type_vectors),
        "sig_vectors": (back.sig_vectors, built.sig_vectors),
        "ptr": (back.graph.ptr, graph.ptr),
        "target": (back.graph.target, graph.target),
        "sig": (back.graph.sig, graph.sig),
        "node_type": (back.graph.node_type, graph.node_type),
    }
    for name, (got, want) in pairs.items():
        assert got.dtype == want.dtype and np.array_equal(got, want), name
        assert type(got) is np.ndarray and is_mapped(got), f"{name} is not a view of the file's map"
        assert not got.flags.writeable, name
    for name in ("keys", "names", "chunk_sources"):
        column = getattr(back.graph, name)
        assert isinstance(column, StringColumn) and list(column) == list(getattr(graph, name)), name
        assert is_mapped(column.data) and is_mapped(column.offsets), name
    assert back.graph.keys[1] == "howard franklin" and back.graph.chunk_sources[0] == "film.md"
    assert back.graph.signatures == graph.signatures and back.graph.type_names == graph.type_names
    assert [back.graph.node_of(k) for k in graph.keys] == [0, 1, 2, 3] and back.graph.node_of("nobody") is None
    assert back.graph.chunks_of_sources() == graph.chunks_of_sources() == {"film.md": [3]}
    shipped = pickle.loads(pickle.dumps(back.graph))  # how the training job hands the graph to its workers
    assert list(shipped.keys) == graph.keys and shipped.node_of("1992") == 2
    with pytest.raises(ValueError, match="read-only"):
        back.node_vectors[0, 0] = 1.0

    from hxd2_ray.graphflow.model import FeatureTables  # torch

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "not writable" warning is the model's to silence
        tables = FeatureTables.from_features(back)
    # on the CPU the model's tables share the map: no private copy of the vectors
    assert tables.node_vectors.data_ptr() == back.node_vectors.ctypes.data
    assert np.array_equal(tables.sig_vectors.numpy(), built.sig_vectors)


def test_string_column_reads_like_the_list_and_finds_like_its_dict():
    strings = ["b", "a", "Südhof", "a", "", "c1"]
    column = StringColumn.of(strings, ordered=True)
    assert list(column) == strings and len(column) == 6 and column[np.int64(2)] == "Südhof" and column[-1] == "c1"
    assert column[1:4] == strings[1:4]
    index = {s: i for i, s in enumerate(strings)}  # what an in-memory WalkGraph's node_of answers (last wins)
    assert [column.find(s) for s in strings] == [index[s] for s in strings] and column.find("z") is None
    with pytest.raises(IndexError):
        column[6]


def test_an_entry_without_signatures_or_types_round_trips(tmp_path):
    graph = WalkGraph.from_edges(["a"], [])
    built = F.build_features(graph, HashingEmbedder(dim=8), ["a"], progress=None)
    F._write(tmp_path / "e", built)
    back = F._read(tmp_path / "e")
    assert back.sig_vectors.shape == (0, 24) and back.graph.n_entries == 0 and back.graph.ptr.tolist() == [0, 0]


# A fresh process opens an entry whose arrays total >= 40 MB; the imports and a first (small) read are warmed up,
# so the figures are the big read alone.
PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from hxd2_ray.graphflow import features as F

    def io():
        rchar = int(next(l for l in open("/proc/self/io") if l.startswith("rchar:")).split()[1])
        rss = int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS:")).split()[1]) * 1024
        return rchar, rss

    F._read(Path(sys.argv[2]))  # warm: json, numpy's format reader, WalkGraph
    r0, m0 = io()
    feats = F._read(Path(sys.argv[1]))
    r1, m1 = io()
    print(json.dumps({"read": r1 - r0, "resident": m1 - m0, "nodes": feats.graph.n_nodes,
                      "row_sum": float(feats.node_vectors[12345].sum())}))
    """
)


def write_entry(folder: Path, n_nodes: int, dim: int, degree: int, seed: int = 0) -> F.GraphFeatures:
    rng = np.random.default_rng(seed)
    keys = [f"n{i}" for i in range(n_nodes)]
    ptr = np.arange(0, n_nodes * degree + 1, degree, dtype=np.int64)
    graph = WalkGraph(
        keys=keys,
        names=keys,
        n_entities=n_nodes,
        node_type=np.zeros(n_nodes, dtype=np.int32),
        type_names=["node"],
        ptr=ptr,
        target=rng.integers(0, n_nodes, n_nodes * degree, dtype=np.int32),
        sig=np.zeros(n_nodes * degree, dtype=np.int32),
        signatures=[(("related", "none"),)],
    )
    feats = F.GraphFeatures(
        graph=graph,
        node_vectors=rng.standard_normal((n_nodes, dim), dtype=np.float32),
        type_vectors=rng.standard_normal((1, dim), dtype=np.float32),
        sig_vectors=rng.standard_normal((1, 3 * dim), dtype=np.float32),
        embedder_id="synthetic",
        dim=dim,
        graph_hash=F.graph_hash(graph),
    )
    F._write(folder, feats)
    return feats


def test_opening_a_large_entry_maps_it_instead_of_reading_it(tmp_path):
    big = write_entry(tmp_path / "big", n_nodes=100_000, dim=96, degree=4)
    write_entry(tmp_path / "warm", n_nodes=100, dim=8, degree=1, seed=1)
    array_bytes = sum(p.stat().st_size for p in (tmp_path / "big").glob("*.npy"))
    json_bytes = (tmp_path / "big" / "graph.json").stat().st_size
    assert array_bytes >= 40e6

    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "big"), str(tmp_path / "warm")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"\narrays {array_bytes / 1e6:.1f} MB, graph.json {json_bytes / 1e6:.2f} MB; opening read "
        f"{got['read'] / 1e6:.2f} MB (rchar), resident grew {got['resident'] / 1e3:.0f} kB (VmRSS)"
    )
    assert got["nodes"] == 100_000
    assert got["row_sum"] == pytest.approx(float(big.node_vectors[12345].sum()), rel=1e-5)
    assert got["read"] < 5e6, got
    assert got["resident"] < 5e6, got
