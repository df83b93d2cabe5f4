"""The front door: an ASGI middleware that runs inside Ray Serve's HTTP proxy, in front of the Ingress replicas
(issue 35, "the front door under faults").

Three things only the proxy can do:

- **Stamp the arrival time.** A request may wait at the proxy (for an Ingress replica to be free, or to be
  replaced) before the Ingress sees it; its deadline (``x-hxd2-deadline-s``) counts from here, so the Ingress
  reads the stamp (``x-hxd2-arrived``; a client's own is replaced) instead of its own clock.
- **Answer for a lost Ingress.** When the Ingress replica holding a request dies, Serve's proxy sends nothing and
  the HTTP server answers a plain-text 500. Here such a request gets a JSON 503 with ``Retry-After`` (the error
  shape of every other route), and one whose response has not started by its deadline + :data:`GRACE_S` a JSON
  504, so no answer comes later than that however long the proxy waits for a replica.
- **Bound its own queue.** A burst (300 requests at once) used to reach the Ingress whole: the proxy's event loop
  and the Ingress replicas spent the deadline parsing, forwarding and refusing, and answers came long after it.
  Here a request with a deadline is refused at once (JSON 503 ``overloaded``, ``Retry-After``) when the requests
  already in flight through this proxy could not be answered within it at the rate this proxy has lately seen
  answers start (Little's law: ``in flight >= rate x deadline``, and at least :data:`MIN_IN_FLIGHT` go through;
  the Ingress's admission then decides, with what it knows of each load, which of those it can answer in time).
  Refusing costs one small response, so the event loop stays free to time the requests it let through.

Serve applies it through ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` (:data:`PROXY_CALLBACK`), which must be
in the environment of every node's processes when Ray starts them: ``hxd2 serve`` sets it for the local cluster
it starts; ``cluster/Dockerfile`` sets it for the image's nodes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Any, Awaitable, Callable

from serve.openapi import DEADLINE_HEADER, positive_seconds
from serve.schemas import error_body

log = logging.getLogger("hxd2.serve")

PROXY_CALLBACK = "serve.front_door:proxy_middlewares"
PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
ARRIVED_HEADER = "x-hxd2-arrived"
# A response not started this long after its deadline is answered 504 here (the Ingress answers 504 at the
# deadline itself; this is for a request that never reached a live one). Half a second, not one: the client's
# clock starts before the proxy accepts the connection and stamps the request, and in a burst on 2 cores that
# alone took most of a tenth (CI: a 504 at deadline + 1.08 s on the client's clock with a 1 s grace here).
GRACE_S = 0.5
RETRY_AFTER_S = 1
# The queue bound: requests let through however low the rate seen (a cold proxy must learn its rate), the window
# the rate is measured over, and the share of the deadline the queue may take (the answer itself takes the rest).
MIN_IN_FLIGHT = 64
RATE_WINDOW_S = 10.0
# Twice what the seen rate answers within the deadline: the rate drops while a replica is replaced, and the
# requests waiting for it are answered once it is back (refusing at 1x cost a lost-replica load a third of its
# answers); the Ingress's admission decides among those let through.
QUEUE_SHARE = 2.0

_ARRIVED = ARRIVED_HEADER.encode()
_DEADLINE = DEADLINE_HEADER.encode()

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def arrival_of(value: str | None, now: float) -> float:
    """The time a request arrived at the proxy, from its stamp; ``now`` when unstamped or unreadable. Never
    later than ``now``: a stamp can only shorten a deadline, never lengthen it."""
    stamp = None if value is None else positive_seconds(value)
    return now if stamp is None else min(now, stamp)


def _deadline_s(headers: list[tuple[bytes, bytes]]) -> float | None:
    """The request's deadline header as the Ingress reads it; None when absent or invalid (the Ingress answers 400)."""
    for key, value in headers:
        if key.lower() == _DEADLINE:
            return positive_seconds(value.decode("latin-1"))
    return None


async def _send_json(send: Send, status: int, message: str, type_: str, code: str) -> None:
    body = json.dumps(error_body(message, type_, code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FrontDoor:
    """Pure ASGI middleware (no body buffering, streams pass through untouched)."""

    def __init__(self, app: ASGIApp, clock: Callable[[], float] = time.time, min_in_flight: int = MIN_IN_FLIGHT):
        self.app = app
        self.clock = clock
        self.min_in_flight = min_in_flight
        self.in_flight = 0
        self._started: deque[float] = deque()  # when responses started, within RATE_WINDOW_S

    def _rate(self, now: float) -> float:
        """Responses started per second through this proxy, over the last RATE_WINDOW_S (or over the time since the
        first of them, when they all came lately: a proxy that has served for 3 s knows its rate over 3 s)."""
        while self._started and self._started[0] < now - RATE_WINDOW_S:
            self._started.popleft()
        if not self._started:
            return 0.0
        return len(self._started) / max(1.0, now - self._started[0])

    def _full(self, now: float, deadline_s: float) -> bool:
        """Whether the requests in flight here fill what this proxy can answer within the deadline."""
        room = max(self.min_in_flight, int(self._rate(now) * deadline_s * QUEUE_SHARE))
        return self.in_flight >= room

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        arrived = self.clock()
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != _ARRIVED]
        headers.append((_ARRIVED, repr(arrived).encode()))
        scope = {**scope, "headers": headers}
        deadline_s = _deadline_s(headers)
        if deadline_s is not None and self._full(arrived, deadline_s):
            await _send_json(
                send,
                503,
                f"overloaded: {self.in_flight} requests are in flight here, more than can be answered within "
                f"{deadline_s:g} s; retry",
                "service_unavailable",
                "overloaded",
            )
            return
        started = asyncio.Event()

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.set()
                if message.get("status", 500) < 500:
                    self._started.append(self.clock())
            await send(message)

        self.in_flight += 1
        try:
            await self._forward(scope, receive, send, tracked, started, arrived, deadline_s)
        finally:
            self.in_flight -= 1

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        tracked: Send,
        started: asyncio.Event,
        arrived: float,
        deadline_s: float | None,
    ) -> None:
        inner = asyncio.ensure_future(self.app(scope, receive, tracked))
        try:
            if deadline_s is not None:
                waiter = asyncio.ensure_future(started.wait())
                limit = max(0.0, arrived + deadline_s + GRACE_S - self.clock())
                await asyncio.wait({inner, waiter}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if not started.is_set() and not inner.done():
                    inner.cancel()  # the proxy stops waiting for a replica, and cancels the request downstream
                    await asyncio.gather(inner, return_exceptions=True)
                    await _send_json(
                        send,
                        504,
                        "the request deadline passed before the service could answer",
                        "timeout_error",
                        "deadline_exceeded",
                    )
                    return
            await inner
        except asyncio.CancelledError:
            inner.cancel()
            raise
        except Exception as exc:
            if started.is_set():
                raise
            lost = f"{type(exc).__name__}: {exc}"
        else:
            lost = "the proxy returned without a response"
        if not started.is_set():
            # Serve's proxy failed or returned without a response: the Ingress replica holding it was lost.
            log.warning("%s %s answered 503 replica_lost: %s", scope.get("method"), scope.get("path"), lost[:300])
            await _send_json(
                send,
                503,
                "the service lost the replica answering this request; retry",
                "service_unavailable",
                "replica_lost",
            )


def proxy_middlewares() -> list[Any]:
    """What Serve's proxy calls (``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``): the front door, as a Starlette
    middleware."""
    from starlette.middleware import Middleware

    return [Middleware(FrontDoor)]
