"""The Ingress's client of the Retriever deployment: admission (a query that would miss its deadline under the
current load is refused at once: :mod:`serve.admission`), deadlines, one retry on a replica that died under a
read, Serve's back-pressure as 503 with ``Retry-After``, and the Retriever's error payloads as :class:`ApiError`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, AsyncGenerator, AsyncIterator

from serve.admission import Admission
from serve.handles import cancel_quietly
from serve.payloads import ApiError
from serve.replica_failures import count_replica_failure

log = logging.getLogger("hxd2.serve")

# How long past a deadline the Ingress waits for the Retriever's own 504 (which carries its reason) before it
# answers 504 itself. Well under the front door's grace (serve/front_door.py), so the Ingress's answer comes first.
RETRIEVER_GRACE_S = 0.25


class RetrieverBackend:
    """The Ingress's view of the Retriever deployment: deadlines, one retry on a dead replica, status mapping."""

    def __init__(self, handle: Any, retry_after_s: int, admission: Admission | None = None):
        self.handle = handle
        self.stream_handle = handle.options(stream=True)
        self.retry_after_s = retry_after_s
        self.admission = admission or Admission()
        self.refused = 0  # queries refused by admission so far (their 503s are in the HTTP metrics too)

    def _admit(self, deadline: float) -> None:
        refusal = self.admission.check(deadline)
        if refusal is not None:
            self.refused += 1
            raise self._overloaded(refusal.message, refusal.retry_after_s)

    def _overloaded(self, message: str, retry_after: float | None = None) -> ApiError:
        seconds = self.retry_after_s if retry_after is None else max(0, int(-(-retry_after // 1)))
        return ApiError(503, message, code="overloaded", headers={"Retry-After": str(seconds)})

    @staticmethod
    def _for_client(err: dict[str, Any]) -> dict[str, Any]:
        """The Retriever's error as the client sees it. Its 499 (the work was cancelled) reaches only a client
        still waiting, and the Ingress cancels a live client's work only at the deadline: that is a 504."""
        if int(err.get("status", 500)) == 499:
            return {**err, "status": 504, "message": "the request deadline passed (its work was cancelled)"}
        return err

    def _raise_payload_error(self, payload: dict[str, Any]) -> None:
        err = self._for_client(payload["error"])
        status = int(err.get("status", 500))
        if status == 503:
            raise self._overloaded(err.get("message", "overloaded"), err.get("retry_after"))
        raise ApiError(status, err.get("message", "error"))

    async def answer(
        self,
        index: str,
        question: str,
        trace: bool,
        deadline: float,
        mode: str | None = None,
        topic: str | None = None,
        history: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        self._admit(deadline)
        with self.admission.admitted() as answered:
            try:
                args = (index, question, trace, deadline, mode, topic, history)
                result = await self._call("answer", args, deadline)
            except ApiError as exc:
                if exc.status == 504:
                    answered()  # what it took is less than an answer would have: still evidence of the load
                raise
            answered()
            return result

    async def index_view(self, kind: str, index: str, params: dict[str, Any], deadline: float) -> dict[str, Any]:
        """A view of a served index (:mod:`serve.index_views`): a read, so a dead replica's is retried too."""
        return await self._call("index_view", (kind, index, params, deadline), deadline)

    async def _call(self, method: str, args: tuple[Any, ...], deadline: float) -> dict[str, Any]:
        """One read-only, idempotent call of the Retriever: its result, or its error payload as an ApiError."""
        from ray.exceptions import RayActorError
        from ray.serve.exceptions import BackPressureError

        for attempt in (0, 1):
            response = getattr(self.handle, method).remote(*args)
            try:
                # A little beyond the deadline: the retriever answers 504 itself, with its reason, when it can.
                result = await asyncio.wait_for(response, max(0.0, deadline - time.time()) + RETRIEVER_GRACE_S)
            except asyncio.TimeoutError:
                cancel_quietly(response)
                raise ApiError(504, "the request deadline passed") from None
            except asyncio.CancelledError:
                cancel_quietly(response)  # the client went away: stop the work downstream
                raise
            except BackPressureError as exc:
                raise self._overloaded(f"the retriever is at capacity ({exc})", exc.retry_after_s) from None
            except RayActorError as exc:
                count_replica_failure("Retriever")
                # The replica died under this (read-only, idempotent) call: retry once on another replica.
                if attempt == 0 and time.time() < deadline:
                    log.warning("retriever replica failed (%s); retrying once", type(exc).__name__)
                    continue
                raise self._overloaded(f"the retriever replica went away ({type(exc).__name__})") from None
            except Exception as exc:
                log.error("retriever call failed", exc_info=exc)
                raise ApiError(500, f"internal error: {type(exc).__name__}") from None
            if "error" in result:
                self._raise_payload_error(result)
            return result
        raise AssertionError("unreachable")

    async def answer_stream(
        self,
        index: str,
        question: str,
        trace: bool,
        deadline: float,
        mode: str | None = None,
        topic: str | None = None,
        history: list[dict[str, str]] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Events from the retriever. Errors before the first event raise :class:`ApiError` (a real status);
        later ones arrive as ``{"type": "error"}`` events. Closing this generator cancels the stream below."""
        self._admit(deadline)
        with self.admission.admitted() as answered:
            # aclosing: closing this generator closes the one below at once, which cancels the Retriever's work.
            stream = self._stream(index, question, trace, deadline, mode, topic, history)
            async with contextlib.aclosing(stream) as events:
                try:
                    async for event in events:
                        if event.get("type") == "final" or _timed_out(event):
                            answered()
                        yield event
                except ApiError as exc:
                    if exc.status == 504:
                        answered()
                    raise

    async def _stream(
        self,
        index: str,
        question: str,
        trace: bool,
        deadline: float,
        mode: str | None,
        topic: str | None,
        history: list[dict[str, str]] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        from ray.exceptions import RayActorError
        from ray.serve.exceptions import BackPressureError

        gen = self.stream_handle.answer_stream.remote(index, question, trace, deadline, mode, topic, history)
        first = True
        done = False
        try:
            while True:
                timeout = max(0.0, deadline - time.time()) + RETRIEVER_GRACE_S
                try:
                    event = await asyncio.wait_for(gen.__anext__(), timeout)
                except StopAsyncIteration:
                    done = True
                    return
                except asyncio.TimeoutError:
                    if first:
                        raise ApiError(504, "the request deadline passed") from None
                    yield {"type": "error", "error": {"status": 504, "message": "the request deadline passed"}}
                    return
                except BackPressureError as exc:
                    # The request never started downstream: nothing to cancel (cancelling would re-raise this).
                    done = True
                    raise self._overloaded(f"the retriever is at capacity ({exc})", exc.retry_after_s) from None
                except RayActorError as exc:
                    count_replica_failure("Retriever")
                    if first:
                        raise self._overloaded(f"the retriever replica went away ({type(exc).__name__})") from None
                    yield {"type": "error", "error": {"status": 503, "message": "the retriever replica went away"}}
                    return
                except ApiError:
                    raise
                except Exception as exc:
                    log.error("retriever stream failed", exc_info=exc)
                    message = f"internal error: {type(exc).__name__}"
                    if first:
                        raise ApiError(500, message) from None
                    yield {"type": "error", "error": {"status": 500, "message": message}}
                    return
                if first and event.get("type") == "error":
                    done = True
                    self._raise_payload_error(event)
                first = False
                if event.get("type") == "error":
                    event = {**event, "error": self._for_client(event["error"])}
                if event.get("type") in ("final", "error"):
                    done = True
                yield event
        finally:
            if not done:
                cancel_quietly(gen)

    async def health(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.handle.info.remote(), 5.0)

    async def reload(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.handle.reload.remote(), 120.0)


def _timed_out(event: dict[str, Any]) -> bool:
    return event.get("type") == "error" and int(event.get("error", {}).get("status", 0)) == 504
