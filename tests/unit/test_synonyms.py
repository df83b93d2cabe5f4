"""SYNONYM edges: found with the entity_name family, thresholded, deduplicated; in the graph, the resident copy
and the index fingerprint (without invalidating the staged extraction)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hxd2_ray.config import HxdConfig, SynonymConfig
from hxd2_ray.graph.kuzu_store import KuzuGraphStore, load_graph
from hxd2_ray.graph.kuzu_tables import prepare_tables
from hxd2_ray.graph.resident import ResidentGraph
from hxd2_ray.graph_assembly.synonyms import synonym_edges
from hxd2_ray.index_store import tables
from hxd2_ray.vectors.faiss_index import FaissFamilyIndex, write_family
from tests.unit.retrieval_fixtures import index_config, tiny_tables


def _unit(rows):
    arr = np.asarray(rows, dtype=np.float32)
    return arr / np.linalg.norm(arr, axis=1, keepdims=True)


# Four names: a and b nearly the same direction (cos 0.995), c at cos 0.8 from a, d orthogonal to all. The first
# three share text (the edges need it, test_names_must_share_some_text).
A, B, C, D = KEYS = ["lilu", "lilu mythology", "lilus", "gallu"]
VECTORS = _unit([[1.0, 0.0, 0.0], [0.995, 0.0998749, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])


@pytest.fixture()
def family(tmp_path):
    cfg = index_config(dim=3)
    write_family(tmp_path, "entity_name", KEYS, VECTORS, cfg.vectors)
    fam = FaissFamilyIndex.open(tmp_path, "entity_name")
    yield fam
    fam.close()


def _rows(table):
    return [(r["source_key"], r["target_key"], round(r["score"], 3)) for r in table.to_pylist()]


def test_pairs_above_the_threshold_once_each_with_their_cosine(family):
    got = synonym_edges(KEYS, VECTORS, family, SynonymConfig(k=3, threshold=0.75, batch_size=2))
    cos = VECTORS @ VECTORS.T
    assert _rows(got) == [(A, B, round(float(cos[0, 1]), 3)), (A, C, 0.8), (B, C, round(float(cos[1, 2]), 3))]
    assert got.schema == tables.SYNONYMS
    strict = synonym_edges(KEYS, VECTORS, family, SynonymConfig(k=3, threshold=0.9))
    assert _rows(strict) == [(A, B, round(float(cos[0, 1]), 3))]


def test_k_caps_each_entitys_list_and_the_pair_survives_from_either_side(family):
    # k=1: a's nearest is b, b's is a, c's is b (0.86 > 0.8 to a): a-c is nobody's first neighbour any more.
    got = synonym_edges(KEYS, VECTORS, family, SynonymConfig(k=1, threshold=0.5))
    assert [(s, t) for s, t, _ in _rows(got)] == [(A, B), (B, C)]


def test_a_subset_is_searched_against_the_whole_family(family):
    # What an incremental build does: only the new entity (d, then c) against the family holding every name.
    assert synonym_edges([D], VECTORS[3:], family, SynonymConfig(threshold=0.5)).num_rows == 0
    assert [(s, t) for s, t, _ in _rows(synonym_edges([C], VECTORS[2:3], family, SynonymConfig(threshold=0.75)))] == [
        (A, C),
        (B, C),
    ]


def test_off_or_empty_gives_no_edges(family):
    assert synonym_edges(KEYS, VECTORS, family, SynonymConfig(enabled=False)).num_rows == 0
    assert synonym_edges([], np.zeros((0, 3), np.float32), family, SynonymConfig()).num_rows == 0
    with pytest.raises(ValueError, match="4 keys but 3 vectors"):
        synonym_edges(KEYS, VECTORS[:3], family, SynonymConfig())


def test_graph_stores_them_and_the_resident_copy_walks_them(tmp_path):
    docs, chunks, ents, rels = tiny_tables()
    keys = ents.column("key").to_pylist()
    syn = pa.table(
        {
            "source_key": [keys[1], keys[0], keys[0], keys[2]],
            "target_key": [keys[0], keys[1], keys[0], keys[3]],
            "score": [0.9, 0.8, 1.0, 0.95],
        },
        schema=tables.SYNONYMS,
    )
    prepared = prepare_tables(docs, chunks.drop_columns(["shard"]), ents, rels, syn)
    # oriented smaller key first, one row per pair (the first), self-pairs dropped
    assert prepared["SYNONYM"].num_rows == 2
    path = tmp_path / "g.kz"
    load_graph(path, docs, chunks.drop_columns(["shard"]), ents, rels, synonyms=syn)
    store = KuzuGraphStore(path)
    with ResidentGraph.from_tables(store, store.scan_tables()) as mem:
        walk = mem.walk_edges()
        assert mem.synonym_count() == 2
        pairs = {tuple(sorted(mem.entity_keys_at([a, b]))) for a, b in zip(*walk.synonyms[:2])}
        assert pairs == {tuple(sorted(keys[:2])), tuple(sorted(keys[2:4]))}
        assert sorted(np.round(walk.synonyms[2], 3).tolist()) == [0.9, 0.95]
    bad = pa.table({"source_key": ["nobody"], "target_key": [keys[0]], "score": [0.9]}, schema=tables.SYNONYMS)
    with pytest.raises(ValueError, match="not loaded"):
        prepare_tables(docs, chunks.drop_columns(["shard"]), ents, rels, bad)


def test_a_graph_without_the_table_reads_as_no_synonyms(tmp_path):
    # An index built before synonym edges existed: its graph has no SYNONYM table.
    import kuzu

    from hxd2_ray.graph import kuzu_queries, kuzu_schema

    docs, chunks, ents, rels = tiny_tables()
    prepared = prepare_tables(docs, chunks.drop_columns(["shard"]), ents, rels)
    path = tmp_path / "old.kz"
    db = kuzu.Database(str(path))
    conn = kuzu.Connection(db)
    for stmt in kuzu_schema.DDL[:-2]:  # everything but SYNONYM and NAMES_TITLE
        conn.execute(stmt)
    for name in kuzu_schema.GRAPH_TABLES:
        if prepared[name].num_rows:
            conn.execute(kuzu_queries.Q_COPY[name], {"t": prepared[name]})
    conn.close()
    db.close()
    store = KuzuGraphStore(path)
    with ResidentGraph.from_tables(store, store.scan_tables()) as mem:
        assert mem.synonym_count() == 0 and len(mem.walk_edges().synonyms[0]) == 0
        assert mem.walk_edges().n_titles == 0


def test_fingerprint_has_the_synonym_settings_but_the_staging_one_does_not():
    base = HxdConfig()
    other = HxdConfig(synonyms=SynonymConfig(threshold=0.9))
    bigger_batch = HxdConfig(synonyms=SynonymConfig(batch_size=99))
    assert base.index_fingerprint("p") != other.index_fingerprint("p")
    assert base.staging_fingerprint("p") == other.staging_fingerprint("p")  # extraction is reused
    assert base.index_fingerprint("p") == bigger_batch.index_fingerprint("p")
    assert HxdConfig(synonyms=SynonymConfig(enabled=False, threshold=0.1)).index_fingerprint("p") == HxdConfig(
        synonyms=SynonymConfig(enabled=False, threshold=0.5)
    ).index_fingerprint("p")


def test_names_must_share_some_text(tmp_path):
    from hxd2_ray.graph_assembly.synonyms import share_text

    assert share_text("harvard", "harvard university") and share_text("beaux arts", "beaux-arts")
    assert not share_text("康恵", "电软") and share_text("青禾17号", "青禾")
    # Two unrelated names an embedder cannot tell apart (identical vectors): no edge unless the check is off.
    keys, vecs = ["康恵", "电软"], _unit([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    write_family(tmp_path, "entity_name", keys, vecs, index_config(dim=3).vectors)
    fam = FaissFamilyIndex.open(tmp_path, "entity_name")
    try:
        assert synonym_edges(keys, vecs, fam, SynonymConfig()).num_rows == 0
        assert synonym_edges(keys, vecs, fam, SynonymConfig(require_shared_text=False)).num_rows == 1
    finally:
        fam.close()
