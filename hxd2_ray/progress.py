"""How units of work report what they did while a job runs (Ray-free; the jobs turn it into progress and metrics).

A stage (an extraction batch, an embedding batch, an evaluation question) calls ``counter.add(done=…, …)`` on
a :class:`StageCounter` it was given. In a Ray job that counter forwards to the job's telemetry actor
(``jobs/telemetry.py``), which keeps the totals the driver draws and exports them as Prometheus metrics; in
one process it is the progress board itself; in tests and library use it is :data:`NO_COUNTER`.

Counter names: ``done`` (items of the stage's unit: chunks, texts, questions), ``llm_calls``,
``prompt_tokens``, ``completion_tokens``, ``cached_tokens`` (of the prompt tokens, those the engine served from its
prefix cache), ``malformed`` (LLM records skipped), ``failed`` (items recorded
with an error), ``correct`` (evaluation answers scored correct).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, LLMWrapper

COUNTER_NAMES = (
    "done",
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "malformed",
    "failed",
    "correct",
)


class StageCounter(Protocol):
    def add(self, **counts: float) -> None:
        """Add ``counts`` (names above) to the stage's totals. Must not block for long or raise."""
        ...


class _NoCounter:
    def add(self, **counts: float) -> None:
        return None


NO_COUNTER: StageCounter = _NoCounter()


class CountingLLM(LLMWrapper):
    """Reports every batched ``complete`` call to a :class:`StageCounter` as it returns: LLM calls and tokens,
    so a stage's token rate moves while a long batch is still in its rounds."""

    def __init__(self, inner: LLMClient, counter: StageCounter) -> None:
        super().__init__(inner)
        self._counter = counter

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        responses = self.inner.complete(requests)
        cached = sum(int(r.cached_tokens) for r in responses)
        self._counter.add(
            llm_calls=len(responses),
            prompt_tokens=sum(int(r.prompt_tokens) for r in responses),
            completion_tokens=sum(int(r.completion_tokens) for r in responses),
            **({"cached_tokens": cached} if cached else {}),  # only a backend with a prefix cache reports any
        )
        return responses


class StageBoard(Protocol):
    """Stages of an in-process job (``jobs.progress.ProgressBoard`` is one): begun, counted into, ended."""

    def begin(self, name: str, *, total: int | None = None, unit: str | None = None, score: bool = False) -> None: ...

    def add(self, name: str, **counts: float) -> None: ...

    def end(self, name: str, status: str = "") -> None: ...


class _NoBoard:
    def begin(self, name: str, *, total: int | None = None, unit: str | None = None, score: bool = False) -> None:
        return None

    def add(self, name: str, **counts: float) -> None:
        return None

    def end(self, name: str, status: str = "") -> None:
        return None


NO_BOARD: StageBoard = _NoBoard()


class BoardCounter:
    """A :class:`StageCounter` into one stage of a :class:`StageBoard`."""

    def __init__(self, board: StageBoard, stage: str) -> None:
        self.board = board
        self.stage = stage

    def add(self, **counts: float) -> None:
        self.board.add(self.stage, **counts)
