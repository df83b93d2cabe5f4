"""Keep a CLI command's stdout for its result alone (``--json`` must stay machine-readable).

Ray prints to the driver's stdout from its own threads: forwarded worker output, and the raylet's error
messages ("Task ... failed. There are N retries remaining, so the task will be retried ...") are printed by
``ray._private.worker.listen_error_messages`` with ``is_err=False``, that is to ``sys.stdout`` as it is at
that moment, and deduplicated lines are flushed later (at the next message, or when Ray shuts down at exit).
A ``contextlib.redirect_stdout`` around the work cannot catch a line that arrives after it ends, and nothing in
Python catches a C library writing to file descriptor 1.

:func:`reserve_stdout` therefore keeps a private copy of the real stdout for the result and points both
``sys.stdout`` and file descriptor 1 at stderr for the rest of the process. A command calls it once, before
its work starts, and prints its result to the stream it returns.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

_reserved: dict[str, Any] = {}


def reserve_stdout() -> TextIO:
    """The stream to print the command's result to; from now on everything else written to stdout goes to stderr.

    Calling it again (a command inside a command) returns the same stream. When stdout is not file descriptor 1
    (a test capturing ``sys.stdout``), only ``sys.stdout`` is swapped.
    """
    if _reserved and sys.stdout is _reserved["replacement"]:
        return _reserved["results"]
    sys.stdout.flush()
    results: TextIO = sys.stdout
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory capture
        out_fd = err_fd = -1
    # Only the process's own stdout (fd 1) is re-pointed; a test framework's capture file is left alone.
    if out_fd == 1 and err_fd >= 0 and err_fd != out_fd:
        sys.stderr.flush()
        copy = os.dup(out_fd)
        os.dup2(err_fd, out_fd)  # C libraries, child processes and late Python writes to fd 1 now reach stderr
        results = os.fdopen(copy, "w", encoding=getattr(sys.stdout, "encoding", None) or "utf-8",
                            errors="backslashreplace", buffering=1)
    sys.stdout = sys.stderr
    _reserved.update(results=results, replacement=sys.stdout)
    return results
