"""A Ray job's own counters: stages report to one actor, the driver draws its totals, Prometheus scrapes them.

:class:`JobTelemetry` (driver) starts a :class:`TelemetrySink` actor (no CPU) once Ray is up. Each stage gets a
:class:`RemoteStageCounter` (picklable: an actor handle and the stage's name) as a constructor argument of its
Ray Data actor or task; ``add(**counts)`` is a fire-and-forget call to the sink, which adds the counts to the
stage's totals and records them as ``ray.util.metrics`` (``jobs/job_metrics.py``). A driver thread polls the
sink's totals twice a second into the :class:`~jobs.progress.ProgressBoard`, so the progress lines come from
what the workers did, not from Ray's or vLLM's logs.

The sink lives as long as the driver (it is not detached): Prometheus sees the job's metrics while it runs, and
the driver's later runs of the same job reuse it (:meth:`TelemetrySink.start_run`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from jobs import progress

log = logging.getLogger(__name__)


class TelemetrySink:
    """Actor body: totals per stage and the Prometheus metrics. Created with ``ray.remote(num_cpus=0)``."""

    def __init__(self, job: str, run: str = "") -> None:
        from jobs.job_metrics import JobMetrics

        self.job = job
        self.run = run
        self.metrics = JobMetrics()
        self.totals: dict[str, dict[str, float]] = {}
        self.meta: dict[str, tuple[str, dict[str, str]]] = {}

    def start_run(self, run: str) -> None:
        """Begin another run of the job in the same driver: totals from zero, metrics under the new run label."""
        self.run = run
        self.totals = {}
        self.meta = {}

    def register(self, stage: str, unit: str, tags: Mapping[str, str]) -> None:
        self.meta[stage] = (unit, {**self._base(stage), **tags})
        self.totals.setdefault(stage, {})

    def add(self, stage: str, counts: Mapping[str, float]) -> None:
        totals = self.totals.setdefault(stage, {})
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
        unit, tags = self.meta.get(stage, ("items", self._base(stage)))
        self.metrics.record(tags, unit, counts)

    def stage_seconds(self, stage: str, seconds: float) -> None:
        _unit, tags = self.meta.get(stage, ("items", self._base(stage)))
        self.metrics.stage_seconds(tags, seconds)

    def _base(self, stage: str) -> dict[str, str]:
        return {"job": self.job, "run": self.run, "stage": stage}

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {k: dict(v) for k, v in self.totals.items()}


class RemoteStageCounter:
    """A :class:`hxd2_ray.progress.StageCounter` for Ray workers: ``add`` is one non-blocking actor call."""

    def __init__(self, sink: Any, stage: str) -> None:
        self.sink = sink
        self.stage = stage

    def add(self, **counts: float) -> None:
        counts = {k: v for k, v in counts.items() if v}
        if counts:
            self.sink.add.remote(self.stage, counts)


class JobTelemetry:
    """Driver side of a job's telemetry: the sink actor, counters for the stages, and the board poller."""

    def __init__(
        self, job: str, board: progress.ProgressBoard | None = None, poll_s: float = 0.5, run: str = ""
    ) -> None:
        self.job = job
        self.run = run
        self.board = board or progress.current()
        self.poll_s = poll_s
        self._sink: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stages: set[str] = set()
        self._lock = threading.Lock()

    def _ensure(self) -> Any:
        with self._lock:
            if self._sink is None:
                self._sink = _sink_for(self.job, self.run)
                self._thread = threading.Thread(target=self._poll, name="hxd2-telemetry", daemon=True)
                self._thread.start()
            return self._sink

    def counter(
        self, stage: str, *, unit: str = "items", total: int | None = None, score: bool = False, **tags: str
    ) -> RemoteStageCounter:
        """A counter for ``stage`` (the name the board shows, begun there if it is not yet) with ``total`` items of
        ``unit`` to do; ``tags`` add metric labels (e.g. ``mode``)."""
        if stage in self.board.stages and self.board.stages[stage].finished is None:
            self.board.stages[stage].score = score
            self.board.set_total(stage, total, unit)
        else:
            self.board.begin(stage, total=total, unit=unit, score=score)
        sink = self._ensure()
        sink.register.remote(stage, unit, tags)
        with self._lock:
            self._stages.add(stage)
        return RemoteStageCounter(sink, stage)

    def stage_seconds(self, stage: str, seconds: float) -> None:
        self._ensure().stage_seconds.remote(stage, seconds)

    def sync(self, timeout_s: float = 10.0) -> dict[str, dict[str, float]]:
        """Pull the sink's totals into the board now (before a stage is ended, so its last line is complete)."""
        if self._sink is None:
            return {}
        import ray

        snapshot = ray.get(self._sink.snapshot.remote(), timeout=timeout_s)
        for stage, counts in snapshot.items():
            self.board.sync(stage, counts)
        return snapshot

    def settle(self, stage: str, tries: int = 10, wait_s: float = 0.2) -> None:
        """Final counts of a finished stage: the workers' last reports are sent without waiting, so one may still
        be on its way when the stage's data is complete; sync until the stage's total is reached (bounded)."""
        for attempt in range(tries):
            self.sync()
            state = self.board.stages.get(stage)
            if state is None or state.total is None or state.done >= state.total:
                return
            time.sleep(wait_s)

    def _poll(self) -> None:
        said = ""
        while not self._stop.wait(self.poll_s):
            try:
                self.sync(timeout_s=max(5.0, 4 * self.poll_s))
                said = ""
            except Exception as exc:  # noqa: BLE001 - progress is best effort; the job's own errors surface elsewhere
                if type(exc).__name__ != said:  # once per new kind of failure, not every poll
                    said = type(exc).__name__
                    log.warning("progress counts are not updating (%s: %s); trying again", said, exc)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


_current: JobTelemetry | None = None
_run_label = ""


def set_run(run: str) -> None:
    """The ``run`` label of the command being run's metrics (its output), set by the console."""
    global _run_label
    _run_label = run


class StageRun:
    """A stage of a job on the board, from :func:`begin_stage` to :meth:`end`."""

    def __init__(self, job: str, name: str) -> None:
        self.job = job
        self.name = name
        self.started = time.perf_counter()
        progress.current().begin(name)

    def end(self, status: str = "") -> None:
        """Pull the stage's final counts from the sink, record its duration, finish its line with ``status``."""
        seconds = time.perf_counter() - self.started
        telemetry = for_job(self.job)
        if _ray_is_up():
            try:
                telemetry.settle(self.name)
                telemetry.stage_seconds(self.name, seconds)
            except Exception as exc:  # noqa: BLE001 - the board keeps its last counts; the job's error matters more
                log.warning("the final counts of stage %s are missing (%s: %s)", self.name, type(exc).__name__, exc)
        progress.current().end(self.name, status)


def begin_stage(job: str, name: str) -> StageRun:
    return StageRun(job, name)


@contextmanager
def stage(job: str, name: str, status: Callable[[], str] = lambda: "") -> Iterator[None]:
    """:func:`begin_stage` for a block: ended with ``status()``, or as "stopped" when the block raises."""
    run = begin_stage(job, name)
    ok = False
    try:
        yield
        ok = True
    finally:
        run.end(status() if ok else "stopped")


# One sink per job name and Ray job (driver connection), reused by the driver's later runs: a process that runs
# many jobs (a notebook, the test suite) would otherwise keep one idle actor process per run until it exits.
_sinks: dict[tuple[str, str], Any] = {}


def _sink_for(job: str, run: str) -> Any:
    import ray

    key = (job, ray.get_runtime_context().get_job_id())
    sink = _sinks.get(key)
    if sink is None:
        # One call at a time, in order per caller: totals are plain dict updates.
        sink = ray.remote(num_cpus=0)(TelemetrySink).remote(job, run)
        _sinks[key] = sink
    else:
        ray.get(sink.start_run.remote(run))
    return sink


def _ray_is_up() -> bool:
    import sys

    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def for_job(job: str) -> JobTelemetry:
    """The telemetry of the command being run (one per process and job name; Ray must be initialised before
    the first counter is asked for)."""
    global _current
    if _current is None or _current.job != job:
        if _current is not None:
            _current.close()
        _current = JobTelemetry(job, run=_run_label)
    return _current


def reset() -> None:
    global _current, _run_label
    if _current is not None:
        _current.close()
    _current = None
    _run_label = ""
