"""bench/update_remerge.py at a small size: the re-merge reads the hubs' provenance and merges the touched keys."""

from __future__ import annotations

from bench.update_remerge import measure


def test_update_remerge_bench_measures_the_remerge_and_its_reference() -> None:
    got = measure(3000, 0.01, 300, 7, "remerge")
    assert got["chunks_read"] > 1500  # every added chunk names a hub, whose provenance is most of the corpus
    assert got["entities"] > 0 and got["relations"] > 0
    assert got["mb"] >= 0 and got["s"] > 0
    ref = measure(3000, 0.01, 300, 7, "dicts")
    assert ref["mb"] >= 0 and ref["s"] > 0
