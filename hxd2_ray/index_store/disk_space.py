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
bulk load, so :meth:`WriteSeam.check_room` refuses before the load when the disk plainly lacks the room, and the
load itself runs in a child process (:func:`isolated_write`): an abort there ends the child only, and the command
says in one line which path failed and how much is free, removes its build folder and its lock, and a rerun
resumes.

The previous generation is never touched by a failed write (a new generation is written beside it and the manifest
switch is the last step), the caller removes its build folder, and the staged work under ``_staging`` is kept, so
the same command, run again once there is room, resumes.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import re
import shutil
import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pyarrow as pa

from hxd2_ray.index_store.output import OutputError

if TYPE_CHECKING:
    from hxd2_ray.index_store.generations import CorpusState

MB = 1024 * 1024
T = TypeVar("T")
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# The output was writable when the run opened it (hxd2_ray.index_store.output probes it), so a refusal to write now
# means it turned read-only (a remount, a lost mount, changed permissions).
READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
NO_SPACE_TEXT = ("no space left on device", "disk quota exceeded")
READ_ONLY_TEXT = ("read-only file system", "permission denied", "operation not permitted")
# Where Kùzu ("path: PATH ") and Faiss ("write error in PATH: ") name the file in their messages.
_PATH_IN_TEXT = re.compile(r"(?:path: |write error in |could not open )(/[^\s:]+)")

# An empty Kùzu database with its tables and first pages is a few MB before any row (measured: 3.3 MB for one
# table of 1,000 rows, 4.8 MB for the sample corpus's six tables); rows then take about 1.7x their Arrow size.
GRAPH_BASE_BYTES = 4 * MB
NEARLY_FULL_BYTES = 64 * MB
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
    # What a rerun does, said after what to free (a build's and an update's: the previous generation is kept).
    rerun: str = "run the same command again: the previous generation is still served and the staged work is reused"

    def __post_init__(self) -> None:
        self.free_at_start = free_bytes(self.output)

    def check_room(self, folder: str, needed: int, what: str) -> None:
        """Refuse before writing ``what`` into ``folder`` when its disk has less than ``needed`` free."""
        free = free_bytes(folder)
        if free is not None and free < needed:
            raise OutputFullError(
                f"not enough space at {folder} to write {what}: it needs about {_mb(needed)}, {_mb(free)} are free; "
                f"{self.advice()}"
            )

    @contextmanager
    def writing(self, what: str, path: str, discard: str | None = None) -> Iterator[None]:
        """Run a write of ``what`` under ``path``; a full or read-only disk becomes one clear error. ``discard``: a
        folder this failed write leaves that nothing will read (removed, to give the space back)."""
        try:
            yield
        except (OSError, RuntimeError) as exc:
            error = self.translated(exc, what, path, discard)
            if error is None:
                raise
            raise error from exc

    def translated(
        self, exc: OSError | RuntimeError, what: str, path: str, discard: str | None = None
    ) -> OutputError | None:
        """The one-line error for ``exc`` raised while writing ``what`` under ``path`` (see :meth:`writing`), or
        None when it is not a full or read-only disk."""
        kind = failure_kind(exc)
        if kind is None:
            return None
        if discard:
            shutil.rmtree(discard, ignore_errors=True)
        where = failed_path(exc, path)
        if kind == "full":
            free = "" if self.free_at_start is None else f", {_mb(self.free_at_start)} were free when it began"
            return OutputFullError(
                f"no space left on the disk of {where} while writing {what}: this generation needs about "
                f"{_mb(self.needed_bytes)}{free}; {self.advice()}"
            )
        return OutputReadOnlyError(
            f"the output turned read-only: writing {what} to {where} failed "
            f"({getattr(exc, 'strerror', None) or 'read-only'}); make {self.output} writable, then "
            f"{self._rerun()}"
        )

    def advice(self) -> str:
        return f"free space there (or choose another --output), then {self._rerun()}"

    def _rerun(self) -> str:
        return self.rerun


class GraphWriteAborted(OutputError):
    """The graph engine's write ended its process (a native abort), for a reason other than a full disk."""


def _run_in_child(conn: Any, fn: Callable[[], Any]) -> None:
    try:
        out = fn()
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it there
        conn.send(("error", type(exc).__name__, str(exc), getattr(exc, "errno", None), getattr(exc, "filename", None)))
    else:
        conn.send(("ok", out))
    finally:
        conn.close()


def isolated_write(fn: Callable[[], T], what: str, path: str, seam: WriteSeam | None = None) -> T:
    """Run ``fn`` (a write of ``what`` at ``path``; picklable: a module-level function or a partial of one) in a
    child process, so a native abort of the graph engine cannot take the command down. The child's exception is
    raised here (an ``OSError``/``RuntimeError`` with its text, so :meth:`WriteSeam.writing` recognises a full or
    read-only disk); a child killed by a signal is :class:`OutputFullError` when its disk is (nearly) full, else
    :class:`GraphWriteAborted`, one line naming ``path`` and what to free either way."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that runs Ray's and Arrow's threads
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run_in_child, args=(send, fn), name=f"hxd2-write-{what.replace(' ', '-')}")
    child.start()
    send.close()
    try:
        message = receive.recv()
    except EOFError:  # the child ended without a word: killed or aborted
        message = None
    finally:
        receive.close()
        child.join()
    if message is not None and message[0] == "ok":
        return cast(T, message[1])
    if message is not None:
        _, kind, text, err, filename = message
        if err is not None:
            raise OSError(err, f"{kind}: {text}", filename)
        raise RuntimeError(f"{kind}: {text}")
    code = child.exitcode or 0
    how = f"exit {code}"
    if code < 0:
        with suppress(ValueError):  # a signal number this platform does not name
            how = signal.Signals(-code).name
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    free = free_bytes(folder)
    needed = seam.needed_bytes if seam is not None else 0
    room = "" if free is None else f"; {_mb(free)} free on its disk"
    # An abort with less than NEARLY_FULL free (or than the generation needs) is taken for a full disk: Kùzu aborts
    # when a write inside its bulk load fails, and what it had written is gone with the child's files.
    if free is not None and (free < needed or free < NEARLY_FULL_BYTES):
        advice = seam.advice() if seam is not None else "free space there, then run the same command again"
        need = f" (this generation needs about {_mb(needed)})" if needed else ""
        raise OutputFullError(
            f"the graph engine stopped ({how}) while writing {what} to {path}{room}: the disk is (nearly) full"
            f"{need}; {advice}"
        )
    raise GraphWriteAborted(
        f"the graph engine stopped ({how}) while writing {what} to {path}{room}; its log may say why. Check the "
        "disk (space, quota) there, then run the same command again: the previous generation is still served"
    )
