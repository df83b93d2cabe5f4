"""The write stage's seam: a full disk or an output that turned read-only ends as one clear error, not a traceback.

Everything the write stage puts on disk (the vector families, the graph, the lexical index, the state tables, the
move into ``generations/``, the manifest) runs inside :meth:`WriteSeam.writing`. A failure there that says "no
space" (``ENOSPC``, ``EDQUOT``) or "read-only" (``EROFS``, or ``EACCES``/``EPERM`` in a folder the run could write
when it started) becomes :class:`OutputFullError` or :class:`OutputReadOnlyError`: one line naming the path, the
space the generation needs (an estimate, "about N MB") and what to do. The libraries report these failures as text,
not errno: Faiss as ``RuntimeError(... write error in PATH ... (No space left on device))``, Kùzu as
``RuntimeError('IO exception: Cannot write to file. path: PATH ... Error: No space left on device')``; both are
recognised.

Kùzu can abort the whole process (SIGABRT, "Invalid transaction type to rollback") when a write fails inside its
bulk load, so :meth:`WriteSeam.check_room` refuses before the load when the disk plainly lacks the room.

The previous generation is never touched by a failed write (a new generation is written beside it and the manifest
switch is the last step), the caller removes its build folder, and the staged work under ``_staging`` is kept, so
the same command, run again once there is room, resumes.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import pyarrow as pa

from hxd2_ray.indexing.output import OutputError

if TYPE_CHECKING:
    from hxd2_ray.indexing.generations import CorpusState

MB = 1024 * 1024
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# The output was writable when the run opened it (hxd2_ray.indexing.output probes it), so a refusal to write now
# means it turned read-only (a remount, a lost mount, changed permissions).
READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
NO_SPACE_TEXT = ("no space left on device", "disk quota exceeded")
READ_ONLY_TEXT = ("read-only file system", "permission denied", "operation not permitted")
# Where Kùzu ("path: PATH ") and Faiss ("write error in PATH: ") name the file in their messages.
_PATH_IN_TEXT = re.compile(r"(?:path: |write error in |could not open )(/[^\s:]+)")

# An empty Kùzu database with its tables and first pages is a few MB before any row (measured: 3.3 MB for one
# table of 1,000 rows, 4.8 MB for the sample corpus's six tables); rows then take about 1.7x their Arrow size.
GRAPH_BASE_BYTES = 4 * MB
GRAPH_BYTES_PER_ARROW_BYTE = 2


class OutputFullError(OutputError):
    """The output's disk ran out of space (or quota) while an index generation was being written."""


class OutputReadOnlyError(OutputError):
    """The output turned read-only while an index generation was being written."""


def estimate_graph_bytes(tables: Iterable[pa.Table]) -> int:
    """About how much disk the Kùzu bulk load of ``tables`` takes."""
    return GRAPH_BASE_BYTES + GRAPH_BYTES_PER_ARROW_BYTE * sum(t.nbytes for t in tables)


def estimate_generation_bytes(vectors: pa.Table, tables: Iterable[pa.Table]) -> int:
    """About how much disk a whole generation takes: its vectors, its graph and its copies of the state tables."""
    listed = list(tables)
    return vectors.nbytes + estimate_graph_bytes(listed) + sum(t.nbytes for t in listed)


def write_seam_for(output: str, state: CorpusState, vectors: pa.Table) -> WriteSeam:
    """The seam of a write stage that writes the generation of ``state`` and ``vectors`` into ``output``."""
    return WriteSeam(output, estimate_generation_bytes(vectors, (state.table(f.name) for f in fields(state))))


def failure_kind(exc: BaseException) -> str | None:
    """``"full"``, ``"read-only"`` or None (some other failure) for an exception raised while writing."""
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno in NO_SPACE_ERRNOS:
            return "full"
        if exc.errno in READ_ONLY_ERRNOS:
            return "read-only"
    if isinstance(exc, (OSError, RuntimeError)):  # Kùzu, Faiss and Arrow put the reason in the text only
        text = str(exc).lower()
        if any(t in text for t in NO_SPACE_TEXT):
            return "full"
        if any(t in text for t in READ_ONLY_TEXT):
            return "read-only"
    return None


def failed_path(exc: BaseException, default: str) -> str:
    """The file the failure names (an OSError's filename, the path in a Kùzu or Faiss message), else ``default``."""
    if isinstance(exc, OSError) and exc.filename:
        return os.fsdecode(exc.filename)
    found = _PATH_IN_TEXT.search(str(exc))
    return found.group(1) if found else default


def free_bytes(path: str) -> int | None:
    """Free space for an unprivileged writer on the disk holding ``path`` (None when it cannot be read)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _mb(size: int) -> str:
    return f"{max(size, 0) / MB:,.1f} MB"


@dataclass
class WriteSeam:
    """The write stage of one run into ``output`` (a local folder), which needs about ``needed_bytes``."""

    output: str
    needed_bytes: int

    def __post_init__(self) -> None:
        self.free_at_start = free_bytes(self.output)

    def check_room(self, folder: str, needed: int, what: str) -> None:
        """Refuse before writing ``what`` into ``folder`` when its disk has less than ``needed`` free."""
        free = free_bytes(folder)
        if free is not None and free < needed:
            raise OutputFullError(
                f"not enough space at {folder} to write {what}: it needs about {_mb(needed)}, {_mb(free)} are free; "
                f"{self._advice()}"
            )

    @contextmanager
    def writing(self, what: str, path: str, discard: str | None = None) -> Iterator[None]:
        """Run a write of ``what`` under ``path``; a full or read-only disk becomes one clear error. ``discard``: a
        folder this failed write leaves that nothing will read (removed, to give the space back)."""
        try:
            yield
        except (OSError, RuntimeError) as exc:
            kind = failure_kind(exc)
            if kind is None:
                raise
            if discard:
                shutil.rmtree(discard, ignore_errors=True)
            where = failed_path(exc, path)
            if kind == "full":
                free = "" if self.free_at_start is None else f", {_mb(self.free_at_start)} were free when it began"
                raise OutputFullError(
                    f"no space left on the disk of {where} while writing {what}: this generation needs about "
                    f"{_mb(self.needed_bytes)}{free}; {self._advice()}"
                ) from exc
            raise OutputReadOnlyError(
                f"the output turned read-only: writing {what} to {where} failed "
                f"({getattr(exc, 'strerror', None) or 'read-only'}); make {self.output} writable, then "
                f"{self._rerun()}"
            ) from exc

    def _advice(self) -> str:
        return f"free space there (or choose another --output), then {self._rerun()}"

    @staticmethod
    def _rerun() -> str:
        return "run the same command again: the previous generation is still served and the staged work is reused"
