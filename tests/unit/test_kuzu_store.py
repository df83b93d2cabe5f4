"""The graph store of record: bulk load from Arrow, counts/degree/derived edges, hostile strings, parameter guard.

Runs on the engine ``HXD2_TEST_GRAPH_BACKEND`` names (kuzu when unset): ``tests/unit/test_graph_engine.py`` runs
this module and the store contract again on ladybug in a process of its own (the two cannot share a process)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.graph import kuzu_store
from hxd2_ray.graph.kuzu_queries import Q_GET_ENTITIES, check_params
from hxd2_ray.graph.kuzu_tables import prepare_tables
from hxd2_ray.graph.schema import CHUNKS, DOCUMENTS, ENTITIES, RELATIONS
from hxd2_ray.graph.templates import LOGIC_TEMPLATES

HOSTILE_NAMES = [
    'O\'Brien "x"',
    "back\\slash\\\\n",
    "x'}) MATCH (n) DETACH DELETE n //",
    "emoji 😀🚀 and 中文",
    "multi\nline\r\nname\t",
    "MATCH RETURN CREATE $keys",
]
GRAPH_BACKEND = os.environ.get("HXD2_TEST_GRAPH_BACKEND", "kuzu")


def open_store(path, **kwargs):
    """A store on the engine under test."""
    return kuzu_store.KuzuGraphStore(path, engine=GRAPH_BACKEND, **kwargs)


def load_graph(path, *tables, **kwargs):
    """A graph loaded by the engine under test."""
    return kuzu_store.load_graph(path, *tables, engine=GRAPH_BACKEND, **kwargs)


def new_writer(path):
    return kuzu_store.KuzuGraphWriter(path, engine=GRAPH_BACKEND)


LONG_DESCRIPTION = ("αβγ'\"\\\n😀" * 2000)[:10_000]  # quotes, backslash, newline, emoji


def _docs(rows):
    return pa.Table.from_pylist(rows, schema=DOCUMENTS)


def _chunks(rows):
    return pa.Table.from_pylist(rows, schema=CHUNKS)


def _ents(rows):
    return pa.Table.from_pylist(rows, schema=ENTITIES)


def _rels(rows):
    return pa.Table.from_pylist(rows, schema=RELATIONS)


def _doc(i, title=None):
    return {
        "id": f"d{i}",
        "source_id": f"src{i}",
        "source_path": f"/in/{i}.md",
        "title": title or f"T{i}",
        "n_chars": 100 * i,
    }


def _chunk(i, doc, order):
    return {
        "id": f"c{i}",
        "doc_id": doc,
        "order": order,
        "start": order * 10,
        "text": f"text {i}",
        "header_path": "H1 > H2",
        "language": "en",
        "shard": 0,
    }


def _ent(key, chunks=(), name=None, description="desc", mentions=1):
    return {
        "key": key,
        "name": name if name is not None else key.upper(),
        "type": "concept",
        "description": description,
        "source_chunk_ids": list(chunks),
        "mention_count": mentions,
        "name_truncated": False,
    }


def _rel(s, t, weight=1.0, desc="rel"):
    return {
        "source_key": s,
        "target_key": t,
        "description": desc,
        "keywords": ["k1", "k2"],
        "weight": weight,
        "source_chunk_ids": ["c1"],
        "mention_count": 1,
    }


@pytest.fixture()
def small_tables():
    docs = _docs([_doc(1), _doc(2), _doc(1)])  # duplicate document id
    chunks = _chunks(
        [_chunk(1, "d1", 0), _chunk(2, "d1", 1), _chunk(3, "d2", 0), _chunk(4, "d9", 0), _chunk(1, "d1", 0)]
    )  # c4's document is missing; c1 duplicated
    ents = _ents(
        [
            _ent("a", ["c1", "c2", "c1", "nochunk"]),
            _ent("b", ["c3"]),
            _ent("c", ["c1"]),
            _ent("d", []),
            _ent("a", ["c9"]),  # duplicate key: first wins
        ]
    )
    rels = _rels(
        [
            _rel("a", "b", 2.0),
            _rel("c", "a", 1.0),  # stored reversed: becomes (a, c)
            _rel("a", "c", 5.0),  # duplicate pair once canonicalised: first wins
            _rel("b", "c", 3.0),
        ]
    )
    return docs, chunks, ents, rels


@pytest.fixture()
def store(tmp_path, small_tables):
    path = tmp_path / "graph.kz"
    counts = load_graph(path, *small_tables)
    assert counts == {"documents": 2, "chunks": 4, "entities": 4, "relations": 3, "mentions": 4}
    s = open_store(path)
    yield s
    s.close()


def test_counts_and_degree(store):
    assert store.counts() == {"documents": 2, "chunks": 4, "entities": 4, "relations": 3, "mentions": 4}
    assert store.entity_degree(["a", "b", "c", "d", "zz"]) == {"a": 2, "b": 2, "c": 2, "d": 0}


def test_get_entities_order_and_missing(store):
    rows = store.get_entities(["c", "zz", "a", "c"])
    assert [r["key"] for r in rows] == ["c", "a"]
    a = rows[1]
    assert a["name"] == "A" and a["source_chunk_ids"] == ["c1", "c2", "c1", "nochunk"]
    assert a["degree"] == 2 and a["mention_count"] == 1 and a["name_truncated"] is False
    assert store.get_entities([]) == []


def test_mentions_and_part_of(store):
    got = store.chunks_for_entities(["a", "b", "d", "zz"])
    # Only chunk ids that exist become MENTIONS edges; repeats collapse; document order.
    assert got == {"a": ["c1", "c2"], "b": ["c3"], "d": [], "zz": []}
    chunks = store.get_chunks(["c3", "c4", "c1", "nope"])
    assert [c["id"] for c in chunks] == ["c3", "c4", "c1"]
    assert chunks[0]["doc_title"] == "T2" and chunks[0]["doc_source_id"] == "src2"
    assert chunks[0]["doc_source_path"] == "/in/2.md" and chunks[0]["order"] == 0
    assert chunks[1]["doc_title"] == ""  # no PART_OF edge: its document was never loaded
    assert chunks[2]["header_path"] == "H1 > H2" and chunks[2]["text"] == "text 1"


def test_neighbors_undirected_and_limited(store):
    edges = store.neighbors(["c"])
    assert {(e["source_key"], e["target_key"]) for e in edges} == {("a", "c"), ("b", "c")}
    ac = next(e for e in edges if e["target_key"] == "c" and e["source_key"] == "a")
    assert ac["weight"] == 1.0  # the first of the duplicate pair was kept
    assert ac["keywords"] == ["k1", "k2"] and ac["degree"] == 4
    top = store.neighbors(["a"], limit_per_entity=1)
    assert len(top) == 1 and top[0]["source_key"] == "a"
    both = store.neighbors(["a", "b"])
    assert len(both) == 3  # the shared edge (a, b) is returned once
    assert store.neighbors(["d"]) == []


def test_get_relations_any_orientation(store):
    rels = store.get_relations([("b", "a"), ("c", "b"), ("a", "d")])
    assert [(r["source_key"], r["target_key"]) for r in rels] == [("a", "b"), ("b", "c")]
    assert rels[0]["weight"] == 2.0


def test_hostile_strings_stored_verbatim(tmp_path):
    ents = [_ent(f"k{i}", name=n, description=n + LONG_DESCRIPTION) for i, n in enumerate(HOSTILE_NAMES)]
    # A hostile primary key too, sharing k2's name: the name lookup prefers the most mentioned.
    ents.append(_ent(HOSTILE_NAMES[2], name=HOSTILE_NAMES[2], mentions=5))
    rels = [_rel("k0", "k2", desc=HOSTILE_NAMES[0]), _rel(HOSTILE_NAMES[2], "k1", desc=LONG_DESCRIPTION)]
    path = tmp_path / "g.kz"
    load_graph(path, _docs([_doc(1, title=HOSTILE_NAMES[1])]), _chunks([_chunk(1, "d1", 0)]), _ents(ents), _rels(rels))
    with open_store(path) as s:
        assert s.counts()["entities"] == len(ents)
        for i, name in enumerate(HOSTILE_NAMES):
            hit = s.find_entity_by_name(name, key_fn=lambda n, i=i: f"k{i}")
            assert hit is not None and hit["name"] == name
            assert hit["description"] == name + LONG_DESCRIPTION
            assert len(hit["description"]) >= 10_000
        by_name = s.find_entity_by_name(HOSTILE_NAMES[2])
        assert by_name is not None and by_name["key"] == HOSTILE_NAMES[2]
        assert s.find_entity_by_name("x") is None
        edges = s.neighbors([HOSTILE_NAMES[2]])
        assert len(edges) == 1 and edges[0]["description"] == LONG_DESCRIPTION
        assert s.get_relations([("k2", "k0")])[0]["description"] == HOSTILE_NAMES[0]
        assert s.get_chunks(["c1"])[0]["doc_title"] == HOSTILE_NAMES[1]
        # Nothing was deleted by the injection-shaped string.
        assert s.counts()["entities"] == len(ents)


def test_check_params_guard():
    check_params(Q_GET_ENTITIES, {"keys": ["a"]})
    with pytest.raises(ValueError, match="unbound \\['keys'\\]"):
        check_params(Q_GET_ENTITIES, {})
    with pytest.raises(ValueError, match="unused \\['other'\\]"):
        check_params(Q_GET_ENTITIES, {"keys": [], "other": 1})


def test_store_rejects_unbound_query(store):
    # 0.11.3 would run this unfiltered and return every entity; the guard refuses instead.
    with pytest.raises(ValueError, match="unbound"):
        store._rows(Q_GET_ENTITIES, {})


def test_two_read_only_stores(tmp_path, small_tables):
    path = tmp_path / "g.kz"
    load_graph(path, *small_tables)
    with open_store(path) as s1, open_store(path) as s2:
        assert s1.counts() == s2.counts()
        assert s1.get_entities(["a"])[0]["key"] == s2.get_entities(["a"])[0]["key"]


def test_refuses_non_empty_db(tmp_path, small_tables):
    path = tmp_path / "g.kz"
    load_graph(path, *small_tables)
    with pytest.raises(ValueError, match="not empty"):
        new_writer(path)
    with open_store(path) as s:  # the refused writer left the data alone
        assert s.counts()["entities"] == 4


def test_missing_relation_endpoint(tmp_path):
    with pytest.raises(ValueError, match="relation endpoints are not entities.*'ghost'"):
        prepare_tables(_docs([]), _chunks([]), _ents([_ent("a")]), _rels([_rel("a", "ghost")]))


def test_missing_columns_and_null_keys():
    ents = _ents([_ent("a")]).drop_columns(["description"])
    with pytest.raises(ValueError, match="description"):
        prepare_tables(_docs([]), _chunks([]), ents, _rels([]))
    bad = pa.Table.from_pylist([{**_ent("a"), "key": None}], schema=ENTITIES)
    with pytest.raises(ValueError, match="null 'key'"):
        prepare_tables(_docs([]), _chunks([]), bad, _rels([]))


def test_nulls_become_defaults_and_empty_tables_load(tmp_path):
    ent = {**_ent("a"), "description": None, "source_chunk_ids": None, "mention_count": None}
    path = tmp_path / "g.kz"
    counts = load_graph(path, _docs([]), _chunks([]), _ents([ent]), _rels([]))
    assert counts == {"documents": 0, "chunks": 0, "entities": 1, "relations": 0, "mentions": 0}
    with open_store(path) as s:
        row = s.get_entities(["a"])[0]
        assert row["description"] == "" and row["source_chunk_ids"] == [] and row["mention_count"] == 0
        assert s.neighbors(["a"]) == [] and s.chunks_for_entities(["a"]) == {"a": []}


def test_missing_db_is_index_not_found(tmp_path):
    with pytest.raises(IndexNotFoundError):
        open_store(tmp_path / "absent.kz")


def test_bulk_load_closes_and_is_single_use(tmp_path, small_tables):
    path = tmp_path / "g.kz"
    writer = new_writer(path)
    writer.bulk_load(*small_tables)  # no explicit close: the file must be complete and unlocked already
    with open_store(path) as s:
        assert s.counts()["relations"] == 3
    with pytest.raises(RuntimeError, match="loads once"):
        writer.bulk_load(*small_tables)


# ---------------------------------------------------------------------------------------------------
# Per-key reads vs the batched UNWIND templates they replaced (same rows, same order).

_OLD_EDGE = (
    "a.key AS a_key, b.key AS b_key, r.description AS description, r.keywords AS keywords, r.weight AS weight,"
    " r.source_chunk_ids AS source_chunk_ids, r.mention_count AS mention_count, a.degree + b.degree AS degree"
)
_OLD_NEIGHBORS = f"UNWIND $keys AS k MATCH (a:Entity {{key: k}})-[r:RELATED]-(b:Entity) RETURN k AS seed, {_OLD_EDGE}"
_OLD_RELATIONS = (
    f"UNWIND $pairs AS p MATCH (a:Entity {{key: p.s}})-[r:RELATED]->(b:Entity {{key: p.t}}) RETURN {_OLD_EDGE}"
)
_OLD_CHUNKS_FOR = (
    "UNWIND $keys AS k MATCH (c:Chunk)-[:MENTIONS]->(e:Entity {key: k})"
    " RETURN e.key AS key, c.id AS id, c.doc_id AS doc_id, c.ord AS ord"
)
_OLD_CHUNKS = (
    "UNWIND $ids AS i MATCH (c:Chunk {id: i}) OPTIONAL MATCH (c)-[:PART_OF]->(d:Document)"
    " RETURN c.id AS id, c.doc_id AS doc_id, c.ord AS ord, c.start AS start, c.text AS text,"
    " c.header_path AS header_path, c.language AS language, d.title AS doc_title,"
    " d.source_id AS doc_source_id, d.source_path AS doc_source_path"
)


def _old_edge(r):
    from hxd2_ray.graph.base import canonical_pair

    s, t = canonical_pair(r["a_key"], r["b_key"])
    return {
        "source_key": s,
        "target_key": t,
        "description": r["description"],
        "keywords": list(r["keywords"]),
        "weight": float(r["weight"]),
        "source_chunk_ids": list(r["source_chunk_ids"]),
        "mention_count": int(r["mention_count"]),
        "degree": int(r["degree"]),
    }


def _old_neighbors(store, keys, limit):
    from hxd2_ray.graph.base import sort_edges, unique_in_order

    seeds = unique_in_order(keys)
    per = {s: {} for s in seeds}
    for r in store._rows(_OLD_NEIGHBORS, {"keys": seeds}):
        e = _old_edge(r)
        per[r["seed"]][(e["source_key"], e["target_key"])] = e
    out = {}
    for s in seeds:
        ranked = sort_edges(list(per[s].values()))
        for e in ranked[: limit if limit is not None else None]:
            out.setdefault((e["source_key"], e["target_key"]), e)
    return sort_edges(list(out.values()))


@pytest.fixture()
def richer_path(tmp_path):
    """Ties in (degree, weight), a self-loop, a hub, a hostile key, chunks across documents."""
    hostile = HOSTILE_NAMES[2]
    docs = _docs([_doc(1), _doc(2)])
    chunks = _chunks(
        [_chunk(1, "d2", 1), _chunk(2, "d1", 0), _chunk(3, "d2", 0), _chunk(4, "d9", 0), _chunk(5, "d1", 2)]
    )
    ents = _ents(
        [
            _ent("h", ["c5", "c1", "c2", "c3"]),
            _ent("x", ["c4", "c2"]),
            _ent("y", ["c1"]),
            _ent("z", []),
            _ent("w", ["c3"]),
            _ent(hostile, ["c1"]),
            _ent("lonely"),
        ]
    )
    rels = _rels(
        [
            _rel("h", "x", 1.0),
            _rel("y", "h", 1.0),
            _rel("h", "z", 1.0),
            _rel("h", "w", 4.0),
            _rel("x", "y", 2.0),
            _rel("w", "w", 9.0),
            _rel(hostile, "h", 1.0),
            _rel("z", "y", 1.0),
        ]
    )
    path = tmp_path / "rich.kz"
    load_graph(path, docs, chunks, ents, rels)
    return path


@pytest.fixture()
def richer_store(richer_path):
    with open_store(richer_path) as s:
        yield s


ALL_KEYS = ["h", "x", "y", "z", "w", HOSTILE_NAMES[2], "lonely", "ghost", "h", "", "x'})"]


@pytest.mark.parametrize("limit", [None, 0, 1, 2, 3, 100])
def test_neighbors_match_batched_query(richer_store, limit):
    for keys in (ALL_KEYS, ["ghost"], ["w"], ["y", "h"], []):
        assert richer_store.neighbors(keys, limit_per_entity=limit) == _old_neighbors(richer_store, keys, limit)
    edges = richer_store.neighbors(["w"])
    assert ("w", "w") in {(e["source_key"], e["target_key"]) for e in edges}  # self-loop kept, once
    assert len(edges) == 2


def test_batch_reads_match_batched_queries(richer_store):
    from hxd2_ray.graph.base import unique_in_order

    s = richer_store
    wanted = unique_in_order(ALL_KEYS)
    old_ents = {r["key"]: r for r in s._rows(Q_GET_ENTITIES, {"keys": wanted})}
    new_ents = s.get_entities(ALL_KEYS)
    assert [e["key"] for e in new_ents] == [k for k in wanted if k in old_ents]
    assert all(e["degree"] == old_ents[e["key"]]["degree"] for e in new_ents)
    assert s.entity_degree(ALL_KEYS) == {k: r["degree"] for k, r in old_ents.items()}
    assert s.get_entities(["ghost", ""]) == [] and s.entity_degree(["ghost"]) == {}

    old_cfe = {k: [] for k in wanted}
    for r in sorted(s._rows(_OLD_CHUNKS_FOR, {"keys": wanted}), key=lambda r: (r["doc_id"], r["ord"], r["id"])):
        old_cfe[r["key"]].append(r["id"])
    assert s.chunks_for_entities(ALL_KEYS) == old_cfe
    assert old_cfe["h"] == ["c2", "c5", "c3", "c1"] and old_cfe["ghost"] == []
    assert s.chunks_for_entities([]) == {}

    ids = ["c4", "c1", "nope", "c3", "c1", "c2", "c5", ""]
    old_chunks = {r["id"]: r for r in s._rows(_OLD_CHUNKS, {"ids": unique_in_order(ids)})}
    new_chunks = s.get_chunks(ids)
    assert [c["id"] for c in new_chunks] == ["c4", "c1", "c3", "c2", "c5"]
    for c in new_chunks:
        o = old_chunks[c["id"]]
        assert (c["doc_id"], c["order"], c["start"], c["text"], c["header_path"], c["language"]) == (
            o["doc_id"],
            o["ord"],
            o["start"],
            o["text"],
            o["header_path"],
            o["language"],
        )
        assert (c["doc_title"], c["doc_source_id"], c["doc_source_path"]) == (
            o["doc_title"] or "",
            o["doc_source_id"] or "",
            o["doc_source_path"] or "",
        )
    assert new_chunks[0]["doc_title"] == ""  # c4: its document was never loaded
    assert s.get_chunks([]) == [] and s.get_chunks(["nope"]) == []

    pairs = [("x", "h"), ("h", "x"), ("ghost", "h"), ("w", "w"), ("y", "z"), ("h", HOSTILE_NAMES[2]), ("x", "z")]
    canon = unique_in_order((min(a, b), max(a, b)) for a, b in pairs)
    old_rel = {}
    for r in s._rows(_OLD_RELATIONS, {"pairs": [{"s": a, "t": b} for a, b in canon]}):
        e = _old_edge(r)
        old_rel[(e["source_key"], e["target_key"])] = e
    assert s.get_relations(pairs) == [old_rel[p] for p in canon if p in old_rel]
    assert [(e["source_key"], e["target_key"]) for e in s.get_relations(pairs)] == [
        ("h", "x"),
        ("w", "w"),
        ("y", "z"),
        ("h", HOSTILE_NAMES[2]),
    ]
    assert s.get_relations([]) == [] and s.get_relations([("ghost", "nobody")]) == []


def _canon_rows(rows):
    return sorted(repr(sorted(r.items())) for r in rows)


# The named reads as single batched statements (how the logic form first ran them): the reference rows.
_OLD_LF_EDGE = (
    "a.key AS a_key, a.name AS a_name, b.key AS b_key, b.name AS b_name,"
    " r.description AS description, r.keywords AS keywords"
)
_OLD_LF_PATH = (
    " RETURN a.key AS a_key, a.name AS a_name, m.key AS m_key, m.name AS m_name, b.key AS b_key, b.name AS b_name,"
    " r1.description AS d1, r1.keywords AS k1, r2.description AS d2, r2.keywords AS k2 LIMIT $limit"
)
_OLD_LF = {
    "lf_edges": (
        f"UNWIND $keys AS k MATCH (a:Entity {{key: k}})-[r:RELATED]-(b:Entity) RETURN {_OLD_LF_EDGE} LIMIT $limit"
    ),
    "lf_paths_2hop": (
        "UNWIND $keys AS k MATCH (a:Entity {key: k})-[r1:RELATED]-(m:Entity)-[r2:RELATED]-(b:Entity)"
        " WHERE b.key <> k" + _OLD_LF_PATH
    ),
    "lf_edges_between": (
        f"UNWIND $pairs AS p MATCH (a:Entity {{key: p.s}})-[r:RELATED]-(b:Entity {{key: p.t}}) RETURN {_OLD_LF_EDGE}"
    ),
    "lf_paths_between": (
        "UNWIND $pairs AS p MATCH (a:Entity {key: p.s})-[r1:RELATED]-(m:Entity)-[r2:RELATED]-(b:Entity {key: p.t})"
        + _OLD_LF_PATH
    ),
    "lf_entity_names": "MATCH (e:Entity) RETURN e.key AS key, e.name AS name ORDER BY e.key SKIP $skip LIMIT $limit",
    "lf_names_of": "UNWIND $keys AS k MATCH (e:Entity {key: k}) RETURN e.key AS key, e.name AS name",
}


def test_run_template_matches_batched_statements(richer_store):
    s = richer_store
    keys = ["h", "ghost", "w", HOSTILE_NAMES[2]]
    pairs = [{"s": "h", "t": "x"}, {"s": "x", "t": "h"}, {"s": "y", "t": "w"}, {"s": "ghost", "t": "h"}]
    cases = [
        ("lf_edges", {"keys": keys, "limit": 1000}),
        ("lf_paths_2hop", {"keys": keys, "limit": 1000}),
        ("lf_edges_between", {"pairs": pairs}),
        ("lf_paths_between", {"pairs": pairs, "limit": 1000}),
        ("lf_entity_names", {"skip": 1, "limit": 3}),
        ("lf_names_of", {"keys": keys + ["ghost"]}),
    ]
    assert {name for name, _ in cases} == set(LOGIC_TEMPLATES) == set(_OLD_LF)
    for name, params in cases:
        new = s.run_template(name, params)
        old = s._rows(_OLD_LF[name], params)
        assert _canon_rows(new) == _canon_rows(old), name
        assert new, name
    # LIMIT caps the whole result, as in the batched template.
    assert len(s.run_template("lf_edges", {"keys": keys, "limit": 3})) == 3
    assert s.run_template("lf_edges", {"keys": keys, "limit": 0}) == []
    assert len(s.run_template("lf_paths_between", {"pairs": pairs, "limit": 1})) == 1
    assert s.run_template("lf_names_of", {"keys": []}) == []
    with pytest.raises(KeyError):
        s.run_template("nope", {})
    with pytest.raises(ValueError, match="parameters"):
        s.run_template("lf_edges", {"keys": ["h"]})  # an unbound $limit must not run unfiltered


# ---------------------------------------------------------------------------------------------------
# Offset-resolved reads (node columns) vs the per-key templates: same rows, same order.

MALICIOUS = [
    "x'}) MATCH (n) DETACH DELETE n //",
    'x"}) MATCH (n) DETACH DELETE n //',
    "x`}) MATCH (n) DETACH DELETE n //",
    "$k",
    "') RETURN 1 UNION MATCH (e:Entity) RETURN e.key //",
]


def _all_reads(s, keys, pairs, chunk_ids):
    return {
        "neighbors": [s.neighbors(keys, limit_per_entity=limit) for limit in (None, 0, 1, 2, 100)],
        "chunks_for_entities": s.chunks_for_entities(keys),
        "get_entities": s.get_entities(keys),
        "entity_degree": s.entity_degree(keys),
        "get_relations": s.get_relations(pairs),
        "get_chunks": s.get_chunks(chunk_ids),
    }


def test_node_columns_match_per_key_reads(richer_path):
    pairs = [("x", "h"), ("ghost", "h"), ("w", "w"), ("y", "z"), ("h", HOSTILE_NAMES[2])]
    chunk_ids = ["c4", "c1", "nope", "c3", "c1", "c2", "c5", ""]
    with open_store(richer_path, node_columns=False) as per_key, open_store(richer_path) as cols:
        assert cols._use_columns and not per_key._use_columns  # read-only stores default to columns
        for keys in (ALL_KEYS, ["ghost"], ["w"], ["y", "h"], [HOSTILE_NAMES[2]], []):
            assert _all_reads(cols, keys, pairs, chunk_ids) == _all_reads(per_key, keys, pairs, chunk_ids)
        assert cols._columns["Entity"] is not None and cols._columns["Chunk"] is not None  # the fast path ran
        assert cols.chunks_for_entities(["h"]) == {"h": ["c2", "c5", "c3", "c1"]}  # (doc_id, ord, id) order
        assert [c["doc_title"] for c in cols.get_chunks(["c4", "c1"])] == ["", "T2"]  # c4: no document


def test_node_columns_scattered_offsets(richer_path, monkeypatch):
    """A parallel scan returns offsets out of order (seen at 1M entities); the columns are put back by offset."""
    loads = dict(kuzu_store._COLUMN_LOADS)
    for table, (query, names) in loads.items():
        loads[table] = (query + " ORDER BY o DESC", names)
    monkeypatch.setattr(kuzu_store, "_COLUMN_LOADS", loads)
    with open_store(richer_path, node_columns=False) as per_key, open_store(richer_path) as cols:
        cols.warm()
        assert cols._columns["Entity"].size == 7
        assert _all_reads(cols, ALL_KEYS, [("x", "h")], ["c1", "c5"]) == _all_reads(
            per_key, ALL_KEYS, [("x", "h")], ["c1", "c5"]
        )


def test_node_columns_thread_safe(richer_path):
    from concurrent.futures import ThreadPoolExecutor

    with open_store(richer_path) as s:
        expected = (s.neighbors(ALL_KEYS), s.chunks_for_entities(ALL_KEYS))
    with open_store(richer_path) as s, ThreadPoolExecutor(4) as pool:  # cold: threads race to load
        got = list(pool.map(lambda _: (s.neighbors(ALL_KEYS), s.chunks_for_entities(ALL_KEYS)), range(16)))
    assert all(g == expected for g in got)


@pytest.mark.parametrize("node_columns", [True, False])
def test_malicious_keys_return_nothing_and_change_nothing(store, tmp_path, small_tables, node_columns):
    before = store.counts()
    path = tmp_path / "graph.kz"  # the path the ``store`` fixture loaded
    with open_store(path, node_columns=node_columns) as s:
        reads = _all_reads(s, MALICIOUS, [(m, "a") for m in MALICIOUS] + [("a", m) for m in MALICIOUS], MALICIOUS)
        assert reads == {
            "neighbors": [[]] * 5,
            "chunks_for_entities": {m: [] for m in MALICIOUS},
            "get_entities": [],
            "entity_degree": {},
            "get_relations": [],
            "get_chunks": [],
        }
        assert all(s.find_entity_by_name(m) is None for m in MALICIOUS)
        for name, params in [
            ("lf_edges", {"keys": MALICIOUS, "limit": 10}),
            ("lf_names_of", {"keys": MALICIOUS}),
            ("lf_edges_between", {"pairs": [{"s": m, "t": "a"} for m in MALICIOUS]}),
        ]:
            assert s.run_template(name, params) == []
        assert s.counts() == before
    assert store.counts() == before
    assert store.get_entities(["a", "b", "c", "d"]) != []
