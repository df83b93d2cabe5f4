"""Quiet by default: a long command shows its own progress and summary; Ray's, Ray Data's and vLLM's logs go to a file.

``hxd2 index | index-kb | eval run | eval grid`` run their work inside :func:`job_console`:

* **quiet** (default): file descriptors 1 and 2 of the process point at a log file for the duration of the work
  (so does everything started meanwhile: the local Ray's processes, the worker output Ray forwards to the
  driver, native libraries), Ray Data's own progress bars are off, and the terminal gets only the
  :class:`~jobs.progress.ProgressBoard` (a live line per stage on a terminal, periodic plain lines on a pipe),
  warnings from this project's loggers (``hxd2_ray.*``, ``jobs.*``), the log's path once, and the stage table;
* **verbose** (``-v``): nothing is redirected (every log as before) and progress comes as plain lines.

The summary (text, or ``--json`` on stdout) is printed after the console closes, exactly as before.
``HXD2_PROGRESS=live|lines`` forces a renderer and ``HXD2_PROGRESS_INTERVAL_S`` sets the plain lines' period.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from jobs import progress

LOG_FOLDER = "_logs"
_PROJECT_LOGGERS = ("hxd2_ray", "jobs", "serve")


def log_path_for(command: str, output: str | None, *, beside: bool = False, now: float | None = None) -> Path:
    """Where a command's log goes: ``<output>/_logs/<command>-<time>.log`` for a local output folder the command
    owns; ``<parent>/_logs/<name>.<command>-<time>.log`` with ``beside`` (a command that must find its output
    empty, like ``index-kb``); ``./.hxd2/logs/`` for object-store outputs and commands without one."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    name = f"{command.replace(' ', '-')}-{stamp}.log"
    if not output or "://" in output:
        return Path(".hxd2") / "logs" / name
    out = Path(output).expanduser()
    if beside:
        return out.absolute().parent / LOG_FOLDER / f"{out.name}.{name}"
    return out / LOG_FOLDER / name


class _ProjectWarnings(logging.Handler):
    """Warnings of this project's loggers, shown to the user above the progress lines."""

    def __init__(self, board: progress.ProgressBoard) -> None:
        super().__init__(level=logging.WARNING)
        self.board = board

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.split(".")[0] in _PROJECT_LOGGERS

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.board.note(f"{record.levelname.lower()}: {record.getMessage()}")
        except Exception:  # noqa: BLE001 - a display problem must not break the job
            self.handleError(record)


@dataclass
class Console:
    board: progress.ProgressBoard
    terminal: TextIO
    log_path: Path | None
    verbose: bool


def _choose_renderer(terminal: TextIO, verbose: bool, is_tty: bool) -> Any:
    mode = os.environ.get("HXD2_PROGRESS", "").strip().lower()
    interval = float(os.environ.get("HXD2_PROGRESS_INTERVAL_S", "") or 15.0)
    if mode == "live" or (mode != "lines" and is_tty and not verbose):
        return progress.LiveRenderer(terminal)
    return progress.LineRenderer(terminal, interval_s=interval)


@dataclass
class EngineLogs:
    terminal: TextIO  # where the command's own lines go
    path: Path | None  # the log file engines write to; None: nothing redirected


@contextlib.contextmanager
def engine_logs_to(command: str, output: str | None, *, verbose: bool = False) -> Iterator[EngineLogs]:
    """For a command that prints its own few lines (``hxd2 query``, ``hxd2 serve``): file descriptors 1 and 2 point
    at the command's log file (:func:`log_path_for` ``output``, or ``./.hxd2/logs`` when that folder cannot be
    written: a reader's index may be read-only) for the block, so engines' and libraries' lines (vLLM, Ray, torch,
    also from C) land there. With ``verbose``, or when stderr is not file descriptor 2 (an in-process caller
    capturing output), nothing is redirected and the terminal is ``sys.stderr``."""
    try:
        real_fds = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        real_fds = False
    if verbose or not real_fds:
        yield EngineLogs(sys.stderr, None)
        return
    opened = _open_log(log_path_for(command, output), command)
    if opened is None:  # no log file can be written (said on stderr): the engines' lines stay on the terminal
        yield EngineLogs(sys.stderr, None)
        return
    path, log_file = opened
    with log_file:
        with _redirected_fds(log_file) as terminal:
            yield EngineLogs(terminal, path)


@contextlib.contextmanager
def _redirected_fds(log_file: TextIO) -> Iterator[TextIO]:
    """Point fds 1 and 2 at ``log_file`` for the block; yields a stream on the original stderr."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream has nothing to flush
            stream.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    terminal = os.fdopen(os.dup(saved[2]), "w", buffering=1, encoding="utf-8", errors="replace")
    try:
        for fd in (1, 2):
            os.dup2(log_file.fileno(), fd)
        yield terminal
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        terminal.close()


@contextlib.contextmanager
def _ray_data_progress_bars(enabled: bool) -> Iterator[None]:
    """Ray Data's own progress bars (and their plain-log form on a pipe) on or off for the block."""
    previous_env = os.environ.get("RAY_DATA_DISABLE_PROGRESS_BARS")
    os.environ["RAY_DATA_DISABLE_PROGRESS_BARS"] = "0" if enabled else "1"
    was_imported = "ray.data" in sys.modules
    previous_ctx = previous_env in (None, "", "0")
    if was_imported:  # the environment default was read at import: set the context too
        ctx = sys.modules["ray.data"].DataContext.get_current()
        previous_ctx = ctx.enable_progress_bars
        ctx.enable_progress_bars = enabled
    try:
        yield
    finally:
        if previous_env is None:
            os.environ.pop("RAY_DATA_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["RAY_DATA_DISABLE_PROGRESS_BARS"] = previous_env
        if "ray.data" in sys.modules:  # imported during the block or before: leave the context as it was
            sys.modules["ray.data"].DataContext.get_current().enable_progress_bars = previous_ctx


@contextlib.contextmanager
def job_console(
    command: str,
    log_path: Path | None,
    *,
    verbose: bool = False,
    run: str = "",
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Console]:
    """Run a command's work quietly (logs to ``log_path``) or verbosely, with its progress board active;
    ``run`` labels its metrics (the command's output)."""
    from jobs import telemetry

    telemetry.reset()
    telemetry.set_run(run)
    is_tty = os.isatty(2)
    opened = _open_log(log_path, command) if not verbose and log_path is not None else None
    quiet = opened is not None  # no log file can be written (said on stderr): the logs stay on the terminal
    with contextlib.ExitStack() as stack:
        if opened is not None:
            log_path, log_file = opened
            stack.callback(log_file.close)
            terminal = stack.enter_context(_redirected_fds(log_file))
            stack.enter_context(_ray_data_progress_bars(False))
        else:
            terminal = sys.stderr
        board = progress.ProgressBoard(_choose_renderer(terminal, verbose, is_tty), clock=clock)
        if quiet:
            board.note(f"hxd2 {command}: logs go to {log_path} (-v shows them here)")
        handler = _ProjectWarnings(board)
        root = logging.getLogger()
        root.addHandler(handler)
        file_handler = None
        if quiet:
            file_handler = logging.StreamHandler(log_file)
            file_handler.setLevel(logging.WARNING)
            root.addHandler(file_handler)
        previous = progress.activate(board)
        ticker_stop = threading.Event()
        ticker = threading.Thread(
            target=_tick, args=(board, ticker_stop, log_path if quiet else None), name="hxd2-progress-tick", daemon=True
        )
        ticker.start()
        try:
            yield Console(board=board, terminal=terminal, log_path=log_path if quiet else None, verbose=verbose)
        finally:
            ticker_stop.set()
            ticker.join(timeout=2)
            telemetry.reset()
            board.close()
            progress.activate(previous)
            root.removeHandler(handler)
            if file_handler is not None:
                root.removeHandler(file_handler)


# A log folder on a disk with less free than this is passed over: engines write their lines to it for the whole run,
# and a write that fails on a full disk would fail the command (issue 40, item 8).
MIN_LOG_FREE_BYTES = 8 * 1024 * 1024


def _open_log(log_path: Path, command: str) -> tuple[Path, TextIO] | None:
    """The log file with its first line written, or (its folder cannot be written: a read-only output, a full disk)
    the same name under ./.hxd2/logs, so the command still reaches its own clear error about the output instead of
    failing on its log; None, said in one line on stderr, when neither can be written (the logs then stay on the
    terminal: a command never fails for its log)."""
    why = []
    for path in (log_path, log_path_for(command.replace(" ", "-"), None)):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(path.parent).free
            if free < MIN_LOG_FREE_BYTES:
                raise OSError(errno.ENOSPC, f"only {free / 1024 / 1024:.1f} MB free", str(path.parent))
            log_file = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
        except OSError as exc:
            why.append(f"{path.parent}: {exc.strerror or exc}")
            continue
        try:
            log_file.write(f"==== hxd2 {command} — {time.strftime('%Y-%m-%d %H:%M:%S')} (pid {os.getpid()})\n")
            log_file.flush()
        except OSError as exc:
            why.append(f"{path}: {exc.strerror or exc}")
            with contextlib.suppress(OSError):
                log_file.close()
            continue
        if why:
            print(f"hxd2 {command}: its log goes to {path} ({why[0]})", file=sys.stderr)
        return path, log_file
    print(f"hxd2 {command}: no log file can be written ({'; '.join(why)}); logs stay on the terminal", file=sys.stderr)
    return None


STALL_NOTE_S = 300.0


def _tick(board: progress.ProgressBoard, stop: threading.Event, log_path: Path | None, every_s: float = 1.0) -> None:
    where = f"; its log may say why: {log_path}" if log_path is not None else ""
    while not stop.wait(every_s):
        board.tick()
        for stage in board.stalled(STALL_NOTE_S):
            board.note(f"{stage.name}: no progress for {progress.format_duration(STALL_NOTE_S)}{where}")


def run_job(
    work: Callable[[], dict[str, Any]],
    *,
    command: str,
    log_path: Path | None,
    verbose: bool,
    as_json: bool,
    format_text: Callable[[dict[str, Any]], str],
    errors: tuple[type[BaseException], ...] | None = None,
    run: str = "",
) -> int:
    """:func:`jobs.cli.run_and_report` inside a :func:`job_console`: the summary and an expected error are printed
    after the console closes (stdout then holds only the summary with ``--json``); the log's path is repeated
    under an error."""
    from hxd2_ray.errors import HxdError
    from jobs.result_stdout import result_stdout

    expected = errors or (HxdError, FileNotFoundError)
    used_log: Path | None = None
    # The result stream is reserved first: Ray's threads print to fd 1 even after the work (jobs.result_stdout).
    with result_stdout() as results:
        try:
            with job_console(command, log_path, verbose=verbose, run=run) as console:
                used_log = console.log_path
                summary = work()
        except expected as exc:
            print(f"error: {exc}", file=sys.stderr)
            if used_log is not None:
                print(f"  (the full log: {used_log})", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            if used_log is not None:
                print(f"(the log: {used_log})", file=sys.stderr)
            raise  # jobs.cli says it in one line, exit status 130
        except BaseException:
            if used_log is not None:
                print(f"hxd2 {command} failed; the full log: {used_log}", file=sys.stderr)
            raise
        print(
            json.dumps(summary, indent=2, ensure_ascii=False, default=str) if as_json else format_text(summary),
            file=results,
            flush=True,
        )
    return 0
