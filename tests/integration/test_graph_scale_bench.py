"""The graph scale bench's 100k case (bench/graph_scale.py): a synthetic graph through the index job's write path,
its read structures mapped by one and by two query processes that rank every question with the ``ppr`` walk.
The figures are the bench's to print (docs/benchmarks/graph-scale.md); this checks that the case runs and that
what it reports is whole and consistent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_100k_case_runs_and_reports_every_figure(tmp_path):
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "graph_scale.py"),
            "--sizes",
            "100000",
            "--questions",
            "200",
            "--processes",
            "2",
            "--json",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    assert result["entities"] == 100_000 and result["chunks"] == 25_000
    assert 1.3 * 100_000 < result["relations"] <= 1.5 * 100_000  # 1.5 per entity, minus repeats and self-pairs
    assert set(result["runs"]) == {"1", "2"}
    for run in result["runs"].values():
        assert run["p50_ms"] > 0 and run["p99_ms"] >= run["p50_ms"]
        assert run["walk_nodes_median"] > 100  # the walks reached past their seeds
        assert run["pss_mb"] > 0 and run["pss_with_kuzu_mb"] > 0
    disk = result["disk_mb"]
    assert disk["graph.kuzu"] > 0 and {"reads: walk matrix", "reads: key lookups", "reads: columns (Arrow)"} <= set(
        disk
    )
    assert "| 100,000 |" in proc.stdout  # the table the docs quote
    assert not (tmp_path / "work" / "graph-100000").exists()  # removed unless --keep
