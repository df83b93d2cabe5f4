"""The S3 build lock against a real S3 API (moto's server): conditional writes, heartbeat, stale takeover.

The clock is injected, so "older than s3.lock_stale_after_s" is tested without waiting.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from botocore.exceptions import ClientError

from hxd2_ray.config import S3Config
from hxd2_ray.index_store.build_lock import LOCK_NAME, BuildLockedError, LockHolder, acquire_build_lock
from hxd2_ray.ingest.sources import resolve_filesystem

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _acquire(uri: str, s3: S3Config, clock: Clock, log=None):
    fs, root = resolve_filesystem(uri, s3)
    # heartbeat_s: the thread stays quiet during a test; beat_now() beats on demand.
    return acquire_build_lock(
        fs,
        root,
        uri,
        s3,
        command="hxd2 index --output " + uri,
        clock=clock,
        log=log or (lambda _m: None),
        heartbeat_s=3600,
    )


def test_two_builds_one_lock_then_release(s3_server, s3_client, s3_bucket):
    s3 = S3Config(endpoint_url=s3_server, lock_stale_after_s=900)
    uri = f"s3://{s3_bucket}/index"
    clock = Clock(1_700_000_000.0)
    first = _acquire(uri, s3, clock)
    body = json.loads(s3_client.get_object(Bucket=s3_bucket, Key=f"index/{LOCK_NAME}")["Body"].read())
    assert body["token"] == first.holder.token
    clock.now += 60
    with pytest.raises(BuildLockedError) as refused:
        _acquire(uri, s3, clock)
    message = str(refused.value)
    assert first.holder.describe() in message and "last heartbeat 60s ago" in message
    assert f"aws s3 rm s3://{s3_bucket}/index/{LOCK_NAME}" in message and "lock_stale_after_s=900" in message
    first.release()
    assert "Contents" not in s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="index/")
    _acquire(uri, s3, clock).release()


def test_a_lock_without_heartbeat_past_the_stale_age_is_taken_over_and_its_holder_notices(s3_server, s3_bucket):
    s3 = S3Config(endpoint_url=s3_server, lock_stale_after_s=300)
    uri = f"s3://{s3_bucket}/index"
    clock = Clock(1_700_000_000.0)
    first = _acquire(uri, s3, clock)
    clock.now += 200
    first.beat_now()  # a heartbeat resets the age
    clock.now += 200
    with pytest.raises(BuildLockedError):
        _acquire(uri, s3, clock)  # 200 s since the heartbeat
    clock.now += 101
    said: list[str] = []
    second = _acquire(uri, s3, clock, log=said.append)
    assert len(said) == 1 and "last heartbeat is 301s old" in said[0] and first.holder.describe() in said[0]
    # The first build's next heartbeat fails its If-Match: it knows it lost the lock and stops before publishing.
    with pytest.raises(ClientError, match="PreconditionFailed"):
        first.beat_now()
    first._lost = "another build took the lock over"  # what the heartbeat thread records on that failure
    with pytest.raises(BuildLockedError, match="no longer holds the lock"):
        first.check_held()
    second.check_held()
    first.release()  # a lost lock is not deleted from under its new holder
    second.beat_now()
    second.release()


def test_a_lock_left_by_a_dead_process_on_this_host_is_taken_over_at_once(s3_server, s3_client, s3_bucket):
    s3 = S3Config(endpoint_url=s3_server, lock_stale_after_s=900)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    clock = Clock(1_700_000_000.0)
    dead = LockHolder(
        **{**json.loads(LockHolder.this_process("killed build", clock).to_json()), "pid": child.pid, "pid_started": ""}
    )
    s3_client.put_object(Bucket=s3_bucket, Key=f"index/{LOCK_NAME}", Body=dead.to_json())
    said: list[str] = []
    lock = _acquire(f"s3://{s3_bucket}/index", s3, clock, log=said.append)
    assert len(said) == 1 and f"pid {child.pid} on this host) is no longer running" in said[0]
    lock.release()


def test_the_heartbeat_thread_records_a_lost_lock(s3_server, s3_client, s3_bucket):
    s3 = S3Config(endpoint_url=s3_server)
    uri = f"s3://{s3_bucket}/index"
    fs, root = resolve_filesystem(uri, s3)
    said: list[str] = []
    lock = acquire_build_lock(fs, root, uri, s3, clock=Clock(0.0), log=said.append, heartbeat_s=0.05)
    s3_client.delete_object(Bucket=s3_bucket, Key=f"index/{LOCK_NAME}")
    lock._thread.join(timeout=30)
    with pytest.raises(BuildLockedError, match="the lock was deleted"):
        lock.check_held()
    assert any("lost the build lock" in m for m in said)
    lock.release()


def test_the_s3_walker_never_reads_an_index_or_the_output(s3_server, s3_client, s3_bucket):
    from hxd2_ray.ingest.listing import walk_inputs

    for key in (
        "corpus/a.txt",
        "corpus/old/_staging/build.json",
        "corpus/old/_staging/chunks/part.jsonl",
        "corpus/old/notes.txt",
        "corpus/done/manifest.json",
        "corpus/done/graph.kuzu",
        "corpus/done/vectors/chunk/idmap.parquet",
        "corpus/out/leftover.txt",
    ):
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b'{"text": "x"}')
    s3 = S3Config(endpoint_url=s3_server)
    listing = walk_inputs(f"s3://{s3_bucket}/corpus", s3, exclude=(f"s3://{s3_bucket}/corpus/out",))
    assert listing.files == [f"s3://{s3_bucket}/corpus/{k}" for k in ("a.txt", "old/notes.txt")]
    assert sorted(listing.excluded) == sorted(
        f"s3://{s3_bucket}/corpus/{k}"
        for k in ("old/_staging", "done/manifest.json", "done/graph.kuzu", "done/vectors", "out")
    )
