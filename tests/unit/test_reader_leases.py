"""Reader leases: pruning never removes a generation a live reader holds; a dead reader's lease goes stale."""

from __future__ import annotations

import os
import time

import pyarrow.fs as pafs

from hxd2_ray.index_store.generations import history, prune
from hxd2_ray.index_store.leases import LEASES_DIR, LeaseKeeper, held_generations, take_lease
from tests.unit.test_index_corpus_generations import _manifest

FS = pafs.LocalFileSystem()


def _index_with_three_generations(tmp_path):
    root = tmp_path / "index"
    for name in ("g000001", "g000002", "g000003"):
        (root / "generations" / name).mkdir(parents=True)
    g1 = _manifest("g000001", history(None, "g000001", "build", {}))
    g2 = _manifest("g000002", history(g1, "g000002", "update", {}))
    return root, _manifest("g000003", history(g2, "g000003", "delete", {}))


def test_a_held_generation_outlives_keep_until_its_lease_is_released(tmp_path):
    root, g3 = _index_with_three_generations(tmp_path)
    lease = take_lease(FS, str(root), "g000001")  # a replica still answering from the first generation
    assert held_generations(FS, str(root)) == {"g000001"}
    removed = prune(FS, str(root), g3, keep=1)
    assert removed == ["generations/g000002"]
    assert sorted(p.name for p in (root / "generations").iterdir()) == ["g000001", "g000003"]
    lease.release()
    assert prune(FS, str(root), g3, keep=1) == ["generations/g000001"]


def test_a_stale_lease_is_a_dead_reader_and_is_removed(tmp_path):
    root, g3 = _index_with_three_generations(tmp_path)
    lease = take_lease(FS, str(root), "g000002")
    old = time.time() - 3600
    os.utime(lease.path, (old, old))  # its process died an hour ago: no heartbeat since
    assert held_generations(FS, str(root), ttl_s=60) == set()
    assert list((root / LEASES_DIR).iterdir()) == []
    assert "generations/g000002" in prune(FS, str(root), g3, keep=1)


def test_the_keeper_renews_its_leases_and_drops_them(tmp_path):
    root, _ = _index_with_three_generations(tmp_path)
    keeper = LeaseKeeper(heartbeat_s=0.05)
    lease = keeper.hold(FS, str(root), "g000003")
    assert lease is not None
    first = os.stat(lease.path).st_mtime_ns
    deadline = time.time() + 5
    while os.stat(lease.path).st_mtime_ns == first and time.time() < deadline:
        time.sleep(0.02)
    assert os.stat(lease.path).st_mtime_ns > first  # renewed by the heartbeat
    keeper.drop(lease)
    assert not os.path.exists(lease.path) and held_generations(FS, str(root)) == set()
    flat = keeper.hold(FS, str(root), "")  # the flat layout's generation has a name of its own
    assert held_generations(FS, str(root)) == {""}
    keeper.close()
    assert flat is not None and not os.path.exists(flat.path)
