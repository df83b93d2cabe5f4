"""Kùzu graph store: bulk load from Arrow, counts/degree/derived edges, hostile strings, parameter guard."""

from __future__ import annotations

import pyarrow as pa
import pytest

from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.graph.kuzu_store import (
    Q_GET_ENTITIES,
    KuzuGraphStore,
    KuzuGraphWriter,
    check_params,
    load_graph,
    prepare_tables,
)
from hxd2_ray.indexing import tables

HOSTILE_NAMES = [
    "O'Brien \"x\"",
    "back\\slash\\\\n",
    "x'}) MATCH (n) DETACH DELETE n //",
    "emoji 😀🚀 and 中文",
    "multi\nline\r\nname\t",
    "MATCH RETURN CREATE $keys",
]
LONG_DESCRIPTION = ("αβγ'\"\\\n😀" * 2000)[:10_000]  # quotes, backslash, newline, emoji


def _docs(rows):
    return pa.Table.from_pylist(rows, schema=tables.DOCUMENTS)


def _chunks(rows):
    return pa.Table.from_pylist(rows, schema=tables.CHUNKS)


def _ents(rows):
    return pa.Table.from_pylist(rows, schema=tables.ENTITIES)


def _rels(rows):
    return pa.Table.from_pylist(rows, schema=tables.RELATIONS)


def _doc(i, title=None):
    return {"id": f"d{i}", "source_id": f"src{i}", "source_path": f"/in/{i}.md", "title": title or f"T{i}",
            "n_chars": 100 * i}


def _chunk(i, doc, order):
    return {"id": f"c{i}", "doc_id": doc, "order": order, "start": order * 10, "text": f"text {i}",
            "header_path": "H1 > H2", "language": "en", "shard": 0}


def _ent(key, chunks=(), name=None, description="desc", mentions=1):
    return {"key": key, "name": name if name is not None else key.upper(), "type": "concept",
            "description": description, "source_chunk_ids": list(chunks), "mention_count": mentions,
            "name_truncated": False}


def _rel(s, t, weight=1.0, desc="rel"):
    return {"source_key": s, "target_key": t, "description": desc, "keywords": ["k1", "k2"], "weight": weight,
            "source_chunk_ids": ["c1"], "mention_count": 1}


@pytest.fixture()
def small_tables():
    docs = _docs([_doc(1), _doc(2), _doc(1)])  # duplicate document id
    chunks = _chunks([_chunk(1, "d1", 0), _chunk(2, "d1", 1), _chunk(3, "d2", 0), _chunk(4, "d9", 0),
                      _chunk(1, "d1", 0)])  # c4's document is missing; c1 duplicated
    ents = _ents([
        _ent("a", ["c1", "c2", "c1", "nochunk"]),
        _ent("b", ["c3"]),
        _ent("c", ["c1"]),
        _ent("d", []),
        _ent("a", ["c9"]),  # duplicate key: first wins
    ])
    rels = _rels([
        _rel("a", "b", 2.0),
        _rel("c", "a", 1.0),  # stored reversed: becomes (a, c)
        _rel("a", "c", 5.0),  # duplicate pair once canonicalised: first wins
        _rel("b", "c", 3.0),
    ])
    return docs, chunks, ents, rels


@pytest.fixture()
def store(tmp_path, small_tables):
    path = tmp_path / "graph.kz"
    counts = load_graph(path, *small_tables)
    assert counts == {"documents": 2, "chunks": 4, "entities": 4, "relations": 3, "mentions": 4}
    s = KuzuGraphStore(path)
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
    load_graph(path, _docs([_doc(1, title=HOSTILE_NAMES[1])]), _chunks([_chunk(1, "d1", 0)]), _ents(ents),
               _rels(rels))
    with KuzuGraphStore(path) as s:
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
    with KuzuGraphStore(path) as s1, KuzuGraphStore(path) as s2:
        assert s1.counts() == s2.counts()
        assert s1.get_entities(["a"])[0]["key"] == s2.get_entities(["a"])[0]["key"]


def test_refuses_non_empty_db(tmp_path, small_tables):
    path = tmp_path / "g.kz"
    load_graph(path, *small_tables)
    with pytest.raises(ValueError, match="not empty"):
        KuzuGraphWriter(path)
    with KuzuGraphStore(path) as s:  # the refused writer left the data alone
        assert s.counts()["entities"] == 4


def test_missing_relation_endpoint(tmp_path):
    with pytest.raises(ValueError, match="relation endpoints are not entities.*'ghost'"):
        prepare_tables(_docs([]), _chunks([]), _ents([_ent("a")]), _rels([_rel("a", "ghost")]))


def test_missing_columns_and_null_keys():
    ents = _ents([_ent("a")]).drop_columns(["description"])
    with pytest.raises(ValueError, match="description"):
        prepare_tables(_docs([]), _chunks([]), ents, _rels([]))
    bad = pa.Table.from_pylist([{**_ent("a"), "key": None}], schema=tables.ENTITIES)
    with pytest.raises(ValueError, match="null 'key'"):
        prepare_tables(_docs([]), _chunks([]), bad, _rels([]))


def test_nulls_become_defaults_and_empty_tables_load(tmp_path):
    ent = {**_ent("a"), "description": None, "source_chunk_ids": None, "mention_count": None}
    path = tmp_path / "g.kz"
    counts = load_graph(path, _docs([]), _chunks([]), _ents([ent]), _rels([]))
    assert counts == {"documents": 0, "chunks": 0, "entities": 1, "relations": 0, "mentions": 0}
    with KuzuGraphStore(path) as s:
        row = s.get_entities(["a"])[0]
        assert row["description"] == "" and row["source_chunk_ids"] == [] and row["mention_count"] == 0
        assert s.neighbors(["a"]) == [] and s.chunks_for_entities(["a"]) == {"a": []}


def test_missing_db_is_index_not_found(tmp_path):
    with pytest.raises(IndexNotFoundError):
        KuzuGraphStore(tmp_path / "absent.kz")


def test_bulk_load_closes_and_is_single_use(tmp_path, small_tables):
    path = tmp_path / "g.kz"
    writer = KuzuGraphWriter(path)
    writer.bulk_load(*small_tables)  # no explicit close: the file must be complete and unlocked already
    with KuzuGraphStore(path) as s:
        assert s.counts()["relations"] == 3
    with pytest.raises(RuntimeError, match="loads once"):
        writer.bulk_load(*small_tables)
