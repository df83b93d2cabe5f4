"""``hxd2 graph show`` and ``hxd2 graph stats`` on the tiny index (no Ray, no model)."""

from __future__ import annotations

import json
import re
import struct

import pytest

from hxd2_ray.errors import HxdError
from hxd2_ray.graph.kuzu_store import KuzuGraphStore
from hxd2_ray.graph_views.subgraph import most_connected, neighbourhood
from jobs import graph_cli
from tests.unit.retrieval_fixtures import HOSTILE, build_tiny_index, key


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_index(tmp_path_factory.mktemp("tiny") / "index", hostile=True)


@pytest.fixture
def store(tiny):
    s = KuzuGraphStore(tiny.root / "graph.kuzu")
    yield s
    s.close()


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_neighbourhood_walks_hops_within_max_nodes(store):
    one = neighbourhood(store, "thomas  SÜDHOF", hops=1)  # the merge key: case and spacing do not matter
    assert one.center == [key("Thomas Südhof")]
    assert set(one.entities) == {
        key(n) for n in ("Thomas Südhof", "Stanford University", "Nobel Prize", "Synaptic Transmission", "Neurexin")
    }
    assert len(one.edges) == 4 + 0  # Südhof's four; no other tie among these five
    two = neighbourhood(store, "Thomas Südhof", hops=2)
    assert key("Robert Malenka") in two.entities and key("Brian Kobilka") in two.entities
    assert {(e["source_key"], e["target_key"]) for e in two.edges} >= {
        tuple(sorted((key("Robert Malenka"), key("Stanford University"))))
    }
    capped = neighbourhood(store, "Thomas Südhof", hops=2, max_nodes=3)
    assert len(capped.entities) == 3 and capped.cut > 0
    # The strongest ties are kept: Stanford (degree sum 7) and Nobel (6) rank first.
    assert set(capped.entities) == {key("Thomas Südhof"), key("Stanford University"), key("Nobel Prize")}


def test_unknown_entity_suggests_names(store):
    with pytest.raises(HxdError, match="no entity named 'stanford'.*'Stanford University'"):
        neighbourhood(store, "stanford")


def test_most_connected_starts_at_the_highest_degree(store):
    sub = most_connected(store, hops=1, max_nodes=10)
    assert sub.center == [key("Thomas Südhof")]  # degree 4, the highest
    assert "Most connected" in sub.title


def test_show_writes_png_and_self_contained_html(tiny, tmp_path, capsys):
    png = tmp_path / "view.png"
    assert (
        graph_cli.main(
            ["show", "--index", str(tiny.root), "--entity", "Thomas Südhof", "--hops", "2", "--output", str(png)]
        )
        == 0
    )
    width, height = _png_size(png)
    assert width > 800 and height > 600
    assert "7 entities" in capsys.readouterr().out

    page = tmp_path / "view.html"
    assert graph_cli.main(["show", "--index", str(tiny.root), "--output", str(page), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nodes"] >= 5 and summary["edges"] >= 4
    html = page.read_text(encoding="utf-8")
    assert "<script src" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html
    data = json.loads(re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', html, re.DOTALL)[1])
    assert {n["name"] for n in data["nodes"]} >= {"Thomas Südhof", "Stanford University"}
    assert any(e["keywords"] == ["award"] for e in data["edges"])
    # Each entity carries the chunks it was read from; the panel keeps descriptions' line breaks.
    sudhof = next(n for n in data["nodes"] if n["name"] == "Thomas Südhof")
    assert sudhof["sources"] and all(c["text"] and c["id"] and c["document"] for c in sudhof["sources"])
    assert "Südhof" in " ".join(c["text"] for c in sudhof["sources"])
    assert "white-space: pre-wrap" in html and "Source chunks" in html


def test_html_escapes_hostile_text(tiny, tmp_path, capsys):
    page = tmp_path / "hostile.html"
    assert graph_cli.main(["show", "--index", str(tiny.root), "--entity", HOSTILE, "--output", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    data_block = re.search(r'id="graph-data">(.*?)</script>', html, re.DOTALL)[1]
    assert "<" not in data_block and ">" not in data_block  # no markup can close the script element
    assert json.loads(data_block)["nodes"][0]["name"] == HOSTILE
    assert HOSTILE not in html.replace(data_block, "")  # the title is HTML-escaped


def test_show_rejects_other_suffixes(tiny, tmp_path, capsys):
    assert graph_cli.main(["show", "--index", str(tiny.root), "--output", str(tmp_path / "v.svg")]) == 2
    assert ".png or .html" in capsys.readouterr().err


def test_stats_counts_components_and_plot(tiny, tmp_path, capsys):
    out = tmp_path / "stats"
    assert graph_cli.main(["stats", "--index", str(tiny.root), "--output", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["counts"]["entities"] == 8 and stats["counts"]["relations"] == 8
    # Seven people/places/things in one component; the hostile entity has no relation.
    assert stats["components"]["count"] == 2 and stats["components"]["largest"] == [7, 1]
    assert stats["degree"]["isolated"] == 1 and stats["degree"]["max"] == 4
    assert stats["top_entities"][0]["name"] == "Thomas Südhof"
    assert {t["type"]: t["entities"] for t in stats["entity_types"]}["person"] == 3
    assert sum(b["entities"] for b in stats["degree"]["histogram"]) == 8
    assert stats["build"] == {"summary_found": False}
    _png_size(out / "stats.png")
    assert json.loads((out / "stats.json").read_text())["counts"] == stats["counts"]


def test_stats_reads_the_build_summary(tiny, tmp_path, capsys):
    (tiny.root / "index_summary.json").write_text(
        json.dumps(
            {
                "quarantined_files": 2,
                "quarantine_reasons": {"too_large": 1, "unsupported_type": 1},
                "failed_chunks": 3,
                "failed_chunk_errors": ["extraction failed after 3 attempt(s): timeout"],
                "malformed_records": 7,
                "llm_calls": 40,
            }
        )
    )
    try:
        assert graph_cli.main(["stats", "--index", str(tiny.root), "--output", str(tmp_path / "s")]) == 0
        text = capsys.readouterr().out
    finally:
        (tiny.root / "index_summary.json").unlink()
    assert "quarantined files: 2 (too_large: 1, unsupported_type: 1)" in text
    assert "3 failed chunks, 7 malformed LLM records skipped" in text and "timeout" in text


def test_missing_index_is_a_clear_error(tmp_path, capsys):
    assert graph_cli.main(["stats", "--index", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "folder").mkdir()
    assert graph_cli.main(["stats", "--index", str(tmp_path / "folder")]) == 2
    assert "no manifest.json" in capsys.readouterr().err
