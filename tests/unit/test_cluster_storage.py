"""Storage shared by every node, or not: the per-node probes and the check of the files actors report.

A node with a node-local disk at the output's path is simulated by a filesystem that maps the same path to a
private folder (what that node's processes would see); the real two-node cluster is in the integration tests.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from hxd2_ray.errors import ClusterStorageError
from hxd2_ray.index_store.cluster_storage import (
    ReadCheck,
    ReportedFile,
    check_reported_files,
    driver_probe_path,
    judge_probes,
    node_probe,
    remove_probes,
    write_json,
)


def node_local_view(private) -> pafs.FileSystem:
    """What a node whose disk is its own sees at every absolute path: its private folder."""
    return pafs.SubTreeFileSystem(str(private), pafs.LocalFileSystem())


def test_nodes_that_share_the_output_pass_and_leave_no_probe(tmp_path):
    fs, folder = pafs.LocalFileSystem(), str(tmp_path / "out" / "_staging")
    write_json(fs, driver_probe_path(folder, "t1"), {"token": "t1"})
    results = [node_probe(fs, folder, "t1", node, [ReadCheck(fs, (str(tmp_path),), "input")]) for node in "ab"]
    judge_probes(fs, folder, "t1", results, str(tmp_path / "out"))
    remove_probes(fs, folder, "t1")
    assert not list((tmp_path / "out" / "_staging" / "_probes").iterdir())


def test_a_node_local_output_is_named_with_the_fix(tmp_path):
    fs, folder = pafs.LocalFileSystem(), str(tmp_path / "out" / "_staging")
    write_json(fs, driver_probe_path(folder, "t2"), {"token": "t2"})
    (tmp_path / "b").mkdir()
    results = [
        node_probe(fs, folder, "t2", "node-a", host="a"),
        node_probe(node_local_view(tmp_path / "b"), folder, "t2", "node-b", host="b"),
    ]
    with pytest.raises(ClusterStorageError) as err:
        judge_probes(fs, folder, "t2", results, "/data/out", "output and input")
    message = str(err.value)
    assert "node node-b (b) does not see the file the driver wrote under /data/out" in message
    assert "wrote a file under /data/out that the driver cannot see" in message
    assert "node-a" not in message and "s3://" in message and "mounted at the same path on every node" in message


def test_inputs_a_node_cannot_read_are_named(tmp_path):
    present = tmp_path / "doc.txt"
    present.write_text("text")
    result = node_probe(
        None,
        "",
        "t3",
        "node-a",
        [ReadCheck(pafs.LocalFileSystem(), (str(present), str(tmp_path / "gone.txt")), "input")],
    )
    with pytest.raises(ClusterStorageError, match=r"cannot read 1 input file\(s\), e.g. .*gone.txt"):
        judge_probes(None, "", "t3", [result], "the input")


def test_files_the_driver_cannot_read_with_their_rows_stop_the_job(tmp_path):
    fs = pafs.LocalFileSystem()
    good, short = tmp_path / "part-good.parquet", tmp_path / "part-short.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), good)
    pq.write_table(pa.table({"x": [1]}), short)
    assert check_reported_files(fs, [ReportedFile(str(good), 3, "n1"), ReportedFile("", 0)], "extract", "/o") == 1
    with pytest.raises(ClusterStorageError) as err:
        check_reported_files(
            fs,
            [
                ReportedFile(str(good), 3, "n1"),
                ReportedFile(str(short), 2, "n2"),
                ReportedFile(str(tmp_path / "part-elsewhere.parquet"), 5, "node-b-1234567890"),
            ],
            "extract",
            "/o",
        )
    message = str(err.value)
    assert message.startswith("2 of 3 files the extract actors reported writing are not readable")
    assert "part-elsewhere.parquet (5 rows) is missing" in message and "has 1 rows, 2 reported" in message
    assert "node-b-12345" in message and "before merging or publishing anything" in message
