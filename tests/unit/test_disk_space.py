"""The write seam (hxd2_ray.index_store.disk_space): which failures are a full or read-only disk, what the line says."""

from __future__ import annotations

import errno
import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from hxd2_ray.errors import HxdError
from hxd2_ray.index_store.disk_space import (
    OutputFullError,
    OutputReadOnlyError,
    WriteSeam,
    estimate_graph_bytes,
    failed_path,
    failure_kind,
    isolated_write,
)
from hxd2_ray.stages.faults import DISK_FAULT_ENV, disk_fault

# The messages Kùzu and Faiss gave on a full 3 MB tmpfs (measured).
KUZU_FULL = RuntimeError(
    "IO exception: Cannot write to file. path: /mnt/full/g.kuzu fileDescriptor: 3 "
    "offsetToWrite: 3141632 numBytesToWrite: 4096 numBytesWritten: -1. Error: No space left on "
    "device"
)
FAISS_FULL = RuntimeError(
    "Error in void faiss::write_index(const Index*, IOWriter*, int) at "
    "/project/faiss/impl/index_write.cpp:499: Error: 'ret == (size * 4)' failed: write error in "
    "/mnt/full/x.faiss: 3145683 != 5120000 (No space left on device)"
)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/x"), "full"),
        (OSError(errno.EDQUOT, "Disk quota exceeded", "/x"), "full"),
        (OSError(errno.EROFS, "Read-only file system", "/x"), "read-only"),
        (OSError(errno.EACCES, "Permission denied", "/x"), "read-only"),
        (KUZU_FULL, "full"),
        (FAISS_FULL, "full"),
        (OSError("[Errno 30] Read-only file system"), "read-only"),  # Arrow's wording, no errno
        (OSError(errno.ENOENT, "No such file or directory", "/x"), None),
        (RuntimeError("Binder exception: table T does not exist"), None),
        (ValueError("No space left on device"), None),  # not a write failure
    ],
)
def test_failure_kind(exc, kind):
    assert failure_kind(exc) == kind


def test_the_path_comes_from_the_error_where_it_names_one():
    assert failed_path(KUZU_FULL, "/default") == "/mnt/full/g.kuzu"
    assert failed_path(FAISS_FULL, "/default") == "/mnt/full/x.faiss"
    assert failed_path(OSError(errno.ENOSPC, "No space", "/a/b"), "/default") == "/a/b"
    assert failed_path(RuntimeError("No space left on device"), "/default") == "/default"


def test_a_full_disk_is_one_line_with_the_space_needed(tmp_path):
    seam = WriteSeam(str(tmp_path), needed_bytes=12 * 1024 * 1024)
    leftover = tmp_path / "unread"
    leftover.mkdir()
    with (
        pytest.raises(OutputFullError) as caught,
        seam.writing("the graph", str(tmp_path / "g"), discard=str(leftover)),
    ):
        raise KUZU_FULL
    text = str(caught.value)
    assert isinstance(caught.value, HxdError) and "\n" not in text
    assert "no space left" in text and "/mnt/full/g.kuzu" in text and "about 12.0 MB" in text
    assert "run the same command again" in text
    assert not leftover.exists()  # the space is given back


def test_read_only_and_other_failures(tmp_path):
    seam = WriteSeam(str(tmp_path), needed_bytes=0)
    with (
        pytest.raises(OutputReadOnlyError, match=r"read-only.*/x/manifest.json.*Read-only file system"),
        seam.writing("the manifest", str(tmp_path)),
    ):
        raise OSError(errno.EROFS, "Read-only file system", "/x/manifest.json")
    with pytest.raises(RuntimeError, match="Binder"), seam.writing("the graph", str(tmp_path)):
        raise RuntimeError("Binder exception")  # not a disk failure: as it was


def test_check_room_refuses_before_the_write(tmp_path):
    seam = WriteSeam(str(tmp_path), needed_bytes=0)
    seam.check_room(str(tmp_path), 1, "the graph")
    with pytest.raises(OutputFullError, match=r"not enough space at .* to write the graph: it needs about"):
        seam.check_room(str(tmp_path), 1 << 60, "the graph")


def test_the_graph_estimate_grows_with_its_tables():
    small = pa.table({"a": ["x"] * 10})
    big = pa.table({"a": ["x" * 100] * 10_000})
    assert estimate_graph_bytes([small]) < estimate_graph_bytes([big])


def test_disk_fault_fires_once_and_checks_its_spec(monkeypatch):
    monkeypatch.setenv(DISK_FAULT_ENV, "graph:enospc")
    disk_fault("vectors", "/x")  # not armed
    with pytest.raises(OSError) as caught:
        disk_fault("graph", "/x/graph.kuzu")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == "/x/graph.kuzu"
    disk_fault("graph", "/x/graph.kuzu")  # fired already in this process
    monkeypatch.setenv(DISK_FAULT_ENV, "graph:full")
    with pytest.raises(ValueError, match="KIND one of enospc, erofs"):
        disk_fault("graph", "/x")
    monkeypatch.delenv(DISK_FAULT_ENV)
    assert os.environ.get(DISK_FAULT_ENV) is None


def _abort() -> None:
    os.abort()  # what Kùzu does when a write inside its bulk load fails


def _kuzu_full() -> None:
    raise KUZU_FULL


@pytest.fixture
def small_tmpfs(tmp_path) -> Iterator[Path]:
    """A real 2 MB tmpfs (root can mount one; elsewhere the test is skipped, saying why)."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_an_isolated_write_returns_its_result_and_raises_its_error_as_text():
    assert isolated_write(functools.partial(divmod, 7, 2), "a sum", "/x") == (3, 1)
    with pytest.raises(RuntimeError) as raised:
        isolated_write(_kuzu_full, "the graph", "/mnt/full/g.kuzu")
    assert failure_kind(raised.value) == "full" and failed_path(raised.value, "") == "/mnt/full/g.kuzu"


def test_an_abort_in_the_write_ends_the_child_only_and_says_where_and_what_to_free(small_tmpfs, tmp_path):
    """Issue 40, item 8: Kùzu's SIGABRT on a full disk took the whole command down (exit 134, no message)."""
    graph = small_tmpfs / "g.kuzu"
    seam = WriteSeam(str(small_tmpfs), 5 * 1024 * 1024)
    with pytest.raises(OutputFullError) as full:
        isolated_write(_abort, "the graph", str(graph), seam)
    line = str(full.value)
    assert "\n" not in line and "SIGABRT" in line and str(graph) in line and "MB free" in line, line
    assert "needs about 5.0 MB" in line and "run the same command again" in line, line
    # Plenty of room: an abort is not taken for a full disk, and still ends as one line.
    with pytest.raises(HxdError) as aborted:
        isolated_write(_abort, "the graph", str(tmp_path / "g.kuzu"))
    assert not isinstance(aborted.value, OutputFullError) and "SIGABRT" in str(aborted.value)


def test_a_real_graph_load_on_a_full_tmpfs_is_one_error_not_an_abort(small_tmpfs):
    from hxd2_ray.graph.kuzu_store import load_graph
    from tests.unit.retrieval_fixtures import tiny_tables

    docs, chunks, entities, relations = tiny_tables()
    path = str(small_tmpfs / "graph.kuzu")
    seam = WriteSeam(str(small_tmpfs), estimate_graph_bytes((docs, chunks, entities, relations)))
    load = functools.partial(load_graph, path, docs, chunks.drop_columns(["shard"]), entities, relations)
    with pytest.raises(HxdError) as failed:
        with seam.writing("the graph", path):
            isolated_write(load, "the graph", path, seam)
    assert isinstance(failed.value, OutputFullError) and path in str(failed.value), failed.value
