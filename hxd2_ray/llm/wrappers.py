"""Wrappers that add one behaviour around an :class:`~hxd2_ray.llm.base.LLMClient`.

* :class:`SerializedLLM`: one call at a time for a backend that is not ``thread_safe``, and cancellation per
  thread (how a query pipeline stops a logic-form worker whose deadline passed: its next call fails at once
  without reaching the backend);
* :class:`ErrorTally`: records failed responses per unit of work (a question of the evaluation job), because
  the pipelines absorb many failures and degrade instead of raising.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Iterator, Sequence

from hxd2_ray.errors import BackendError
from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, LLMWrapper

CANCELLED = "cancelled: the logic-form deadline passed"


class SerializedLLM(LLMWrapper):
    """One call at a time (unless the backend is ``thread_safe``), cancellable per thread.

    ``cancel_on(event)`` (a context manager, per thread) makes every call from that thread return an error
    response, without reaching the backend, once ``event`` is set.
    """

    def __init__(self, inner: LLMClient):
        super().__init__(inner)
        # A thread-safe backend batches concurrent calls; serializing them would undo that.
        self._lock: contextlib.AbstractContextManager[object] = (
            contextlib.nullcontext() if inner.thread_safe else threading.Lock()
        )
        self._local = threading.local()

    @contextlib.contextmanager
    def cancel_on(self, event: threading.Event) -> Iterator[None]:
        previous = getattr(self._local, "cancel", None)
        self._local.cancel = event
        try:
            yield
        finally:
            self._local.cancel = previous

    def _cancelled(self) -> bool:
        event: threading.Event | None = getattr(self._local, "cancel", None)
        return event is not None and event.is_set()

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        if self._cancelled():
            return [_cancelled_response() for _ in requests]
        with self._lock:
            if self._cancelled():
                return [_cancelled_response() for _ in requests]
            return self.inner.complete(requests)

    def _stream(self, request: LLMRequest) -> Iterator[str]:
        if self._cancelled():
            raise BackendError(CANCELLED)
        with self._lock:
            yield from super()._stream(request)


def _cancelled_response() -> LLMResponse:
    return LLMResponse("", finish_reason="error", error=CANCELLED)


# Failed responses of the unit of work being done in this context (threads answer questions concurrently, and a
# pipeline carries the context into its own worker threads).
_ERRORS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("hxd2_llm_errors", default=None)


class ErrorTally(LLMWrapper):
    """Counts failed responses per unit of work: ``with ErrorTally.collect() as errors: ...``."""

    @staticmethod
    @contextlib.contextmanager
    def collect() -> Iterator[list[str]]:
        errors: list[str] = []
        token = _ERRORS.set(errors)
        try:
            yield errors
        finally:
            _ERRORS.reset(token)

    @staticmethod
    def _record(error: str) -> None:
        errors = _ERRORS.get()
        if errors is not None:
            errors.append(error)

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        responses = self.inner.complete(requests)
        for r in responses:
            if r.error:
                self._record(r.error)
        return responses

    def _stream(self, request: LLMRequest) -> Iterator[str]:
        try:
            yield from super()._stream(request)
        except Exception as exc:
            self._record(f"{type(exc).__name__}: {exc}")
            raise
