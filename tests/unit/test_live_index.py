"""A live index follows published generations: new pins read the new one, pinned requests finish on theirs, a
generation asked for by name is opened on demand, unpinned old generations close, and leases keep them on disk."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.index_store.generations import history, prune
from hxd2_ray.index_store.leases import held_generations
from hxd2_ray.index_store.manifest import read_manifest, write_manifest
from hxd2_ray.retrieval.live_index import LiveIndex
from tests.unit.retrieval_fixtures import HOSTILE, build_tiny_index


def publish(root: Path, generation: str, *, hostile: bool, tmp: Path) -> None:
    """A new generation as the index job publishes one: its files under generations/<id>/, then the manifest."""
    built = build_tiny_index(tmp / generation, hostile=hostile)
    target = root / "generations" / generation
    target.mkdir(parents=True)
    for name in ("graph.kuzu", "vectors"):
        shutil.move(str(built.root / name), str(target / name))
    current = read_manifest(root) if (root / "manifest.json").exists() else None
    fresh = read_manifest(built.root).model_copy(
        update={"generation": generation, "generations": history(current, generation, "update", {}), "files": {}}
    )
    write_manifest(root, fresh)


@pytest.fixture
def index_root(tmp_path) -> Path:
    root = tmp_path / "index"
    root.mkdir()
    publish(root, "g000001", hostile=False, tmp=tmp_path / "build")
    return root


def entity_count(index) -> int:
    return index.graph.counts()["entities"]


def test_new_pins_move_to_a_published_generation_and_pinned_requests_finish_on_theirs(index_root, tmp_path):
    cfg = build_tiny_index(tmp_path / "cfg").cfg
    closed: list[int] = []
    live = LiveIndex(str(index_root), cfg, attach=entity_count, poll_s=0, detach=closed.append)
    try:
        assert live.generation == "g000001" and held_generations(pafs.LocalFileSystem(), str(index_root)) == {"g000001"}
        with live.pin() as before:
            assert (before.generation, before.value) == ("g000001", 7)
            publish(index_root, "g000002", hostile=True, tmp=tmp_path / "build")  # one entity more
            assert live.refresh() == "g000002"
            with live.pin() as after:
                assert (after.generation, after.value) == ("g000002", 8)
            # the request that started before the switch still reads its own generation, still open
            assert before.index.graph.counts()["entities"] == 7 and closed == []
            assert live.open_generations() == {"g000001": 1, "g000002": 0}
        assert closed == [7] and live.open_generations() == {"g000002": 0}  # the last pin gone: closed
        # a request another deployment pinned to g000001 is answered from it, reopened on demand
        with live.pin("g000001") as old:
            assert old.value == 7 and old.index.graph.find_entity_by_name(HOSTILE) is None
        with pytest.raises(IndexNotFoundError, match="not in the index's history"):
            with live.pin("g000009"):
                pass
    finally:
        live.close()
    assert held_generations(pafs.LocalFileSystem(), str(index_root)) == set()


def test_pruning_keeps_what_a_live_reader_holds(index_root, tmp_path):
    cfg = build_tiny_index(tmp_path / "cfg").cfg
    live = LiveIndex(str(index_root), cfg, attach=entity_count, poll_s=0)
    try:
        with live.pin():
            publish(index_root, "g000002", hostile=True, tmp=tmp_path / "build")
            live.refresh()
            publish(index_root, "g000003", hostile=False, tmp=tmp_path / "build")
            manifest = read_manifest(index_root)
            removed = prune(pafs.LocalFileSystem(), str(index_root), manifest, keep=1)
            assert removed == []  # g000001 pinned by a request, g000002 current for this reader
            assert (index_root / "generations" / "g000001").is_dir()
    finally:
        live.close()
    assert prune(pafs.LocalFileSystem(), str(index_root), read_manifest(index_root), keep=1) == [
        "generations/g000001",
        "generations/g000002",
    ]


def test_the_poller_switches_within_its_interval(index_root, tmp_path):
    cfg = build_tiny_index(tmp_path / "cfg").cfg
    switched = threading.Event()
    live = LiveIndex(str(index_root), cfg, attach=entity_count, poll_s=0.05)
    live.switch.listeners.append(lambda generation: switched.set())
    try:
        publish(index_root, "g000002", hostile=True, tmp=tmp_path / "build")
        assert switched.wait(10) and live.generation == "g000002"
        with live.pin() as pinned:
            assert pinned.value == 8
    finally:
        live.close()


def test_a_generation_is_pruned_by_the_next_change_once_its_last_request_ends(index_root, tmp_path):
    """Issue 40, item 5: the lease on an old generation ends with its last pin, not when the reader closes, so the
    next change prunes it while the reader goes on serving."""
    cfg = build_tiny_index(tmp_path / "cfg").cfg
    fs = pafs.LocalFileSystem()
    live = LiveIndex(str(index_root), cfg, attach=entity_count, poll_s=0)
    try:
        with live.pin():
            publish(index_root, "g000002", hostile=True, tmp=tmp_path / "build")
            live.refresh()
            assert held_generations(fs, str(index_root)) == {"g000001", "g000002"}
        assert held_generations(fs, str(index_root)) == {"g000002"}  # the last request on g000001 ended
        publish(index_root, "g000003", hostile=False, tmp=tmp_path / "build")
        removed = prune(fs, str(index_root), read_manifest(index_root), keep=1)
        assert removed == ["generations/g000001"]  # g000002: still current for this open reader
        assert not (index_root / "generations" / "g000001").exists()
        with live.pin() as pinned:
            assert pinned.generation == "g000002" and pinned.value == 8
    finally:
        live.close()
