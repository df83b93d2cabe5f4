"""Issue 33, item 4: a full disk or an output that turns read-only in the write stage ends in one ``error:`` line
naming the path (and, for a full disk, the space needed), exit 2; the previous generation stays served, the lock
and the failed build folder are gone, and the same command, once the fault is lifted, resumes (no extraction again)
and publishes what a clean build holds.

* injected at the write seam (``HXD2_DISK_FAULT_AT``, hxd2_ray.stages.faults): the graph write without space,
  the manifest switch on an output turned read-only and the graph engine's load aborting its process, each in an
  update that adds a document;
* a real 20 MB tmpfs (root only): filled until the update's graph cannot fit (refused before Kùzu starts), then
  until the Faiss write itself fails with ENOSPC, then remounted read-only (``index`` and ``index delete`` refuse
  in one line); emptied and writable again, the update finishes.

Every run is a separate ``python -m jobs.cli index`` joined to the session's Ray, as in the crash matrix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hxd2_ray.index_store.build_lock import LOCK_NAME
from hxd2_ray.stages.faults import DISK_FAULT_ENV
from tests.integration.test_crash_matrix import DOCS, SAMPLE, _build, _change, _same_content, cluster

pytestmark = pytest.mark.integration

__all__ = ["cluster"]  # the crash matrix's fixture: the driver processes join the session's Ray

MB = 1024 * 1024


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """One corpus folder for every index here: documents are named by their path, so the builds compared by content
    read the same folder."""
    folder = tmp_path_factory.mktemp("disk-corpus")
    for name in DOCS:
        shutil.copy(SAMPLE / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def three_documents(cluster, corpus, tmp_path_factory) -> Path:
    """A clean build of the three documents: what every resumed update must equal."""
    out = tmp_path_factory.mktemp("three") / "index"
    code, _, err = _build(cluster, corpus, out)
    assert code == 0, err[-3000:]
    return out


def _two_document_index(cluster: str, corpus: Path, out: Path) -> Path:
    """An index of the first two documents at ``out``; the third is then back in the corpus, for an update to add."""
    (corpus / DOCS[2]).unlink()
    try:
        code, _, err = _build(cluster, corpus, out)
    finally:
        shutil.copy(SAMPLE / DOCS[2], corpus / DOCS[2])
    assert code == 0, err[-3000:]
    return corpus


def _update(cluster: str, folder: Path, out: Path, fault: str = "") -> tuple[int, str, str]:
    if fault:
        os.environ[DISK_FAULT_ENV] = fault  # _change passes the environment on to the driver process
    try:
        return _change(cluster, ["--input", str(folder), "--output", str(out)])
    finally:
        os.environ.pop(DISK_FAULT_ENV, None)


def _served_counts(out: Path) -> dict[str, int]:
    from hxd2_ray.config import load_config
    from hxd2_ray.retrieval.index import open_index

    with open_index(out, load_config(None, ["embedding.dim=32"])) as index:
        return dict(index.graph.counts())


def _assert_refused(
    code: int, stdout: str, err: str, out: Path, says: str, published: str, counts: dict[str, int]
) -> str:
    """Exit 2 with one error line (returned) that says ``says`` and names a path in ``out``; nothing else changed."""
    assert code == 2 and stdout == "", f"exit {code}:\n{err[-3000:]}"
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert says in errors[0] and str(out) in errors[0], errors[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["generation"] == published
    assert sorted(p.name for p in (out / "generations").iterdir()) == [published]  # the failed one is gone
    assert not list(out.glob(".building-*")) and not (out / LOCK_NAME).exists()
    assert _served_counts(out) == counts  # the previous generation is still whole and served
    return errors[0]


def _assert_resumed(cluster: str, folder: Path, out: Path, want: Path, published: str) -> None:
    code, stdout, err = _update(cluster, folder, out)
    assert code == 0, err[-3000:]
    summary = json.loads(stdout)
    # Extraction and embedding of the added document were staged by the refused run: nothing is redone.
    assert summary["stage_status"]["extract"].startswith("skipped"), summary["stage_status"]
    assert json.loads((out / "manifest.json").read_text())["generation"] != published
    _same_content(out, want)


def test_injected_full_and_read_only_writes_leave_the_index_served_and_resume(
    cluster, corpus, three_documents, tmp_path
):
    out = tmp_path / "index"
    folder = _two_document_index(cluster, corpus, out)
    published = json.loads((out / "manifest.json").read_text())["generation"]
    counts = _served_counts(out)

    code, stdout, err = _update(cluster, folder, out, fault="graph:enospc")
    line = _assert_refused(code, stdout, err, out, "no space left", published, counts)
    assert "graph.kuzu" in line and "MB" in line and "run the same command again" in line

    code, stdout, err = _update(cluster, folder, out, fault="manifest:erofs")
    line = _assert_refused(code, stdout, err, out, "read-only", published, counts)
    assert "manifest.json" in line

    # The graph engine aborts its process, as Kùzu does when a write in its bulk load fails (issue 40, item 8: exit
    # 134 and no message before): the load's own process ends, the command says where in one line.
    code, stdout, err = _update(cluster, folder, out, fault="graph-load:sigabrt")
    line = _assert_refused(code, stdout, err, out, "SIGABRT", published, counts)
    assert "graph.kuzu" in line and "MB free" in line

    _assert_resumed(cluster, folder, out, three_documents, published)


@pytest.fixture
def small_tmpfs(tmp_path) -> Iterator[Path]:
    """A real 20 MB tmpfs (root can mount one; elsewhere the test is skipped, saying why)."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill_leaving(folder: Path, free_bytes: int) -> Path:
    """A filler file that leaves about ``free_bytes`` free on ``folder``'s disk."""
    filler = folder / f"filler-{uuid.uuid4().hex[:6]}"
    size = shutil.disk_usage(folder).free - free_bytes
    with open(filler, "wb") as fh:
        fh.truncate(0)
        chunk = b"\0" * MB
        while size > 0:
            fh.write(chunk[: min(size, MB)])
            size -= MB
    return filler


def _remount(mount_point: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mount_point)], check=True)


def test_a_real_full_then_read_only_tmpfs(cluster, corpus, three_documents, small_tmpfs):
    out = small_tmpfs / "index"
    folder = _two_document_index(cluster, corpus, out)
    published = json.loads((out / "manifest.json").read_text())["generation"]
    counts = _served_counts(out)

    # Room for the staging of the added document and the vectors, not for the graph: refused before Kùzu starts.
    fillers = [_fill_leaving(small_tmpfs, 2 * MB)]
    code, stdout, err = _update(cluster, folder, out)
    line = _assert_refused(code, stdout, err, out, "not enough space", published, counts)
    assert "to write the graph" in line and "MB" in line

    # Everything is staged now; almost no room left: the Faiss write itself fails (a real ENOSPC).
    fillers.append(_fill_leaving(small_tmpfs, 48 * 1024))
    code, stdout, err = _update(cluster, folder, out)
    _assert_refused(code, stdout, err, out, "no space left", published, counts)

    for filler in fillers:
        filler.unlink()
    _remount(small_tmpfs, "ro")
    try:
        code, stdout, err = _update(cluster, folder, out)
        assert code == 2 and "Read-only file system" in err and "Traceback" not in err, err[-3000:]
        delete = _change(cluster, ["delete", "--output", str(out), "--source", str(folder / DOCS[0])])
        assert delete[0] == 2 and "Traceback" not in delete[2], delete[2][-3000:]
        assert sum(line.startswith("error:") for line in delete[2].splitlines()) == 1, delete[2][-3000:]
        assert _served_counts(out) == counts
    finally:
        _remount(small_tmpfs, "rw")

    _assert_resumed(cluster, folder, out, three_documents, published)
