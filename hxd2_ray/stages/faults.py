"""Real process death at named points of an index build: how the crash-matrix tests kill a driver or a worker.

Armed only by the environment, so a production run pays one dictionary lookup per point::

    HXD2_CRASH_AT=driver:merge            the driver dies in the merge stage (after its first table is written)
    HXD2_CRASH_AT=worker:extract,worker:embed   an extraction and an embedding actor each die once, mid-batch
    HXD2_CRASH_ONCE_DIR=/some/folder       each point fires once (a marker file per point), so a restarted
                                           actor or a rerun with the same environment does not die again

A ``driver:<stage>`` point reached inside a Ray worker (the extract and embed stages run in actors) kills the
driver process by its pid, ``HXD2_CRASH_DRIVER_PID``, which :func:`worker_env` hands to the workers: the driver
then dies while its actors are mid-stage, which is the state a real crash leaves. Death is ``os._exit`` or
SIGKILL, never an exception: nothing is cleaned up, no ``finally`` runs.

A full or read-only disk in the write stage is an exception, not a death, armed the same way::

    HXD2_DISK_FAULT_AT=graph:enospc        the graph write fails with "No space left on device"
    HXD2_DISK_FAULT_AT=vectors:erofs       a vector family's write fails with "Read-only file system"
    HXD2_DISK_FAULT_AT=graph-load:sigabrt  the graph engine's load aborts its process, as Kùzu does on a full disk

at ``vectors``, ``graph``, ``graph-load`` (inside the process that loads the graph) or ``manifest``
(:func:`disk_fault`); each fires once per process.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

CRASH_AT_ENV = "HXD2_CRASH_AT"
CRASH_ONCE_DIR_ENV = "HXD2_CRASH_ONCE_DIR"
DRIVER_PID_ENV = "HXD2_CRASH_DRIVER_PID"
CRASH_EXIT_CODE = 86
STAGES = ("ingest", "extract", "merge", "embed", "write")
POINTS = tuple(f"driver:{s}" for s in STAGES) + ("worker:extract", "worker:embed")
DISK_FAULT_ENV = "HXD2_DISK_FAULT_AT"
DISK_FAULT_POINTS = ("vectors", "graph", "graph-load", "manifest")
DISK_FAULT_ERRNOS = {"enospc": errno.ENOSPC, "erofs": errno.EROFS, "sigabrt": 0}
_disk_faults_fired: set[str] = set()


def armed_points() -> tuple[str, ...]:
    spec = os.environ.get(CRASH_AT_ENV, "")
    points = tuple(p.strip() for p in spec.split(",") if p.strip())
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        raise ValueError(f"{CRASH_AT_ENV}: unknown crash point(s) {unknown}; valid: {', '.join(POINTS)}")
    return points


def worker_env() -> dict[str, str]:
    """The variables Ray workers need to honour the armed points (empty when nothing is armed)."""
    if not os.environ.get(CRASH_AT_ENV):
        return {}
    env = {CRASH_AT_ENV: os.environ[CRASH_AT_ENV], DRIVER_PID_ENV: os.environ.get(DRIVER_PID_ENV, str(os.getpid()))}
    if os.environ.get(CRASH_ONCE_DIR_ENV):
        env[CRASH_ONCE_DIR_ENV] = os.environ[CRASH_ONCE_DIR_ENV]
    return env


def crash_point(point: str) -> None:
    """Die here if ``point`` is armed (and has not fired yet); otherwise return at once."""
    if not os.environ.get(CRASH_AT_ENV) or point not in armed_points() or not _first_time(point):
        return
    driver_pid = int(os.environ.get(DRIVER_PID_ENV) or os.getpid())
    if point.startswith("driver:") and driver_pid != os.getpid():
        print(
            f"[hxd2 fault injection] pid {os.getpid()} kills the driver (pid {driver_pid}) at {point}",
            file=sys.stderr,
            flush=True,
        )
        os.kill(driver_pid, signal.SIGKILL)
        return
    print(f"[hxd2 fault injection] pid {os.getpid()} dies at {point}", file=sys.stderr, flush=True)
    os._exit(CRASH_EXIT_CODE)


def _first_time(point: str) -> bool:
    once_dir = os.environ.get(CRASH_ONCE_DIR_ENV)
    if not once_dir:
        return True
    os.makedirs(once_dir, exist_ok=True)
    try:
        fd = os.open(os.path.join(once_dir, point.replace(":", "-") + ".fired"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def disk_fault(point: str, path: str) -> None:
    """Fail this write of ``point`` as a full (``enospc``) or read-only (``erofs``) disk would, naming ``path``, if
    ``HXD2_DISK_FAULT_AT`` arms it; otherwise return at once."""
    spec = os.environ.get(DISK_FAULT_ENV)
    if not spec:
        return
    armed = dict(item.strip().split(":", 1) for item in spec.split(",") if ":" in item)
    bad = {p: k for p, k in armed.items() if p not in DISK_FAULT_POINTS or k not in DISK_FAULT_ERRNOS}
    if bad or not armed:
        raise ValueError(
            f"{DISK_FAULT_ENV}={spec!r}: use POINT:KIND with POINT one of {', '.join(DISK_FAULT_POINTS)} "
            f"and KIND one of {', '.join(DISK_FAULT_ERRNOS)}"
        )
    if point not in armed or point in _disk_faults_fired:
        return
    _disk_faults_fired.add(point)
    if armed[point] == "sigabrt":
        print(f"[hxd2 fault injection] {point} aborts", file=sys.stderr, flush=True)
        os.abort()
    code = DISK_FAULT_ERRNOS[armed[point]]
    print(f"[hxd2 fault injection] {point} write fails: {os.strerror(code)}", file=sys.stderr, flush=True)
    raise OSError(code, os.strerror(code), path)
