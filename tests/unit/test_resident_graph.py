"""The resident (in-memory) graph against the Kùzu store it was read from: the same rows, in the same order,
for every read the query path makes, on hand-made edge cases and on a seeded random graph."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from hxd2_ray.config import RetrievalConfig
from hxd2_ray.graph.kuzu_store import KuzuGraphStore, load_graph
from hxd2_ray.graph.resident import ResidentGraph, open_resident
from hxd2_ray.retrieval import QueryPipeline, open_index
from tests.unit.retrieval_fixtures import DIM, build_tiny_index, keyword_reply, scripted_llm
from tests.unit.test_kuzu_store import (
    ALL_KEYS,
    HOSTILE_NAMES,
    MALICIOUS,
    _all_reads,
    _chunk,
    _chunks,
    _doc,
    _docs,
    _ent,
    _ents,
    _rel,
    _rels,
    richer_path,  # noqa: F401 - fixture
    small_tables,  # noqa: F401 - fixture
)


def resident(path) -> ResidentGraph:
    graph = open_resident(KuzuGraphStore(path), "on", 1)
    assert isinstance(graph, ResidentGraph)
    return graph


def test_richer_graph_reads_match_kuzu(richer_path):  # noqa: F811
    pairs = [("x", "h"), ("ghost", "h"), ("w", "w"), ("y", "z"), ("h", HOSTILE_NAMES[2]), ("x", "z"), ("h", "x")]
    chunk_ids = ["c4", "c1", "nope", "c3", "c1", "c2", "c5", ""]
    with KuzuGraphStore(richer_path, node_columns=False) as kuzu, resident(richer_path) as mem:
        for keys in (ALL_KEYS, ["ghost"], ["w"], ["y", "h"], [HOSTILE_NAMES[2]], ["lonely"], MALICIOUS, []):
            assert _all_reads(mem, keys, pairs, chunk_ids) == _all_reads(kuzu, keys, pairs, chunk_ids), keys
        assert mem.counts() == kuzu.counts()
        assert mem.top_relation_keywords(5) == kuzu.top_relation_keywords(5) == ["k1", "k2"]
        assert mem.find_entity_by_name("H") == kuzu.find_entity_by_name("H")
        assert mem.find_entity_by_name("h", key_fn=str.lower) == kuzu.find_entity_by_name("h", key_fn=str.lower)
        assert mem.run_template("lf_edges", {"keys": ["h"], "limit": 10}) == kuzu.run_template(
            "lf_edges", {"keys": ["h"], "limit": 10}
        )
        # the edge cases the fixture was built for, checked on their own
        loops = mem.neighbors(["w"])
        assert [(e["source_key"], e["target_key"]) for e in loops].count(("w", "w")) == 1 and len(loops) == 2
        assert mem.chunks_for_entities(["h"]) == {"h": ["c2", "c5", "c3", "c1"]}  # (doc_id, ord, id) order
        assert [c["doc_title"] for c in mem.get_chunks(["c4", "c1"])] == ["", "T2"]  # c4: no document


def _random_graph(seed: int, n_ent: int = 240, n_rel: int = 700, n_chunk: int = 150, n_doc: int = 18):
    rng = random.Random(seed)
    keys = [f"e{i:03d}" for i in range(n_ent)] + HOSTILE_NAMES
    docs = [_doc(i) for i in range(n_doc)]  # chunks may also name d{n_doc}.., which has no document row
    chunks = [_chunk(i, f"d{rng.randrange(n_doc + 3)}", rng.randrange(6)) for i in range(n_chunk)]
    ents = [
        _ent(
            k,
            rng.sample([f"c{i}" for i in range(n_chunk + 5)], rng.randrange(5)),
            description=f"about {k}",
            mentions=rng.randrange(1, 9),
        )
        for k in keys
    ]
    hubs = keys[:6]
    rels = []
    for _ in range(n_rel):
        a = rng.choice(hubs) if rng.random() < 0.3 else rng.choice(keys)
        b = a if rng.random() < 0.02 else rng.choice(keys)  # a few self-loops
        rels.append(_rel(a, b, weight=float(rng.randrange(1, 4)), desc=f"{a}~{b}"))  # ties in weight
    return keys, (_docs(docs), _chunks(chunks), _ents(ents), _rels(rels))


@pytest.mark.parametrize("seed", [1, 2])
def test_random_graph_reads_match_kuzu(tmp_path, seed):
    keys, graph_tables = _random_graph(seed)
    path = tmp_path / "g.kz"
    load_graph(path, *graph_tables)
    rng = random.Random(seed + 100)
    with KuzuGraphStore(path, node_columns=False) as kuzu, resident(path) as mem:
        assert mem.counts() == kuzu.counts()
        for _ in range(25):
            asked = rng.sample(keys, rng.randrange(1, 12)) + ["ghost"] * rng.randrange(2)
            pairs = [(rng.choice(keys), rng.choice(keys)) for _ in range(8)]
            pairs += [(e["target_key"], e["source_key"]) for e in kuzu.neighbors(asked[:2])][:6]  # existing, reversed
            chunk_ids = [f"c{rng.randrange(160)}" for _ in range(10)]
            assert _all_reads(mem, asked, pairs, chunk_ids) == _all_reads(kuzu, asked, pairs, chunk_ids)
        everything = _all_reads(mem, keys, [], [f"c{i}" for i in range(160)])
        assert everything == _all_reads(kuzu, keys, [], [f"c{i}" for i in range(160)])
        assert sum(len(v) for v in everything["chunks_for_entities"].values()) > 0
        assert len(everything["neighbors"][0]) > 100  # the comparison covered real edges


def test_reads_are_thread_safe(richer_path):  # noqa: F811
    with resident(richer_path) as mem, ThreadPoolExecutor(4) as pool:
        expected = _all_reads(mem, ALL_KEYS, [("x", "h")], ["c1", "c5"])
        got = list(pool.map(lambda _: _all_reads(mem, ALL_KEYS, [("x", "h")], ["c1", "c5"]), range(32)))
    assert all(g == expected for g in got)


def test_empty_tables(tmp_path):
    path = tmp_path / "g.kz"
    load_graph(path, _docs([]), _chunks([]), _ents([_ent("a")]), _rels([]))
    with resident(path) as mem:
        assert mem.get_entities(["a"])[0]["key"] == "a"
        assert mem.neighbors(["a"]) == [] and mem.chunks_for_entities(["a", "b"]) == {"a": [], "b": []}
        assert mem.get_chunks(["c1"]) == [] and mem.get_relations([("a", "a")]) == []


def test_open_resident_modes(tmp_path, small_tables):  # noqa: F811
    path = tmp_path / "g.kz"
    load_graph(path, *small_tables)
    store = KuzuGraphStore(path)
    assert open_resident(store, "off", 10_000) is store
    size_mb = store.size_bytes / 2**20
    assert size_mb > 0
    assert open_resident(store, "auto", 0) is store  # the file is over the limit
    held = open_resident(store, "auto", int(size_mb) + 1)
    assert isinstance(held, ResidentGraph) and held.store is store
    held.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.counts()  # the resident graph owns the store it was read from


def test_scattered_offsets_are_put_back(tmp_path, small_tables):  # noqa: F811
    path = tmp_path / "g.kz"
    load_graph(path, *small_tables)
    with KuzuGraphStore(path) as kuzu:
        scanned = kuzu.scan_tables()
        expected = _all_reads(kuzu, ["a", "b", "c", "d"], [("b", "a")], ["c1", "c3"])
    reversed_tables = {
        name: t.take(pa.array(list(range(t.num_rows))[::-1], type=pa.int64())) for name, t in scanned.items()
    }
    with ResidentGraph.from_tables(KuzuGraphStore(path), reversed_tables) as mem:
        assert _all_reads(mem, ["a", "b", "c", "d"], [("b", "a")], ["c1", "c3"]) == expected
    holey = dict(scanned, Entity=scanned["Entity"].slice(1))  # offsets 1..n-1: not dense
    with pytest.raises(ValueError, match="not dense"):
        ResidentGraph.from_tables(None, holey)


def test_config_lists_the_modes():
    assert RetrievalConfig().resident_graph == "auto"
    with pytest.raises(ValueError, match="'auto', 'on' or 'off'"):
        RetrievalConfig(resident_graph="always")


QUESTIONS = [
    "Which prize did Thomas Südhof win?",
    "Where does Robert Malenka work?",
    "What is Neurexin?",
    "Who studies Synaptic Transmission at Stanford University?",
]


def test_pipeline_answers_the_same_either_way(tmp_path):
    tiny = build_tiny_index(tmp_path / "tiny")
    from hxd2_ray.embedding.hashing import HashingEmbedder

    def run(mode: str) -> list:
        cfg = tiny.cfg.model_copy(update={"retrieval": tiny.cfg.retrieval.model_copy(update={"resident_graph": mode})})
        idx = open_index(tiny.root, cfg)
        try:
            assert isinstance(idx.graph, ResidentGraph) == (mode == "on")
            out = []
            for q in QUESTIONS:
                names = [w for w in q.rstrip("?").split() if w[:1].isupper()][1:]
                llm = scripted_llm(keyword_reply(names, ["award", "employment"]))
                dual = QueryPipeline(idx, llm, HashingEmbedder(dim=DIM), cfg.retrieval)
                answer = dual.generate(None, dual.retrieve(q))
                r = answer.retrieval
                out.append((r.entities, r.relations, r.chunks, llm.requests_by_tag("answer")[0].messages))
            return out
        finally:
            idx.close()

    on, off = run("on"), run("off")
    assert on == off
    assert all(entities and chunks for entities, _, chunks, _ in on)  # the questions reached the graph


def test_a_graph_with_offset_gaps_is_read_through_kuzu_or_refused(tmp_path, small_tables, monkeypatch):  # noqa: F811
    from hxd2_ray.errors import IndexMismatchError

    path = tmp_path / "g.kz"
    load_graph(path, *small_tables)
    real_scan = KuzuGraphStore.scan_tables

    def holey(self):
        scanned = real_scan(self)
        return dict(scanned, Entity=scanned["Entity"].slice(1))

    monkeypatch.setattr(KuzuGraphStore, "scan_tables", holey)
    store = KuzuGraphStore(path)
    assert open_resident(store, "auto", 100) is store  # auto: falls back, the store stays open and answers
    assert [e["key"] for e in store.get_entities(["a", "b"])] == ["a", "b"]
    with pytest.raises(IndexMismatchError, match="resident_graph=on.*not dense"):
        open_resident(store, "on", 100)
    with pytest.raises(RuntimeError, match="closed"):
        store.counts()  # a refused open closes what it was given


def test_hub_limits_match_kuzu(tmp_path):
    """One hub with many edges whose far-end degrees and weights tie in groups: the best-edges cut keeps whole
    ties, so every limit ranks exactly as Kùzu's full read."""
    spokes = [f"s{i:02d}" for i in range(40)]
    rels = [_rel("hub", s, weight=float(i % 3)) for i, s in enumerate(spokes)]
    rels += [_rel(spokes[i], spokes[i + 1]) for i in range(0, 40, 4)]  # some spokes get a higher degree
    path = tmp_path / "hub.kz"
    load_graph(path, _docs([]), _chunks([]), _ents([_ent(k) for k in ["hub", *spokes]]), _rels(rels))
    with KuzuGraphStore(path, node_columns=False) as kuzu, resident(path) as mem:
        for limit in (None, 0, 1, 2, 3, 5, 7, 10, 11, 39, 40, 41):
            assert mem.neighbors(["hub"], limit) == kuzu.neighbors(["hub"], limit), limit
            assert mem.neighbors(["hub", "s00", "ghost"], limit) == kuzu.neighbors(["hub", "s00", "ghost"], limit)
