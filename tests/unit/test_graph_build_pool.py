"""The buffer pool of the index job's graph write (``graph.build_buffer_pool_mb``): it reaches the engine's database
the build and the update open for writing, is sized to the graph when unset, and is bounded."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from hxd2_ray.config import ConfigError, load_config
from hxd2_ray.graph import kuzu_store
from hxd2_ray.graph.engine import GraphEngine
from hxd2_ray.graph.kuzu_store import bulk_load_pool_bytes
from hxd2_ray.indexer import publish
from hxd2_ray.indexer.flow import IndexBuild
from hxd2_ray.stages.local_runner import InProcessRunner
from hxd2_ray.stages.runner import RunOptions

SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data" / "corpus"
SETTINGS = ["chunking.chunk_size_chars=400", "ray.ner_batch_size=4", "embedding.dim=16"]
MB = 1 << 20


def _writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The buffer pool of every database opened for writing; the graph load runs in this process (it runs in a
    child process in the job, where a spy here would not see it)."""
    pools: list[int] = []
    opened = GraphEngine.database

    def database(self: GraphEngine, path: Any, *, read_only: bool, max_threads: int, buffer_pool_bytes: int) -> Any:
        if not read_only:
            pools.append(buffer_pool_bytes)
        return opened(self, path, read_only=read_only, max_threads=max_threads, buffer_pool_bytes=buffer_pool_bytes)

    monkeypatch.setattr(GraphEngine, "database", database)
    monkeypatch.setattr(publish, "isolated_write", lambda fn, what, path, seam=None: fn())
    return pools


def _index(corpus: Path, out: Path, *settings: str) -> dict:
    cfg = load_config(None, [*SETTINGS, *settings])
    return IndexBuild(cfg, str(corpus), str(out), InProcessRunner, RunOptions()).run()


def test_the_build_and_the_update_write_their_graph_with_the_configured_buffer_pool(tmp_path, monkeypatch):
    pools = _writes(monkeypatch)
    corpus, more, out = tmp_path / "corpus", tmp_path / "more", tmp_path / "index"
    corpus.mkdir()
    more.mkdir()
    shutil.copy(SAMPLE / "brian_kobilka.txt", corpus)
    shutil.copy(SAMPLE / "david_eagleman.txt", more)

    built = _index(corpus, out, "graph.build_buffer_pool_mb=96")
    assert built["status"] == "complete" and pools == [96 * MB]
    assert "graph_load" in built["seconds_per_stage"]

    # Another value is no other index (not in the fingerprint): the update adds the document, it rebuilds nothing.
    updated = _index(more, out, "graph.build_buffer_pool_mb=128")
    assert updated["kind"] == "update" and updated["documents"] == 2
    assert pools == [96 * MB, 128 * MB]


def test_unset_the_pool_is_twice_the_tables_at_least_1_gib_at_most_half_the_machine(monkeypatch):
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": (24 << 30) // 4096}  # a 24 GB machine
    monkeypatch.setattr(kuzu_store.os, "sysconf", lambda name: pages[name])
    assert bulk_load_pool_bytes(10 * MB) == 1024 * MB
    assert bulk_load_pool_bytes(3000 * MB) == 6000 * MB
    assert bulk_load_pool_bytes(9000 * MB) == 12 << 30  # half of the machine
    assert bulk_load_pool_bytes(9000 * MB, configured_mb=64) == 64 * MB  # a configured pool is taken as it is


def test_a_pool_out_of_range_is_an_error_naming_the_valid_range():
    for value in ("0", "63", "1048577", "-5"):
        with pytest.raises(ConfigError) as err:
            load_config(None, [f"graph.build_buffer_pool_mb={value}"])
        assert "graph.build_buffer_pool_mb" in str(err.value) and "64 to 1048576 MB" in str(err.value)
    assert load_config(None, ["graph.build_buffer_pool_mb=64"]).graph.build_buffer_pool_mb == 64
    assert load_config(None).graph.build_buffer_pool_mb is None


def test_the_pool_is_not_part_of_the_index_fingerprint():
    base = load_config(None)
    other = load_config(None, ["graph.build_buffer_pool_mb=2048"])
    assert other.index_fingerprint("p") == base.index_fingerprint("p")
    assert other.staging_fingerprint("p") == base.staging_fingerprint("p")
