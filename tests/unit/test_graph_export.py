"""``hxd2 graph export``: every format carries the store's rows, hostile text included.

GraphML is read back with networkx and compared with the store's pages; the Neo4j CSV files are imported into
a fresh Kùzu database with the same counts and values; every string literal of the Cypher script decodes (by
Neo4j's escape rules) to the stored text. The graph is the query tests' tiny graph plus rows whose text holds
quotes, markup, Cypher, CR/LF, tabs, control characters, an emoji and the CSV array delimiter.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import kuzu
import pyarrow as pa
import pytest

from hxd2_ray.graph.kuzu_store import KuzuGraphStore, load_graph
from hxd2_ray.graph_export import export_graph
from hxd2_ray.graph_export.cypher import CypherLiterals
from hxd2_ray.graph_export.neo4j_csv import FILE_NAMES, edge_header, node_header
from hxd2_ray.graph_export.rows import PROPERTIES, store_pages
from hxd2_ray.index_store import tables
from tests.unit.retrieval_fixtures import HOSTILE, tiny_tables

NASTY = 'He said "hi" & <b>left</b>; it\'s\r\nfine\ttoo 🙂 \\u0041 `x` }) RETURN 1 //'


def _nasty_tables() -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    docs, chunks, ents, rels = tiny_tables(hostile=True)
    ents = pa.concat_tables(
        [
            ents,
            pa.Table.from_pylist(
                [
                    {
                        "key": "nasty",
                        "name": NASTY,
                        "type": "odd\x01type",
                        "description": "ctrl\x0bchar and \x1f unit sep",
                        "source_chunk_ids": ["c5"],
                        "mention_count": 1,
                        "name_truncated": True,
                    },
                ],
                schema=tables.ENTITIES,
            ),
        ]
    )
    rels = pa.concat_tables(
        [
            rels,
            pa.Table.from_pylist(
                [
                    {
                        "source_key": "nasty",
                        "target_key": "stanford university",
                        "description": NASTY,
                        "keywords": ["a;b", "c,d", 'q"uote', "it's"],
                        "weight": 0.5,
                        "source_chunk_ids": ["c1", "c5"],
                        "mention_count": 2,
                    },
                ],
                schema=tables.RELATIONS,
            ),
        ]
    )
    docs = docs.set_column(3, "title", pa.array(["Thomas Südhof", NASTY, "Brian Kobilka"], pa.string()))
    return docs, chunks, ents, rels


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("nasty")
    docs, chunks, ents, rels = _nasty_tables()
    load_graph(root / "graph.kuzu", docs, chunks.drop_columns(["shard"]), ents, rels)
    s = KuzuGraphStore(root / "graph.kuzu")
    yield s
    s.close()


def _rows(store, kind: str) -> list[dict]:
    return [r for page in store_pages(store)(kind) for r in page]


def test_pages_cover_every_table(store):
    counts = store.counts()
    assert len(_rows(store, "Entity")) == counts["entities"] == 9
    assert len(_rows(store, "RELATED")) == counts["relations"] == 9
    assert len(_rows(store, "MENTIONS")) == counts["mentions"]
    assert len(_rows(store, "Chunk")) == counts["chunks"] == len(_rows(store, "PART_OF")) == 5
    # Small pages give the same rows as one page.
    one = sorted(r["key"] for p in store.iter_pages("Entity", 1_000) for r in p.to_pylist())
    small = sorted(r["key"] for p in store.iter_pages("Entity", 2) for r in p.to_pylist())
    assert one == small and len(small) == 9


def _typed(value, typ: str):
    if typ == "string[]":
        return json.dumps(list(value), ensure_ascii=False)
    return value


def test_graphml_reads_back_with_networkx_equal_to_the_store(store, tmp_path):
    import networkx as nx

    out = tmp_path / "g.graphml"
    summary = export_graph(store, "graphml", out)
    assert summary.counts["Entity"] == 9 and summary.counts["RELATED"] == 9
    assert summary.replaced_characters == 3  # \x01, \x0b and \x1f cannot be in XML 1.0
    graph = nx.read_graphml(out)
    for kind, prefix in (("Entity", "entity"), ("Chunk", "chunk"), ("Document", "document")):
        rows = _rows(store, kind)
        id_prop = "key" if kind == "Entity" else "id"
        assert sum(1 for _n, d in graph.nodes(data=True) if d["kind"] == kind) == len(rows)
        for row in rows:
            node = graph.nodes[f"{prefix}:{row[id_prop]}"]
            for name, typ in PROPERTIES[kind]:
                expected = _typed(row[name], typ)
                if isinstance(expected, str):
                    expected = expected.replace("\x01", "\ufffd").replace("\x0b", "\ufffd").replace("\x1f", "\ufffd")
                assert node[name] == expected, (kind, name)
    assert graph.nodes["entity:nasty"]["name"] == NASTY  # CR/LF, tab, quotes and markup intact
    related = {(a, b): d for a, b, d in graph.edges(data=True) if d["label"] == "RELATED"}
    for row in _rows(store, "RELATED"):
        edge = related[(f"entity:{row['source_key']}", f"entity:{row['target_key']}")]
        assert edge["description"] == row["description"] and json.loads(edge["keywords"]) == row["keywords"]
        assert edge["weight"] == row["weight"] and edge["mention_count"] == row["mention_count"]
    mentions = {(a, b) for a, b, d in graph.edges(data=True) if d["label"] == "MENTIONS"}
    assert mentions == {(f"chunk:{r['chunk_id']}", f"entity:{r['entity_key']}") for r in _rows(store, "MENTIONS")}
    assert sum(1 for *_e, d in graph.edges(data=True) if d["label"] == "PART_OF") == 5


def test_neo4j_csv_imports_into_a_fresh_kuzu_with_the_same_rows(store, tmp_path):
    out = tmp_path / "csv"
    summary = export_graph(store, "csv", out)
    assert summary.replaced_characters == 1  # the U+001F inside a description
    assert (out / "import.sh").read_text().count("--array-delimiter=U+001F") == 1
    header = (out / "entities.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == ",".join(f'"{c}"' for c in node_header("Entity"))
    assert header.startswith('"key:ID(Entity)"') and '"mention_count:long"' in header
    assert (
        (out / "related.csv").read_text(encoding="utf-8").startswith(",".join(f'"{c}"' for c in edge_header("RELATED")))
    )

    # A Kùzu schema with the CSV's columns (arrays and the :LABEL/:TYPE columns as strings), loaded by COPY.
    db = kuzu.Database(str(tmp_path / "check.kuzu"))
    conn = kuzu.Connection(db)
    kuzu_type = {"string": "STRING", "string[]": "STRING", "long": "INT64", "double": "DOUBLE", "boolean": "BOOL"}
    for kind in ("Document", "Chunk", "Entity"):
        cols = ", ".join(f"{n} {kuzu_type[t]}" for n, t in PROPERTIES[kind])
        key = "key" if kind == "Entity" else "id"
        conn.execute(f"CREATE NODE TABLE {kind}({cols.replace('order ', 'ord ')}, lbl STRING, PRIMARY KEY({key}))")
    for kind, (a, b) in (
        ("RELATED", ("Entity", "Entity")),
        ("MENTIONS", ("Chunk", "Entity")),
        ("PART_OF", ("Chunk", "Document")),
    ):
        cols = "".join(f", {n} {kuzu_type[t]}" for n, t in PROPERTIES[kind])
        conn.execute(f"CREATE REL TABLE {kind}(FROM {a} TO {b}{cols}, typ STRING)")
    for kind in ("Document", "Chunk", "Entity", "RELATED", "MENTIONS", "PART_OF"):
        path = (out / FILE_NAMES[kind]).as_posix()
        conn.execute(f"COPY {kind} FROM '{path}' (HEADER=true, PARALLEL=false, ESCAPE='\"', QUOTE='\"')")
    count = {
        q: conn.execute(q).get_all()[0][0]
        for q in (
            "MATCH (e:Entity) RETURN count(e)",
            "MATCH (c:Chunk) RETURN count(c)",
            "MATCH (d:Document) RETURN count(d)",
            "MATCH ()-[r:RELATED]->() RETURN count(r)",
            "MATCH ()-[m:MENTIONS]->() RETURN count(m)",
            "MATCH ()-[p:PART_OF]->() RETURN count(p)",
        )
    }
    counts = store.counts()
    assert list(count.values()) == [
        counts["entities"],
        counts["chunks"],
        counts["documents"],
        counts["relations"],
        counts["mentions"],
        counts["chunks"],
    ]
    (name,) = conn.execute("MATCH (e:Entity) WHERE e.key = $k RETURN e.name", {"k": "nasty"}).get_all()[0]
    assert name == NASTY
    kws, desc = conn.execute(
        "MATCH (a:Entity)-[r:RELATED]->(b:Entity) WHERE a.key = $k RETURN r.keywords, r.description", {"k": "nasty"}
    ).get_all()[0]
    assert kws.split("\x1f") == ["a;b", "c,d", 'q"uote', "it's"] and desc == NASTY
    hostile = conn.execute("MATCH (e:Entity) WHERE e.name = $n RETURN count(e)", {"n": HOSTILE}).get_all()[0][0]
    assert hostile == 1


_NEO4J_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}


def decode_neo4j_string(literal: str) -> str:
    """A single-quoted Cypher string literal decoded by Neo4j's documented escapes (the test's own oracle)."""
    assert literal[0] == literal[-1] == "'"
    out, i, body = [], 0, literal[1:-1]
    while i < len(body):
        ch = body[i]
        if ch == "'":
            raise AssertionError(f"unescaped quote in {literal!r}")
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        else:
            out.append(_NEO4J_ESCAPES[nxt])
            i += 2
    return "".join(out)


_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'")


def test_cypher_literals_escape_exactly():
    lit = CypherLiterals()
    assert lit.string("it's a \\ test") == r"'it\'s a \\ test'"
    assert lit.string("a\r\nb\tc\x01\u2028") == r"'a\r\nb\tc\u0001\u2028'"
    assert lit.string("x\ud800y") == "'x\ufffdy'" and lit.replaced == 1
    assert lit.value([1, 2.5, True, None, "q'"]) == r"[1, 2.5, true, null, 'q\'']"
    assert lit.value(float("nan")) == "null"
    for text in (NASTY, HOSTILE, "\\", "\\'", "''", "\\u0041"):
        assert decode_neo4j_string(lit.string(text)) == text


def test_cypher_script_holds_every_row_and_decodes_to_the_stored_text(store, tmp_path):
    out = tmp_path / "g.cypher"
    summary = export_graph(store, "cypher", out)
    text = out.read_text(encoding="utf-8")
    assert summary.counts == {
        "Document": 3,
        "Chunk": 5,
        "Entity": 9,
        "RELATED": 9,
        "MENTIONS": store.counts()["mentions"],
        "PART_OF": 5,
    }
    # Every statement is one line per row and ends with ';' outside any literal.
    statements = [s for s in _LITERAL.sub("''", text).split(";") if s.strip()]
    assert sum(1 for s in statements if "CREATE (n:Entity)" in s) == 1
    assert sum(1 for s in statements if "CREATE CONSTRAINT" in s) == 3
    decoded = {decode_neo4j_string(m.group()) for m in _LITERAL.finditer(text)}
    for row in _rows(store, "Entity"):
        assert row["name"] in decoded and row["description"] in decoded
    for row in _rows(store, "RELATED"):
        assert row["description"] in decoded and set(row["keywords"]) <= decoded
    assert NASTY in decoded and HOSTILE in decoded
    assert "\r" not in text and "\x01" not in text  # written as escapes


def test_unknown_format_lists_the_valid_ones(store, tmp_path):
    with pytest.raises(ValueError, match="graphml, csv, cypher"):
        export_graph(store, "dot", tmp_path / "x")


def test_export_reports_progress(store, tmp_path):
    seen: list[float] = []

    class Counter:
        def add(self, **counts: float) -> None:
            seen.append(counts["done"])

    export_graph(store, "graphml", tmp_path / "g.graphml", counter=Counter())
    counts = store.counts()
    assert sum(seen) == sum(counts.values()) + counts["chunks"]  # + PART_OF, one per chunk
    assert Path(tmp_path / "g.graphml").stat().st_size > 0
