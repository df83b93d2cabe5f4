"""Reader leases: a generation that some process still reads is never pruned from under it.

A long-lived reader (a Serve replica, an evaluation actor, ``hxd2 query --questions``) holds a lease on each
generation it has open: one small file ``<root>/_leases/<generation>.<reader>.lease``, rewritten every
``heartbeat_s`` by a thread of the reader. The index job's pruning (:func:`hxd2_ray.index_store.generations.prune`)
keeps every generation with a fresh lease, one written within ``ttl_s``; a lease older than that belongs to a
reader that died without releasing it, and is removed. The files live beside the index, so readers on other nodes
that share its folder (or its S3 prefix) are seen too.

``ttl_s`` (60 s) is several heartbeats (10 s), so a busy reader is never taken for a dead one, and a dead reader's
generations are pruned by the next change after a minute.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import pyarrow.fs as pafs

log = logging.getLogger(__name__)

LEASES_DIR = "_leases"
HEARTBEAT_S = 10.0
TTL_S = 60.0
FLAT = "flat"  # the lease name of the flat layout's generation ("")


def _lease_name(generation: str) -> str:
    return generation or FLAT


@dataclass(frozen=True, eq=False)  # one lease is one file: identity, not field equality
class Lease:
    """One reader's hold on one generation of one index."""

    fs: pafs.FileSystem
    root: str
    generation: str
    path: str

    def renew(self) -> None:
        body = json.dumps(
            {"generation": self.generation, "host": socket.gethostname(), "pid": os.getpid(), "renewed_at": time.time()}
        ).encode()
        with self.fs.open_output_stream(self.path) as out:
            out.write(body)

    def release(self) -> None:
        try:
            self.fs.delete_file(self.path)
        except (FileNotFoundError, OSError):  # already gone (pruned as stale, or the folder removed)
            pass


def take_lease(fs: pafs.FileSystem, root: str, generation: str) -> Lease:
    """Write a fresh lease on ``generation`` of the index at ``root`` (renew it every heartbeat)."""
    folder = posixpath.join(root, LEASES_DIR)
    fs.create_dir(folder, recursive=True)
    reader = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    lease = Lease(fs, root, generation, posixpath.join(folder, f"{_lease_name(generation)}.{reader}.lease"))
    lease.renew()
    return lease


def held_generations(
    fs: pafs.FileSystem, root: str, ttl_s: float = TTL_S, now: Callable[[], float] = time.time
) -> set[str]:
    """The generations some reader holds a fresh lease on; stale leases (dead readers) are removed on the way."""
    folder = posixpath.join(root, LEASES_DIR)
    held: set[str] = set()
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        name = posixpath.basename(info.path)
        if info.type != pafs.FileType.File or not name.endswith(".lease"):
            continue
        generation = name.split(".", 1)[0]
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        if now() - mtime <= ttl_s:
            held.add("" if generation == FLAT else generation)
        else:
            try:
                fs.delete_file(info.path)
            except (FileNotFoundError, OSError):
                pass
    return held


class LeaseKeeper:
    """Renews this process's leases from one daemon thread; :meth:`hold` and :meth:`drop` add and remove them."""

    def __init__(self, heartbeat_s: float = HEARTBEAT_S):
        self.heartbeat_s = heartbeat_s
        self._leases: set[Lease] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, fs: pafs.FileSystem, root: str, generation: str) -> Lease | None:
        """A lease on ``generation``, renewed until dropped; None (logged) when the index folder is read-only:
        such an index is not pruned by a job of ours either."""
        try:
            lease = take_lease(fs, root, generation)
        except OSError as exc:
            log.warning(
                "no reader lease on %s generation %s (%s): a change published meanwhile may prune it",
                root,
                generation or FLAT,
                exc,
            )
            return None
        with self._lock:
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._renew_loop, name="hxd2-leases", daemon=True)
                self._thread.start()
        return lease

    def drop(self, lease: Lease | None) -> None:
        if lease is None:
            return
        with self._lock:
            self._leases.discard(lease)
        lease.release()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            leases, self._leases = list(self._leases), set()
        for lease in leases:
            lease.release()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self._lock:
                leases = list(self._leases)
            for lease in leases:
                try:
                    lease.renew()
                except OSError as exc:  # a full disk or a lost mount: keep trying; the ttl covers a few misses
                    log.warning("could not renew the reader lease %s: %s", lease.path, exc)
