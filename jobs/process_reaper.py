"""Processes ``hxd2 serve`` leaves behind, found and stopped before it exits.

A stop signal sent to the whole process group (Ctrl-C in a terminal, ``kill -- -PGID``, systemd, a test) stops
Ray's raylet and its workers with us, but not what a worker started in a group of its own: vLLM's engine core
process (and its worker) outlived ``hxd2 serve`` that way, reparented to init, holding 4.8 GB. Made this process's
"child subreaper" at the start, every orphaned descendant becomes our child instead of init's, so it can be found
and stopped before we exit.
"""

from __future__ import annotations

import ctypes
import sys
import time
from typing import Any, Callable

# prctl(2): orphaned descendants are reparented to the nearest living ancestor marked as a subreaper.
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Mark this process as the subreaper of its descendants (Linux); whether that took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def reap_descendants(grace_s: float = 10.0, say: Callable[[str], None] | None = None) -> list[str]:
    """SIGTERM every living descendant, SIGKILL those alive after ``grace_s``, and wait for them; again while new
    orphans keep arriving (a worker's child becomes ours only once the worker is gone). Returns the names of the
    processes it stopped."""
    import psutil

    stopped: list[str] = []
    me = psutil.Process()
    deadline = time.monotonic() + grace_s
    while True:
        children = _living(me.children(recursive=True))
        if not children:
            break
        for child in children:
            stopped.append(_name(child))
            _signal(child, "terminate")
        _, alive = psutil.wait_procs(children, timeout=max(0.5, deadline - time.monotonic()))
        for child in alive:
            _signal(child, "kill")
        psutil.wait_procs(alive, timeout=5)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # an orphan reparented meanwhile shows up in the next look
    if stopped and say is not None:
        say(f"stopped {len(stopped)} leftover process(es): {', '.join(sorted(set(stopped)))}")
    return stopped


def _living(processes: list[Any]) -> list[Any]:
    import psutil

    living = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                living.append(process)
            else:
                process.wait(timeout=0)  # reap it: a zombie child of ours holds nothing but its pid
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            continue
    return living


def _name(process: Any) -> str:
    import psutil

    try:
        return str(process.name())
    except psutil.NoSuchProcess:
        return f"pid {process.pid}"


def _signal(process: Any, how: str) -> None:
    import psutil

    try:
        getattr(process, how)()
    except psutil.NoSuchProcess:
        pass
