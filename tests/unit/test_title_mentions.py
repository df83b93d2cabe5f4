"""NAMES_TITLE edges: found in chunk text at index time, stored in Kùzu, read by the resident graph, walked by PPR."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hxd2_ray.config import TitleMentionConfig
from hxd2_ray.extraction.names import title_key
from hxd2_ray.graph.kuzu_store import KuzuGraphStore, load_graph
from hxd2_ray.graph.kuzu_tables import prepare_tables
from hxd2_ray.graph.resident import open_resident
from hxd2_ray.graph.schema import TITLE_MENTIONS
from hxd2_ray.graph_assembly.title_mentions import title_mention_edges
from hxd2_ray.retrieval.ppr import EdgeWeights, PropagationGraph
from tests.unit.test_kuzu_store import _chunks, _docs, _ents, _rels

DOCS = [
    {"id": "d-game", "source_id": "game", "source_path": "", "title": "Demon Dice", "n_chars": 1},
    {"id": "d-smith", "source_id": "smith", "source_path": "", "title": "Lester Smith (designer)", "n_chars": 1},
    {"id": "d-dragon", "source_id": "dragon", "source_path": "", "title": "Dragon Dice", "n_chars": 1},
    {"id": "d-simpsons", "source_id": "simpsons", "source_path": "", "title": "The Simpsons", "n_chars": 1},
    {"id": "d-band", "source_id": "band", "source_path": "", "title": "The Band", "n_chars": 1},
    {"id": "d-rice", "source_id": "rice", "source_path": "", "title": "水稻", "n_chars": 1},
    {"id": "d-notitle", "source_id": "x", "source_path": "", "title": "", "n_chars": 1},
]
CHUNKS = [
    # names "Lester Smith" (a title without its parenthetical) and "Dragon Dice" (longest match: not "Dice")
    ("c-game", "d-game", "Demon Dice is a dice game created by Lester Smith, designer of Dragon Dice."),
    ("c-smith", "d-smith", "Lester Smith is an American game designer."),  # its own title: no row
    ("c-smith2", "d-smith", "He also wrote for Demon Dice magazines and for The Simpsons."),
    # not written as names: lower case, or a capital only on a function word ("The band")
    ("c-plain", "d-notitle", "the demon dice of lester smith, in lower case. The band played on."),
    ("c-zh", "d-notitle", "这种水稻的产量很高。"),  # Chinese: read as a question is (jieba words)
]


def _tables():
    docs = _docs(DOCS)
    chunks = _chunks(
        [
            {"id": c, "doc_id": d, "order": i, "start": 0, "text": t, "header_path": "", "language": "en", "shard": 0}
            for i, (c, d, t) in enumerate(CHUNKS)
        ]
    )
    return docs, chunks


def test_title_key_drops_a_trailing_parenthetical_and_normalises():
    assert title_key("Lester Smith (designer)") == "lester smith"
    assert title_key("  Ｄｅｍｏｎ  Dice ") == "demon dice"
    assert title_key(None) == title_key("") == ""


def test_chunks_naming_other_documents_titles_are_found():
    docs, chunks = _tables()
    rows = title_mention_edges(docs, chunks, TitleMentionConfig())
    assert rows.schema == TITLE_MENTIONS
    assert list(zip(rows["chunk_id"].to_pylist(), rows["doc_id"].to_pylist())) == [
        ("c-game", "d-dragon"),
        ("c-game", "d-smith"),
        ("c-smith2", "d-game"),
        ("c-smith2", "d-simpsons"),
        ("c-zh", "d-rice"),
    ]


def test_off_common_titles_long_titles_and_no_titles_give_nothing():
    docs, chunks = _tables()
    assert title_mention_edges(docs, chunks, TitleMentionConfig(enabled=False)).num_rows == 0
    capped = title_mention_edges(docs, chunks, TitleMentionConfig(max_naming_chunks=1))
    # "Demon Dice" and "Lester Smith" are named by two chunks each (their own documents' included): over the cap
    assert set(capped["doc_id"].to_pylist()) == {"d-dragon", "d-simpsons", "d-rice"}
    short = title_mention_edges(docs, chunks, TitleMentionConfig(max_words=1))  # two-word titles are not looked for
    assert set(short["doc_id"].to_pylist()) == {"d-rice"}
    untitled = docs.set_column(docs.schema.get_field_index("title"), "title", pa.array([""] * docs.num_rows))
    assert title_mention_edges(untitled, chunks, TitleMentionConfig()).num_rows == 0


def test_a_title_shared_by_two_documents_links_to_both():
    docs, chunks = _tables()
    twin = {"id": "d-smith-2", "source_id": "s2", "source_path": "", "title": "Lester Smith (footballer)", "n_chars": 1}
    docs = pa.concat_tables([docs, _docs([twin])])
    rows = title_mention_edges(docs, chunks, TitleMentionConfig())
    named = {d for c, d in zip(rows["chunk_id"].to_pylist(), rows["doc_id"].to_pylist()) if c == "c-game"}
    assert named == {"d-smith", "d-smith-2", "d-dragon"}


def test_prepare_tables_rejects_title_mentions_of_unknown_chunks_or_documents():
    docs, chunks = _tables()
    bad = pa.table({"chunk_id": ["c-game"], "doc_id": ["nope"]}, schema=TITLE_MENTIONS)
    with pytest.raises(ValueError, match="not loaded"):
        prepare_tables(docs, chunks.drop_columns(["shard"]), _ents([]), _rels([]), None, bad)
    dup = pa.table({"chunk_id": ["c-game", "c-game"], "doc_id": ["d-smith", "d-smith"]}, schema=TITLE_MENTIONS)
    assert (
        prepare_tables(docs, chunks.drop_columns(["shard"]), _ents([]), _rels([]), None, dup)["NAMES_TITLE"].num_rows
        == 1
    )


def test_stored_title_mentions_become_title_nodes_of_the_walk(tmp_path):
    docs, chunks = _tables()
    rows = title_mention_edges(docs, chunks, TitleMentionConfig())
    path = tmp_path / "g.kz"
    load_graph(path, docs, chunks, _ents([]), _rels([]), title_mentions=rows)
    graph = open_resident(KuzuGraphStore(path), "on", 1)
    try:
        edges = graph.walk_edges()
        offset = dict(zip(graph.chunk_ids_at(range(edges.n_chunks)), range(edges.n_chunks)))
        assert edges.n_titles == 5  # d-dragon, d-game, d-rice, d-simpsons, d-smith: the named documents
        pairs = {(graph.chunk_ids_at([int(c)])[0], int(t)) for c, t in zip(*edges.titles)}
        by_node: dict[int, set[str]] = {}
        for cid, node in pairs:
            by_node.setdefault(node, set()).add(cid)
        # each title node joins the chunks naming it and the named document's own chunks
        assert sorted(map(sorted, by_node.values())) == [
            ["c-game"],  # Dragon Dice: named by c-game; its document has no chunk here
            ["c-game", "c-smith", "c-smith2"],  # Lester Smith: its own chunks and c-game, which names it
            ["c-game", "c-smith2"],  # Demon Dice: its own chunk and c-smith2
            ["c-smith2"],  # The Simpsons
            ["c-zh"],  # 水稻
        ]
        # No entity, no relation: without title nodes chunk c-game reaches nothing; with them, Lester Smith's.
        walk = PropagationGraph(
            edges.n_entities,
            edges.n_chunks,
            related=edges.related,
            mentions=edges.mentions,
            synonyms=edges.synonyms,
            titles=edges.titles,
            n_titles=edges.n_titles,
        )
        res = walk.personalized_pagerank([walk.chunk_node([offset["c-game"]])[0]], [1.0])
        reached = {
            graph.chunk_ids_at([int(n - walk.n_entities)])[0]
            for n, s in zip(res.nodes, res.scores)
            if walk.is_chunk(np.array([n]))[0] and s > 0
        }
        assert {"c-smith", "c-smith2"} <= reached
        off = PropagationGraph(
            edges.n_entities,
            edges.n_chunks,
            related=edges.related,
            mentions=edges.mentions,
            titles=edges.titles,
            n_titles=edges.n_titles,
            weights=EdgeWeights(title=0),
        )
        assert off.n_title_edges == 0
        res = off.personalized_pagerank([off.chunk_node([offset["c-game"]])[0]], [1.0])
        assert [int(n) for n, s in zip(res.nodes, res.scores) if s > 0] == [off.chunk_node([offset["c-game"]])[0]]
    finally:
        graph.close()


def test_a_graph_without_the_table_has_no_title_nodes(tmp_path):
    docs, chunks = _tables()
    path = tmp_path / "g.kz"
    load_graph(path, docs, chunks, _ents([]), _rels([]))
    graph = open_resident(KuzuGraphStore(path), "on", 1)
    try:
        edges = graph.walk_edges()
        assert edges.n_titles == 0 and len(edges.titles[0]) == 0
    finally:
        graph.close()
