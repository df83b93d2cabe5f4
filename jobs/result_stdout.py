"""Keep a CLI command's stdout for its result alone (``--json`` must stay machine-readable).

Ray prints to the driver's stdout from its own threads: forwarded worker output, and the raylet's error
messages ("Task ... failed. There are N retries remaining, so the task will be retried ...") are printed by
``ray._private.worker.listen_error_messages`` with ``is_err=False``, that is to ``sys.stdout`` as it is at
that moment, and deduplicated lines are flushed later (at the next message, or when Ray shuts down at exit).
A ``contextlib.redirect_stdout`` around the work cannot catch a line that arrives after it ends, and nothing in
Python catches a C library writing to file descriptor 1.

:func:`result_stdout` therefore keeps a private copy of the real stdout for the result and points file
descriptor 1 at stderr for the rest of the process (a command is the process's last act; Ray's threads and
its shutdown at exit write through fd 1), and ``sys.stdout`` at stderr while the command runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_reserved: dict[str, Any] = {}  # the process's stdout, once fd 1 has been re-pointed: kept for the results


@contextmanager
def result_stdout() -> Iterator[TextIO]:
    """Yield the stream to print the command's result to; meanwhile everything else written to stdout goes to
    stderr, and after it anything written through file descriptor 1 still does.

    When stdout is not file descriptor 1 (a test capturing ``sys.stdout``), the result goes to that stdout and
    only ``sys.stdout`` is swapped while inside. Nested use yields the same stream.
    """
    original = sys.stdout
    if _reserved.get("inside") is original:  # a command inside a command
        yield _reserved["results"]
        return
    original.flush()
    results: TextIO = original
    try:
        out_fd, err_fd = original.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory capture
        out_fd = err_fd = -1
    if out_fd == 1 and err_fd >= 0 and err_fd != out_fd:
        if "fd1" not in _reserved:
            sys.stderr.flush()
            copy = os.dup(1)
            os.dup2(err_fd, 1)  # C libraries, child processes and late Python writes to fd 1 now reach stderr
            _reserved["fd1"] = os.fdopen(
                copy,
                "w",
                encoding=getattr(original, "encoding", None) or "utf-8",
                errors="backslashreplace",
                buffering=1,
            )
        results = _reserved["fd1"]
    sys.stdout = sys.stderr
    _reserved.update(inside=sys.stdout, results=results)
    try:
        yield results
    finally:
        results.flush()
        _reserved.pop("inside", None)
        if sys.stdout is sys.stderr:
            sys.stdout = original  # writes to fd 1, which (in a CLI process) now leads to stderr
