"""The write seam (hxd2_ray.indexing.disk_space): which failures are a full or read-only disk, what the line says."""

from __future__ import annotations

import errno
import os

import pyarrow as pa
import pytest

from hxd2_ray.errors import HxdError
from hxd2_ray.indexing.disk_space import (
    OutputFullError,
    OutputReadOnlyError,
    WriteSeam,
    estimate_graph_bytes,
    failed_path,
    failure_kind,
)
from hxd2_ray.indexing.faults import DISK_FAULT_ENV, disk_fault

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
