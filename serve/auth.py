"""Bearer API keys and request-size limits, as one pure-ASGI middleware (no Ray; unit-tested on its own).

* Keys come from an env var (comma-separated, default ``HXD2_API_KEYS``) and/or a secrets file (one key per line,
  ``#`` comments), read on the replica at start-up, so they never travel inside the Serve config.
* A key is compared in constant time: both sides are hashed to 32-byte SHA-256 digests (no length leak) and every
  configured key is compared with ``hmac.compare_digest`` (no early exit on a match).
* Keys are never logged: a rejected request is logged with its path and whether a key was given at all.
* A request-rate limit per key (``rate_limit_per_key``, :mod:`serve.rate_limit`): over it, 429 with
  ``Retry-After``, before any work.
* ``/healthz`` (and the routes in ``open_paths``, or matching ``open_pattern``: the web UI's static files) need no
  key; ``/healthz?deep=true``, which calls the Retriever, does.
* The body is read here, before any route parses it: more than ``max_body_bytes`` → 413, whether the client
  declared a ``Content-Length`` (rejected without reading) or streamed a chunked body (cut off once over). The
  body that passes is replayed to the app, and later ``receive`` calls go to the client again, so the app still
  hears ``http.disconnect``.

A pure ASGI middleware (not Starlette's ``BaseHTTPMiddleware``) keeps streaming responses and client-disconnect
cancellation working.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, MutableMapping

from serve.rate_limit import KeyRateLimiter, retry_after_header
from serve.schemas import error_body
from serve.tenants import EVERYONE, Tenant

log = logging.getLogger("hxd2.serve.auth")

# The ASGI types as Starlette declares them (MutableMapping), so a FastAPI app is one of them.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/healthz"})


class AuthConfigError(ValueError):
    """Auth is required but no key is configured (the app refuses to start open by accident)."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def parse_keys(text: str, *, sep: str = ",") -> list[str]:
    keys = []
    for line in text.splitlines() if sep == "\n" else text.split(sep):
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(line)
    return keys


def load_api_keys(
    env_var: str | None = "HXD2_API_KEYS",
    secrets_file: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
) -> list[str]:
    """Keys from ``$env_var`` (comma-separated) plus ``secrets_file`` (one per line). Missing file → error."""
    env = os.environ if environ is None else environ
    keys: list[str] = []
    if env_var:
        keys += parse_keys(env.get(env_var, ""))
    if secrets_file:
        path = Path(secrets_file)
        if not path.is_file():
            raise AuthConfigError(f"API keys file not found: {path}")
        keys += parse_keys(path.read_text(encoding="utf-8"), sep="\n")
    for key in keys:
        if any(c.isspace() for c in key):
            raise AuthConfigError("an API key contains whitespace (check the separators of the keys source)")
    return list(dict.fromkeys(keys))


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive), else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


class ApiKeys:
    """A set of keys held only as digests; ``check`` is constant-time in the key and in which key matched."""

    def __init__(self, keys: Iterable[str]):
        self._digests = tuple(_digest(k) for k in keys)
        if not self._digests:
            raise AuthConfigError("no API keys configured")

    def __len__(self) -> int:
        return len(self._digests)

    def check(self, token: str | None) -> bool:
        return self.match(token) is not None

    def match_tenant(self, token: str | None) -> tuple[int, Tenant] | None:
        """The plain keys are one tenant that reads every index."""
        position = self.match(token)
        return None if position is None else (position, EVERYONE)

    def match(self, token: str | None) -> int | None:
        """The position of the key ``token`` is, or None; every key is compared whichever matches."""
        candidate = _digest(token or "")
        found = -1
        for i, digest in enumerate(self._digests):
            hit = hmac.compare_digest(candidate, digest)
            found = i if hit and found < 0 else found
        return found if found >= 0 and token is not None else None


def _json_response(status: int, body: dict[str, Any], headers: Iterable[tuple[str, str]] = ()) -> list[Message]:
    payload = json.dumps(body).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in headers]
    return [
        {"type": "http.response.start", "status": status, "headers": raw_headers},
        {"type": "http.response.body", "body": payload},
    ]


class GuardMiddleware:
    """Auth + body-size limit in front of an ASGI app (see the module docstring).

    ``keys=None`` disables auth (local development only; the app builder must say so explicitly).
    ``on_reject(status, path)`` is called for every request turned away here (metrics).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: ApiKeys | None,
        max_body_bytes: int,
        open_paths: Iterable[str] = OPEN_PATHS,
        open_pattern: re.Pattern[str] | None = None,
        on_reject: Callable[[int, str], None] | None = None,
        rate_limiter: KeyRateLimiter | None = None,
    ):
        self.app = app
        self.keys = keys
        self.rate_limiter = rate_limiter  # per key: with auth off there is no key to limit
        self.max_body_bytes = max_body_bytes
        self.open_paths = frozenset(open_paths)
        self.open_pattern = open_pattern  # matched against the whole path (fullmatch)
        self.on_reject = on_reject

    def _path(self, scope: Scope) -> str:
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        return path

    async def _reject(
        self, send: Send, status: int, body: dict[str, Any], path: str, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        if self.on_reject is not None:
            try:
                self.on_reject(status, path)
            except Exception as exc:  # noqa: BLE001 - a metric's failure must not change the answer
                log.warning("counting a rejected request failed: %s: %s", type(exc).__name__, exc)
        for message in _json_response(status, body, headers):
            await send(message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = self._path(scope)
        open_path = path in self.open_paths and not _asks_for_work(scope)
        if open_path or (self.open_pattern is not None and self.open_pattern.fullmatch(path)):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        tenant = EVERYONE
        if self.keys is not None:
            refresh = getattr(self.keys, "refresh", None)
            problem = refresh() if callable(refresh) else None
            if problem:
                log.warning("%s", problem)
            token = bearer_token(headers.get("authorization"))
            matched = self.keys.match_tenant(token)
            if matched is None:
                log.info("401 on %s (%s)", path, "no bearer key" if token is None else "unknown key")
                await self._reject(
                    send,
                    401,
                    error_body(
                        "missing or invalid API key: send 'Authorization: Bearer <key>'",
                        "authentication_error",
                        "invalid_api_key",
                    ),
                    path,
                    [("www-authenticate", "Bearer")],
                )
                return
            key, tenant = matched
            wait = self.rate_limiter.admit((tenant.name, key)) if self.rate_limiter is not None else 0.0
            if wait > 0:
                assert self.rate_limiter is not None
                await self._reject(
                    send,
                    429,
                    error_body(
                        f"rate limit of {self.rate_limiter.rate_per_s:g} requests/s for this API key reached; retry "
                        f"after {retry_after_header(wait)} s",
                        "rate_limit_error",
                        "rate_limit_exceeded",
                    ),
                    path,
                    [("retry-after", retry_after_header(wait))],
                )
                return
        # The routes read the tenant (the indexes it may see, its budgets) from the request's state.
        scope.setdefault("state", {})["tenant"] = tenant
        declared = headers.get("content-length")
        if declared is not None:
            # Digits only (RFC 9110), not whatever int() reads: "-1", "+5", " 5", "5_0" are refused.
            if not (declared.isascii() and declared.isdigit()):
                await self._reject(
                    send,
                    400,
                    error_body("invalid Content-Length", "invalid_request_error", "invalid_content_length"),
                    path,
                )
                return
            size = int(declared)
            if size > self.max_body_bytes:
                await self._reject(send, 413, _too_large(size, self.max_body_bytes), path)
                return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        # Read the whole body here (bounded), then replay it.
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_body_bytes:
                await self._reject(send, 413, _too_large(total, self.max_body_bytes, streamed=True), path)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replay: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay_receive() -> Message:
            if replay:
                return replay.pop()
            return await receive()

        await self.app(scope, replay_receive, send)


def _asks_for_work(scope: Scope) -> bool:
    """An open path asked for more than liveness (``/healthz?deep=...``: the deep check calls the Retriever):
    that form needs a key, so nobody without one can make the service work."""
    raw = scope.get("query_string", b"")
    query = raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)
    return "deep" in urllib.parse.parse_qs(query, keep_blank_values=True)


def _too_large(size: int, limit: int, streamed: bool = False) -> dict[str, Any]:
    what = f"more than {limit:,}" if streamed else f"{size:,}"
    return error_body(
        f"request body of {what} bytes is over the limit of {limit:,} bytes",
        "invalid_request_error",
        "request_too_large",
    )
