"""One build at a time per output: a lock object at ``<output>/.hxd2-build.lock`` naming its holder.

The holder is recorded as host, pid, start time and command line, so a build that finds the lock taken can
say which build holds it and how to clear it.

* **Local folders**: ``flock`` on the lock file. The kernel releases it when the holding process dies, however it
  dies, so a lock left by a killed build (a dead pid on this host) is simply free; the next build takes it and
  says whose it was.
* **S3**: a conditional PUT (``If-None-Match: *``) creates the lock object, so of two builds starting together
  exactly one wins. S3 cannot tell whether a process lives, so the holder rewrites the object as a heartbeat
  (``If-Match`` its own ETag, so a build that lost the lock notices). A lock whose heartbeat is older than
  ``s3.lock_stale_after_s``, or whose holder is a dead pid on this very host, is taken over by the next build
  (again with ``If-Match``, so two builds cannot both take over the same stale lock).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Self

import pyarrow.fs as pafs

from hxd2_ray.config import S3Config
from hxd2_ray.errors import HxdError

LOCK_NAME = ".hxd2-build.lock"
Clock = Callable[[], float]
Log = Callable[[str], None]


class BuildLockedError(HxdError):
    """Another build holds the output's lock (or took it over from this one)."""


def _log(msg: str) -> None:
    print(f"[hxd2 index] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LockHolder:
    host: str
    pid: int
    started_at: float  # epoch seconds
    command: str
    token: str
    pid_started: str = ""  # the process's start time in clock ticks (Linux), so a reused pid is not taken for it
    heartbeat_at: float = 0.0

    @classmethod
    def this_process(cls, command: str, clock: Clock) -> LockHolder:
        now = clock()
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=now,
            command=command,
            token=uuid.uuid4().hex,
            pid_started=_process_start(os.getpid()),
            heartbeat_at=now,
        )

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LockHolder | None:
        try:
            data: Any = json.loads(raw.decode("utf-8"))
            return cls(
                host=str(data["host"]),
                pid=int(data["pid"]),
                started_at=float(data["started_at"]),
                command=str(data.get("command", "")),
                token=str(data.get("token", "")),
                pid_started=str(data.get("pid_started", "")),
                heartbeat_at=float(data.get("heartbeat_at", data["started_at"])),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None

    def describe(self) -> str:
        started = datetime.fromtimestamp(self.started_at, UTC).isoformat(timespec="seconds")
        command = f", command: {self.command[:200]}" if self.command else ""
        return f"host {self.host}, pid {self.pid}, started {started.replace('+00:00', 'Z')}{command}"

    def is_dead_here(self) -> bool:
        """True when the holder ran on this host and its process is gone (or its pid now names another one)."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, owned by someone else
        return bool(self.pid_started) and _process_start(self.pid) not in ("", self.pid_started)


def _process_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # Field 22 (starttime); the command name (field 2) may hold spaces, so split after its closing ')'.
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


class BuildLock:
    """A held lock: :meth:`check_held` before publishing, :meth:`release` when done (also as a context manager)."""

    holder: LockHolder

    def check_held(self) -> None:
        """Raise :class:`BuildLockedError` if another build has taken the lock over."""

    def release(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_build_lock(
    fs: Any,
    root: str,
    uri: str,
    s3: S3Config,
    command: str = "",
    *,
    clock: Clock = time.time,
    log: Log = _log,
    heartbeat_s: float | None = None,
) -> BuildLock:
    """Take the build lock of the output at ``root`` on ``fs`` (a pyarrow filesystem) or refuse, naming the holder."""

    command = command or " ".join(sys.argv)
    if isinstance(fs, pafs.LocalFileSystem):
        return LocalBuildLock.acquire(os.path.join(root, LOCK_NAME), uri, command, clock=clock, log=log)
    bucket, _, prefix = root.partition("/")
    key = f"{prefix.rstrip('/')}/{LOCK_NAME}" if prefix else LOCK_NAME
    return S3BuildLock.acquire(
        s3_client(s3),
        bucket,
        key,
        uri,
        command,
        stale_after_s=s3.lock_stale_after_s,
        clock=clock,
        log=log,
        heartbeat_s=heartbeat_s,
    )


# --------------------------------------------------------------------------------------------- local


class LocalBuildLock(BuildLock):
    def __init__(self, path: str, holder: LockHolder, fd: int) -> None:
        self.path = path
        self.holder = holder
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: str, uri: str, command: str, *, clock: Clock = time.time, log: Log = _log) -> LocalBuildLock:

        for _ in range(5):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = LockHolder.from_json(os.pread(fd, 1 << 16, 0))
                os.close(fd)
                raise BuildLockedError(_local_refusal(uri, path, holder)) from None
            # A releasing holder unlinks the file while still holding it: make sure the path names what we locked.
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = LockHolder.from_json(os.pread(fd, 1 << 16, 0))
            if previous is not None:
                log(
                    f"taking over the build lock of {uri}: the build that held it ({previous.describe()}) ended "
                    "without releasing it"
                )
            holder = LockHolder.this_process(command, clock)
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.to_json(), 0)
            os.fsync(fd)
            return cls(path, holder, fd)
        raise BuildLockedError(f"could not take the build lock {path}: other builds keep taking and releasing it")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if os.fstat(self._fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None


def _local_refusal(uri: str, path: str, holder: LockHolder | None) -> str:
    if holder is None:
        return (
            f"another build is writing to {uri} (its lock {path} is held but names no holder yet); wait for it "
            "to finish or stop it"
        )
    hint = (
        f"; that pid is gone, so a process it started still holds the lock: `fuser -v {path}` names it"
        if holder.is_dead_here()
        else "; wait for it to finish or stop it (the lock frees itself when that process exits)"
    )
    return f"another build is writing to {uri}: {holder.describe()}{hint}"


# --------------------------------------------------------------------------------------------- S3


def s3_client(s3: S3Config) -> Any:
    import boto3  # noqa: PLC0415 - only S3 outputs need it (and it costs a second to import)

    endpoint = s3.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return boto3.client("s3", endpoint_url=endpoint or None, region_name=s3.region)


def _status(exc: Exception) -> int:
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class S3BuildLock(BuildLock):
    def __init__(
        self,
        client: Any,
        bucket: str,
        key: str,
        uri: str,
        holder: LockHolder,
        etag: str,
        *,
        clock: Clock,
        log: Log,
        heartbeat_s: float,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.key = key
        self.uri = uri
        self.holder = holder
        self._etag = etag
        self._clock = clock
        self._log = log
        self._lost = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(heartbeat_s,), name="hxd2-build-lock-heartbeat", daemon=True
        )
        self._thread.start()

    @classmethod
    def acquire(
        cls,
        client: Any,
        bucket: str,
        key: str,
        uri: str,
        command: str,
        *,
        stale_after_s: float,
        clock: Clock = time.time,
        log: Log = _log,
        heartbeat_s: float | None = None,
    ) -> S3BuildLock:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - with boto3, S3 only

        where = f"s3://{bucket}/{key}"
        beat = heartbeat_s if heartbeat_s is not None else max(1.0, min(60.0, stale_after_s / 4))
        for _ in range(5):
            holder = LockHolder.this_process(command, clock)
            try:
                put = client.put_object(Bucket=bucket, Key=key, Body=holder.to_json(), IfNoneMatch="*")
                return cls(client, bucket, key, uri, holder, put["ETag"], clock=clock, log=log, heartbeat_s=beat)
            except ClientError as exc:
                if _status(exc) == 409:  # a concurrent conditional write: look again
                    continue
                if _status(exc) != 412:
                    raise BuildLockedError(f"cannot write the build lock {where}: {exc}") from None
            except BotoCoreError as exc:
                raise BuildLockedError(f"cannot write the build lock {where}: {exc}") from None
            try:
                got = client.get_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if _status(exc) == 404:  # released meanwhile
                    continue
                raise BuildLockedError(f"cannot read the build lock {where}: {exc}") from None
            current = LockHolder.from_json(got["Body"].read())
            age = clock() - current.heartbeat_at if current is not None else float("inf")
            if current is None:
                why = "it is unreadable"
            elif current.is_dead_here():
                why = f"its process (pid {current.pid} on this host) is no longer running"
            elif age > stale_after_s:
                why = f"its last heartbeat is {age:.0f}s old (s3.lock_stale_after_s={stale_after_s:g})"
            else:
                raise BuildLockedError(
                    f"another build is writing to {uri}: {current.describe()}, last heartbeat {age:.0f}s ago; wait "
                    f"for it to finish or stop it. If it is dead, delete the lock (aws s3 rm {where}), or the next "
                    f"build takes it over once its heartbeat is older than s3.lock_stale_after_s={stale_after_s:g}s"
                )
            log(
                f"taking over the build lock of {uri} from {current.describe() if current else 'an unknown holder'}:"
                f" {why}"
            )
            try:
                put = client.put_object(Bucket=bucket, Key=key, Body=holder.to_json(), IfMatch=got["ETag"])
                return cls(client, bucket, key, uri, holder, put["ETag"], clock=clock, log=log, heartbeat_s=beat)
            except ClientError as exc:
                if _status(exc) in (404, 409, 412):  # another build took it over first: look again
                    continue
                raise BuildLockedError(f"cannot write the build lock {where}: {exc}") from None
        raise BuildLockedError(f"could not take the build lock {where}: other builds keep taking it")

    def _beat(self, interval: float) -> None:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - with boto3, S3 only

        while not self._stop.wait(interval):
            holder = LockHolder(**{**asdict(self.holder), "heartbeat_at": self._clock()})
            try:
                put = self.client.put_object(
                    Bucket=self.bucket, Key=self.key, Body=holder.to_json(), IfMatch=self._etag
                )
                self._etag = put["ETag"]
            except ClientError as exc:
                if _status(exc) in (404, 412):
                    self._lost = (
                        "the lock was deleted"
                        if _status(exc) == 404
                        else "another build took the lock over (this build's heartbeat was late)"
                    )
                    self._log(f"lost the build lock of {self.uri}: {self._lost}")
                    return
                self._log(f"build lock heartbeat failed (will retry): {exc}")
            except BotoCoreError as exc:
                self._log(f"build lock heartbeat failed (will retry): {exc}")

    def beat_now(self) -> None:
        """One heartbeat at once (tests; the thread beats on its own schedule)."""
        holder = LockHolder(**{**asdict(self.holder), "heartbeat_at": self._clock()})
        put = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=holder.to_json(), IfMatch=self._etag)
        self._etag = put["ETag"]

    def check_held(self) -> None:
        if self._lost:
            raise BuildLockedError(
                f"this build no longer holds the lock of {self.uri}: {self._lost}; it stops before publishing anything"
            )

    def release(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - with boto3, S3 only

        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=30)
        if self._lost:
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self._etag)
        except (ClientError, BotoCoreError) as exc:
            self._log(f"could not delete the build lock s3://{self.bucket}/{self.key}: {exc}")
