"""Ctrl-C is never lost: a long command notices an interrupt that a library swallowed.

Python turns SIGINT into ``KeyboardInterrupt`` in the main thread, and every long command ends on it in one line
(exit 130, ``jobs.cli``). But Ray's core worker polls for signals from C++ while the driver waits on it, and on
some of its paths the interruption it finds is dropped: seen as a Ctrl-C during ``hxd2 index``'s ingest that the
build never noticed (it ran to the end and exited 0).

So :func:`install` puts a handler in front that remembers the interrupt before it raises, and the progress board
calls :func:`raise_if_lost` when a stage begins (in the main thread): an interrupt that was swallowed ends the
command there, at the next stage, as one that got through would have. Only at a stage's start, never in its
clean-up: raising again inside a ``finally`` would cut that clean-up short.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

log = logging.getLogger("hxd2.jobs")

_received_at: float | None = None


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _received_at
    if _received_at is None:
        _received_at = time.monotonic()
    raise KeyboardInterrupt


def install() -> None:
    """Handle SIGINT with :func:`_on_sigint` (from the main thread only, as Python requires; elsewhere a no-op)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def received() -> bool:
    """Whether a SIGINT has reached this process since :func:`install` (or :func:`forget`)."""
    return _received_at is not None


def forget() -> None:
    """The interrupt was handled (a command that carries on after one, or a test): later stages run."""
    global _received_at
    _received_at = None


def raise_if_lost() -> None:
    """Raise ``KeyboardInterrupt`` in the main thread when an interrupt arrived and the command is still going
    (the one the handler raised was swallowed on the way)."""
    if _received_at is not None and threading.current_thread() is threading.main_thread():
        log.warning(
            "a Ctrl-C %.1f s ago was swallowed on the way; stopping at this stage", time.monotonic() - _received_at
        )
        raise KeyboardInterrupt
