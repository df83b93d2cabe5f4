"""After the key check: a limited tenant's budgets (429 naming the spent one), and the audit log of every request.

A pure ASGI middleware between the guard (:mod:`serve.auth`, which puts the tenant in the request's state) and the
routes. The routes leave what the gate needs in the same state: the index asked (``index``), the LLM tokens the
answer reported (``llm_tokens``) and the question (``question``). Streams end before the gate counts them, so a
streamed answer's tokens are counted too.

The audit log is JSON lines, one per request: time, tenant, index, route, status, latency, LLM tokens; the
question only with ``audit_questions``; never a key.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, MutableMapping

from serve.schemas import error_body
from serve.tenants import Tenant

log = logging.getLogger("hxd2.serve.tenants")


class AuditLog:
    """Appends one JSON line per request to ``path`` (one file per Ingress replica: ``{pid}`` in the name)."""

    def __init__(self, path: str, with_questions: bool = False):
        self.path = Path(path.replace("{pid}", str(os.getpid())))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.with_questions = with_questions
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False)
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def record_answer(request: Any, index: str, question: str, usage: dict[str, Any] | None) -> None:
    """What a route leaves for the gate: the index, the question, the answer's LLM tokens (added up over calls)."""
    state = request.scope.setdefault("state", {})
    state["index"] = index
    state["question"] = question
    tokens = int((usage or {}).get("prompt_tokens") or 0) + int((usage or {}).get("completion_tokens") or 0)
    state["llm_tokens"] = int(state.get("llm_tokens", 0)) + tokens


class TenantGate:
    """Budgets of limited tenants and the audit log, around ``app``."""

    def __init__(self, app: Any, budgets: Any = None, audit: AuditLog | None = None):
        self.app = app
        self.budgets = budgets
        self.audit = audit

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        tenant = state.get("tenant")
        limited = self.budgets is not None and isinstance(tenant, Tenant) and tenant.limited
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        if limited:
            refusal = await self.budgets.admit(tenant)
            if refusal is not None:
                await _refuse(send_wrapper, refusal.message(tenant.name), refusal.retry_header, refusal.budget)
                self._audit(scope, state, status["code"], started)
                return
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if limited:
                try:
                    await self.budgets.release(tenant, int(state.get("llm_tokens", 0)))
                except Exception:
                    log.warning("the budget ledger did not take a release of %s", tenant.name, exc_info=True)
            self._audit(scope, state, status["code"], started)

    def _audit(self, scope: MutableMapping[str, Any], state: dict[str, Any], status: int, started: float) -> None:
        if self.audit is None:
            return
        tenant = state.get("tenant")
        record = {
            "time": round(time.time(), 3),
            "tenant": tenant.name if isinstance(tenant, Tenant) else None,
            "index": state.get("index"),
            "route": scope.get("path", ""),
            "status": status,
            "latency_ms": round((time.perf_counter() - started) * 1000, 1),
            "tokens": int(state.get("llm_tokens", 0)),
        }
        if self.audit.with_questions:
            record["question"] = state.get("question")
        try:
            self.audit.write(record)
        except OSError:
            log.warning("the audit log %s could not be written", self.audit.path, exc_info=True)


async def _refuse(send: Any, message: str, retry_after: str, budget: str) -> None:
    body = error_body(message, "rate_limit_error", "budget_exceeded")
    body["error"]["budget"] = budget
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"retry-after", retry_after.encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
