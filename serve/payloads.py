"""What the Ingress and the Retriever hand each other: an answer's JSON payload, an error payload (a status the
Ingress maps to HTTP, and a message), the mapping of known failures to those, and the Ingress's :class:`ApiError`.

Both ends import this module and nothing of each other: the Retriever (:mod:`serve.deployments.retriever`) builds
payloads, the Ingress's client of it (:mod:`serve.retriever_client`) and its HTTP app (:mod:`serve.api`) read them.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

from hxd2_ray.errors import BackendError, HxdError
from serve.handles import DeadlineExceeded, RequestCancelled
from serve.schemas import ERROR_TYPES

# An answer as JSON (``Answer.to_dict`` with the index and the timings): open-ended, it grows with the trace.
AnswerPayload = dict[str, Any]


def answer_payload(index: str, answer: Any, trace: bool, seconds: float) -> AnswerPayload:
    """JSON-ready result of one query (what the Retriever hands the Ingress)."""
    out = answer.to_dict(trace=trace)
    out["index"] = index
    timings = dict(answer.trace.get("timings_ms") or {}) if answer.trace else {}
    retrieval = dict(answer.retrieval.timings_ms or {})
    for key, value in retrieval.items():
        if key != "total":
            timings.setdefault(key, value)
    timings["total"] = seconds * 1000
    out["timings_ms"] = {k: round(float(v), 2) for k, v in timings.items()}
    return out


class ErrorBody(TypedDict, total=False):
    status: Required[int]  # the HTTP status the Ingress answers with (499: the work was cancelled)
    message: Required[str]
    retry_after: float | None  # seconds, for a 503 from Serve's back-pressure


class ErrorPayload(TypedDict):
    """What the Retriever returns (or streams as ``{"type": "error", **payload}``) for a request that failed."""

    error: ErrorBody


def error_payload(status: int, message: str, **extra: Any) -> ErrorPayload:
    return {"error": {"status": status, "message": message, **extra}}  # type: ignore[typeddict-item]


def error_of(exc: BaseException) -> ErrorPayload | None:
    """Known failures as an error payload (the Ingress maps ``status`` to HTTP); None for unexpected ones."""
    from ray.exceptions import RayActorError
    from ray.serve.exceptions import BackPressureError

    from hxd2_ray.retrieval import EmptyQuestionError, ModeUnavailableError

    if isinstance(exc, (EmptyQuestionError, ModeUnavailableError)):
        return error_payload(400, str(exc))
    if isinstance(exc, DeadlineExceeded):
        return error_payload(504, str(exc) or "the request deadline passed")
    if isinstance(exc, RequestCancelled):
        return error_payload(499, "the request was cancelled")
    if isinstance(exc, BackPressureError):
        return error_payload(503, f"a deployment is at capacity: {exc}", retry_after=exc.retry_after_s)
    if isinstance(exc, RayActorError):
        return error_payload(503, f"a deployment's replica went away: {type(exc).__name__}")
    if isinstance(exc, BackendError):
        return error_payload(502, str(exc))
    if isinstance(exc, HxdError):
        return error_payload(500, str(exc))
    return None


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_ or ERROR_TYPES.get(status, "server_error")
        # A deadline's 504 carries the same code wherever it is answered (the Ingress here, the proxy's front door).
        self.code = code or ("deadline_exceeded" if status == 504 else None)
        self.headers = headers or {}
