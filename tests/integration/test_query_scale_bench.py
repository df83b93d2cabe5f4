"""The whole-query bench's small case (bench/query_scale.py): an index with every vector family, the lexical index and
the graph's read structures, opened by one and by two fresh query processes as ``hxd2 query`` opens it, each
answering every question in mode ``dual_retrieval``, then in mode ``auto`` up to the generation call. The figures
are the bench's to print (docs/benchmarks/query-scale.md); this checks that the case runs, that what it reports is
whole, and that opening the whole index reads no array whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_small_case_runs_and_opening_reads_no_array_whole(tmp_path):
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "query_scale.py"),
            "--sizes",
            "20000",
            "--questions",
            "40",
            "--processes",
            "2",
            "--json",
            str(out),
            "--work",
            str(tmp_path / "work"),
            "--keep",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    assert result["entities"] == 20_000 and result["counts"]["chunks"] == 5_000
    assert set(result["index_types"]) == {"entity_name", "entity_mix", "relation_keywords", "relation_mix", "chunk"}
    index_mb = sum(result["disk_mb"].values())
    assert index_mb > 40 and result["disk_mb"]["lexical"] > 0
    assert set(result["runs"]) == {"1", "2"}
    for run in result["runs"].values():
        assert run["p50_ms"] > 0 and run["p99_ms"] >= run["p50_ms"]
        assert run["references_median"] > 0  # the questions found chunks
        # Opening the whole index (families, lexical index, read structures, names) maps its files: a fraction
        # of a megabyte read through read() and a few resident, of an index of ~70 MB.
        assert run["open_read_mb"] < 2 and run["open_rss_mb"] < 8, run
        assert run["ready_s"] > run["open_s"] > 0
    assert "| 20,000 |" in proc.stdout  # the table the docs quote
    # every family's recall against exact search (flat at this size: exact) and its settings, as the manifest has them
    assert result["recall_at_10"] == {family: 1.0 for family in result["index_types"]}
    assert set(result["vector_params"]) == set(result["index_types"])
    manifest = json.loads((tmp_path / "work" / "index-20000" / "manifest.json").read_text())
    assert {f: v["params"] for f, v in manifest["vector_families"].items()} == result["vector_params"]
    # mode auto up to the generation call, every question answered on some path
    for count, run in result["runs"].items():
        assert 0 < run["auto_p50_ms"] <= run["auto_p99_ms"], run
        assert sum(run["auto_paths"].values()) == 40 * int(count) and run["auto_paths"].get("logic_form"), run
    assert "auto to the generation call" in proc.stdout
