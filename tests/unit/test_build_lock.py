"""The local build lock and the output's leftovers sweep (issue 17, items 9 and 10).

A second build into the same output refuses while the first holds the lock, naming it (host, pid, start time);
a lock left by a process that died is free for the next build, which says whose it was.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from hxd2_ray.config import S3Config
from hxd2_ray.index_store.build_lock import LOCK_NAME, BuildLockedError, LockHolder, acquire_build_lock
from hxd2_ray.index_store.output import build_output, sweep_leftovers

REPO = Path(__file__).resolve().parents[2]
S3 = S3Config()


def _hold_lock_in_a_child(out: Path) -> subprocess.Popen:
    """A separate process that takes the lock of ``out``, says so on stdout, then sleeps until killed."""
    code = textwrap.dedent(f"""
        import sys, time, pyarrow.fs as pafs
        from hxd2_ray.config import S3Config
        from hxd2_ray.index_store.build_lock import acquire_build_lock
        lock = acquire_build_lock(pafs.LocalFileSystem(), {str(out)!r}, {str(out)!r}, S3Config(),
                                  command="hxd2 index --output first-build")
        print("held", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_second_build_is_refused_with_the_first_named_then_takes_over_when_it_dies(tmp_path):
    out = tmp_path / "index"
    out.mkdir()
    child = _hold_lock_in_a_child(out)
    try:
        with pytest.raises(BuildLockedError) as refused:
            acquire_build_lock(pafs.LocalFileSystem(), str(out), str(out), S3)
        message = str(refused.value)
        assert f"pid {child.pid}" in message and f"host {socket.gethostname()}" in message
        assert "started 20" in message and "hxd2 index --output first-build" in message
        assert "\n" not in message
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    said: list[str] = []
    lock = acquire_build_lock(pafs.LocalFileSystem(), str(out), str(out), S3, log=said.append)
    try:
        assert len(said) == 1 and f"pid {child.pid}" in said[0] and "without releasing it" in said[0]
        holder = LockHolder.from_json((out / LOCK_NAME).read_bytes())
        assert holder is not None and holder.pid == os.getpid()
    finally:
        lock.release()
    assert not (out / LOCK_NAME).exists()


def test_release_frees_the_lock_for_the_next_build_in_the_same_process(tmp_path):
    fs = pafs.LocalFileSystem()
    first = acquire_build_lock(fs, str(tmp_path), str(tmp_path), S3)
    with pytest.raises(BuildLockedError):
        acquire_build_lock(fs, str(tmp_path), str(tmp_path), S3)
    first.release()
    with acquire_build_lock(fs, str(tmp_path), str(tmp_path), S3, log=pytest.fail):
        pass


def test_a_holder_is_dead_here_only_when_its_pid_is_gone_or_reused():
    me = LockHolder.this_process("x", lambda: 0.0)
    assert not me.is_dead_here()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert LockHolder(**{**json.loads(me.to_json()), "pid": child.pid, "pid_started": ""}).is_dead_here()
    assert LockHolder(**{**json.loads(me.to_json()), "pid_started": "1"}).is_dead_here()  # pid reused
    assert not LockHolder(**{**json.loads(me.to_json()), "host": "elsewhere", "pid": child.pid}).is_dead_here()
    assert LockHolder.from_json(b"{not json") is None and LockHolder.from_json(b"{}") is None


def test_the_lock_survives_overwrite_and_the_sweep_removes_a_killed_builds_leftovers(tmp_path):
    out = tmp_path / "index"
    (out / ".building-1a2b3c4d" / "graph.kuzu").mkdir(parents=True)
    (out / "_staging" / "extractions").mkdir(parents=True)
    (out / "_staging" / "extractions" / ".tmp-5e6f-part-1.parquet").write_bytes(b"torn")
    (out / "_staging" / "extractions" / "part-1.parquet").write_bytes(b"kept")
    (out / ".manifest-x1.tmp").write_text("{")
    with build_output(str(out), S3) as opened:
        assert sorted(Path(p).name for p in opened.swept) == [
            ".building-1a2b3c4d",
            ".manifest-x1.tmp",
            ".tmp-5e6f-part-1.parquet",
        ]
        assert (out / "_staging" / "extractions" / "part-1.parquet").exists()
        assert (out / LOCK_NAME).exists()
    assert not (out / LOCK_NAME).exists()
    with build_output(str(out), S3, overwrite=True, input_uri=str(tmp_path / "corpus")) as opened:
        assert [p.name for p in out.iterdir()] == [LOCK_NAME]
    assert sweep_leftovers(pafs.LocalFileSystem(), str(out)) == []
