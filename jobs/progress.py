"""What a long job shows while it runs: one progress line per stage, then a table of the stages.

:class:`ProgressBoard` holds each stage's counts (items done of a total, LLM calls, tokens, correct answers,
failures) and turns them into rates and an ETA with an injected clock; a renderer draws it. On a terminal,
:class:`LiveRenderer` keeps one live line (rich) for the running stage and leaves a finished line per stage
above it; anywhere else (CI, ``ray job submit``, a pipe, ``-v``), :class:`LineRenderer` prints a plain line
when a stage starts, every ``interval_s`` while it runs, and when it ends. The counts come from the job's
own counters (the stages report what they did; see ``jobs/telemetry.py``), never from parsing logs.

Jobs reach the board of the command being run through :func:`current` (a no-op board when none is active,
so library code and tests that call the job functions directly need no console).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from jobs import interrupts

Clock = Callable[[], float]

# Counter names the stages report (see hxd2_ray.progress.StageCounter); anything else is kept and shown as is.
DONE = "done"
TOKEN_KEYS = ("prompt_tokens", "completion_tokens")


@dataclass
class StageState:
    name: str
    started: float
    unit: str = "items"
    total: int | None = None
    score: bool = False  # show the running share of correct answers (evaluation)
    counts: dict[str, float] = field(default_factory=dict)
    finished: float | None = None
    status: str = ""
    last_change: float = 0.0  # when the counts last moved (stall notes)
    stall_noted: bool = False

    @property
    def done(self) -> int:
        return int(self.counts.get(DONE, 0))

    @property
    def tokens(self) -> int:
        return int(sum(self.counts.get(k, 0) for k in TOKEN_KEYS))

    def elapsed(self, now: float) -> float:
        return max(0.0, (self.finished if self.finished is not None else now) - self.started)

    def rate(self, now: float) -> float | None:
        """Items per second since the stage started (None until something is done)."""
        elapsed = self.elapsed(now)
        return self.done / elapsed if self.done and elapsed > 0 else None

    def eta(self, now: float) -> float | None:
        rate = self.rate(now)
        if self.finished is not None or self.total is None or not rate:
            return None
        return max(0, self.total - self.done) / rate

    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, self.done / self.total)


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _rate_text(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}" if rate >= 1 else f"{rate:.2f}"


def describe(stage: StageState, now: float) -> str:
    """The numbers of one stage as text: ``37/64 chunks 58% · 2.1 chunks/s · 12,340 tok/s · ETA 0:13``."""
    parts = []
    if stage.total is not None:
        pct = f" {100 * (stage.fraction() or 0):.0f}%" if stage.total else ""
        parts.append(f"{stage.done:,}/{stage.total:,} {stage.unit}{pct}")
    elif stage.done:
        parts.append(f"{stage.done:,} {stage.unit}")
    elapsed = stage.elapsed(now)
    rate = stage.rate(now)
    if rate:
        parts.append(f"{_rate_text(rate)} {stage.unit}/s")
    if stage.tokens and elapsed > 0:
        parts.append(f"{stage.tokens / elapsed:,.0f} tok/s")
    if stage.counts.get("llm_calls"):
        parts.append(f"{int(stage.counts['llm_calls']):,} LLM calls")
    prompt = stage.counts.get("prompt_tokens", 0)
    if prompt and stage.counts.get("cached_tokens"):
        parts.append(f"{100 * stage.counts['cached_tokens'] / prompt:.0f}% of prompt tokens prefix-cached")
    if stage.score and stage.done:
        parts.append(f"score {stage.counts.get('correct', 0) / stage.done:.3f}")
    for key in ("malformed", "failed"):
        if stage.counts.get(key):
            parts.append(f"{int(stage.counts[key]):,} {key}")
    if stage.finished is None:
        eta = stage.eta(now)
        parts.append(f"ETA {format_duration(eta)}" if eta is not None else f"{format_duration(elapsed)} elapsed")
    else:
        parts.append(f"in {format_duration(elapsed)}")
        if stage.status:
            parts.append(stage.status)
    return " · ".join(parts)


class Renderer(Protocol):
    def started(self, board: ProgressBoard, stage: StageState) -> None: ...
    def changed(self, board: ProgressBoard, stage: StageState) -> None: ...
    def finished(self, board: ProgressBoard, stage: StageState) -> None: ...
    def note(self, board: ProgressBoard, text: str) -> None: ...
    def close(self, board: ProgressBoard) -> None: ...


class _BoundCounter:
    """``add(**counts)`` into one stage of an in-process board (a :class:`hxd2_ray.progress.StageCounter`)."""

    def __init__(self, board: ProgressBoard, stage: str) -> None:
        self._board = board
        self._stage = stage

    def add(self, **counts: float) -> None:
        self._board.add(self._stage, **counts)


class ProgressBoard:
    """Stages of one command, in the order they started. Thread-safe: telemetry pollers and the job update it."""

    def __init__(self, renderer: Renderer | None = None, clock: Clock = time.monotonic) -> None:
        self.renderer = renderer
        self.clock = clock
        self.stages: dict[str, StageState] = {}
        self.lock = threading.RLock()
        self.closed = False

    # ------------------------------------------------------------------ the job's side

    def begin(self, name: str, *, total: int | None = None, unit: str | None = None, score: bool = False) -> None:
        interrupts.raise_if_lost()  # a Ctrl-C swallowed during the last stage ends the command before this one
        with self.lock:
            now = self.clock()
            stage = StageState(name=name, started=now, unit=unit or "items", total=total, score=score, last_change=now)
            self.stages[name] = stage
            if self.renderer:
                self.renderer.started(self, stage)

    def set_total(self, name: str, total: int | None, unit: str | None = None) -> None:
        with self.lock:
            stage = self.stages.get(name)
            if stage is None:
                self.begin(name, total=total, unit=unit)
                return
            stage.total = total
            if unit:
                stage.unit = unit
            if self.renderer:
                self.renderer.changed(self, stage)

    def add(self, name: str, **counts: float) -> None:
        """Add to a stage's counts (an in-process reporter)."""
        with self.lock:
            stage = self.stages.get(name)
            if stage is None or stage.finished is not None:
                return
            for key, value in counts.items():
                stage.counts[key] = stage.counts.get(key, 0) + value
            stage.last_change = self.clock()
            if self.renderer:
                self.renderer.changed(self, stage)

    def sync(self, name: str, counts: Mapping[str, float]) -> None:
        """Set a stage's counts to totals reported elsewhere (the telemetry actor's snapshot)."""
        with self.lock:
            stage = self.stages.get(name)
            if stage is None or stage.finished is not None or dict(counts) == stage.counts:
                return
            stage.counts = dict(counts)
            stage.last_change = self.clock()
            if self.renderer:
                self.renderer.changed(self, stage)

    def stalled(self, after_s: float) -> list[StageState]:
        """Running stages with a total whose counts have not moved for ``after_s`` (each reported once): a job
        waiting on something only its logs explain (no free CPU for an actor, a model that does not load)."""
        with self.lock:
            now = self.clock()
            out = []
            for stage in self.stages.values():
                if (
                    stage.finished is None
                    and stage.total
                    and not stage.stall_noted
                    and now - stage.last_change >= after_s
                ):
                    stage.stall_noted = True
                    out.append(stage)
            return out

    def tick(self) -> None:
        """Let a renderer print its periodic line for running stages whose counts did not move."""
        with self.lock:
            for stage in self.stages.values():
                if stage.finished is None and self.renderer:
                    self.renderer.changed(self, stage)

    def end(self, name: str, status: str = "", counts: Mapping[str, float] | None = None) -> None:
        with self.lock:
            stage = self.stages.get(name)
            if stage is None or stage.finished is not None:
                return
            if counts is not None:
                stage.counts = dict(counts)
            stage.finished = self.clock()
            stage.status = status
            if self.renderer:
                self.renderer.finished(self, stage)

    def note(self, text: str) -> None:
        """A line the user must see (a warning to act on), printed above the progress."""
        with self.lock:
            if self.renderer:
                self.renderer.note(self, text)

    def counter(self, name: str) -> _BoundCounter:
        return _BoundCounter(self, name)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            now = self.clock()
            for stage in self.stages.values():
                if stage.finished is None:  # the job stopped inside it (an error)
                    stage.finished = now
                    stage.status = stage.status or "stopped"
            if self.renderer:
                self.renderer.close(self)

    def rows(self) -> list[dict[str, Any]]:
        """The stage table: one row per stage with its figures."""
        now = self.clock()
        out = []
        for s in self.stages.values():
            rate = s.rate(now)
            elapsed = s.elapsed(now)
            out.append(
                {
                    "stage": s.name,
                    "items": (
                        f"{s.done:,}/{s.total:,} {s.unit}"
                        if s.total is not None
                        else f"{s.done:,} {s.unit}"
                        if s.done
                        else "—"
                    ),
                    "time": format_duration(elapsed),
                    "rate": f"{_rate_text(rate)}/s" if rate else "—",
                    "tokens/s": f"{s.tokens / elapsed:,.0f}" if s.tokens and elapsed > 0 else "—",
                    "notes": "; ".join(
                        x
                        for x in (
                            f"score {s.counts.get('correct', 0) / s.done:.3f}" if s.score and s.done else "",
                            f"{int(s.counts['failed']):,} failed" if s.counts.get("failed") else "",
                            f"{int(s.counts['malformed']):,} malformed" if s.counts.get("malformed") else "",
                            s.status,
                        )
                        if x
                    ),
                }
            )
        return out


class NullBoard(ProgressBoard):
    """The board outside a console: counts are kept (cheap), nothing is drawn."""


_current: ProgressBoard = NullBoard()


def current() -> ProgressBoard:
    return _current


def activate(board: ProgressBoard) -> ProgressBoard:
    """Make ``board`` the current one; returns the previous (give it back to :func:`activate` when done)."""
    global _current
    previous, _current = _current, board
    return previous


def stage_table_text(rows: list[dict[str, Any]]) -> str:
    """The stage table as aligned plain text (pipes, logs)."""
    if not rows:
        return ""
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(width[c]) for c in cols)]
    lines += ["  ".join(str(r[c]).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


class LineRenderer:
    """Plain lines for a non-interactive stream: one when a stage starts, at most one per ``interval_s`` while
    it runs (only when there is something new to say or a tick asks), one when it ends."""

    def __init__(self, stream: TextIO, interval_s: float = 15.0, prefix: str = "hxd2") -> None:
        self.stream = stream
        self.interval_s = interval_s
        self.prefix = prefix
        self._last: dict[str, float] = {}

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def started(self, board: ProgressBoard, stage: StageState) -> None:
        self._last[stage.name] = board.clock()
        self._write(f"[{self.prefix}] {stage.name} …")

    def changed(self, board: ProgressBoard, stage: StageState) -> None:
        now = board.clock()
        if now - self._last.get(stage.name, stage.started) >= self.interval_s:
            self._last[stage.name] = now
            self._write(f"[{self.prefix}] {stage.name}: {describe(stage, now)}")

    def finished(self, board: ProgressBoard, stage: StageState) -> None:
        self._write(f"[{self.prefix}] {stage.name} done: {describe(stage, board.clock())}")

    def note(self, board: ProgressBoard, text: str) -> None:
        self._write(f"[{self.prefix}] {text}")

    def close(self, board: ProgressBoard) -> None:
        table = stage_table_text(board.rows())
        if table:
            self._write(table)


class LiveRenderer:
    """A live line per running stage on a terminal (rich), a permanent line per finished stage, a table at the end."""

    def __init__(self, stream: TextIO, refresh_per_second: float = 4.0) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=stream, force_terminal=True, highlight=False, soft_wrap=False)
        self._board: ProgressBoard | None = None
        self._last: Any = ""  # the last frame drawn (a rich Table; nothing before the first)
        self.live = Live(
            console=self.console,
            get_renderable=self._render,
            refresh_per_second=refresh_per_second,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._started = False

    def _render(self) -> Any:
        from rich.table import Table

        board = self._board
        if board is None:
            return Table.grid(padding=(0, 1))
        # Rich's refresh thread calls this holding the Live's lock, while the board calls the renderer holding its
        # own lock (and then needs the Live's): waiting here would deadlock, so a busy board redraws the last frame.
        if not board.lock.acquire(blocking=False):
            return self._last
        try:
            self._last = self._frame(board)
        finally:
            board.lock.release()
        return self._last

    @staticmethod
    def _frame(board: ProgressBoard) -> Any:
        """A line per running stage (the caller holds the board's lock)."""
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        grid = Table.grid(padding=(0, 1))
        now = board.clock()
        for stage in board.stages.values():
            if stage.finished is not None:
                continue
            frac = stage.fraction()
            bar = ProgressBar(
                total=100.0, completed=100.0 * (frac or 0), width=20, pulse=frac is None, animation_time=now
            )
            grid.add_row(
                Text(f"  {stage.name}", style="bold cyan", no_wrap=True),
                bar,
                Text(describe(stage, now), no_wrap=True, overflow="ellipsis"),
            )
        return grid

    def _ensure_live(self, board: ProgressBoard) -> None:
        self._board = board
        if not self._started:
            self.live.start()
            self._started = True

    def started(self, board: ProgressBoard, stage: StageState) -> None:
        self._ensure_live(board)
        # Drawn now, not at the next refresh tick: a stage shorter than the tick would otherwise never be seen.
        self._last = self._frame(board)  # the board holds its lock while it calls a renderer
        self.live.refresh()

    def changed(self, board: ProgressBoard, stage: StageState) -> None:
        self._board = board  # the refresh thread redraws

    def finished(self, board: ProgressBoard, stage: StageState) -> None:
        self._ensure_live(board)
        from rich.text import Text

        mark = ("✗", "red") if stage.status == "stopped" else ("✓", "green")
        self.live.console.print(Text.assemble(mark, " ", (stage.name, "bold"), "  ", describe(stage, board.clock())))
        self.live.refresh()

    def note(self, board: ProgressBoard, text: str) -> None:
        self._ensure_live(board)
        from rich.text import Text

        self.live.console.print(Text(text, style="yellow"))
        self.live.refresh()

    def close(self, board: ProgressBoard) -> None:
        from rich.table import Table
        from rich.text import Text

        if self._started:
            self.live.stop()
        rows = board.rows()
        if rows:
            table = Table(title=None, show_edge=False, header_style="bold")
            for col in rows[0]:
                table.add_column(col, justify="right" if col in ("time", "rate", "tokens/s") else "left")
            for r in rows:
                table.add_row(*(Text(str(v)) for v in r.values()))
            self.console.print(table)
