"""Tenants' budgets: requests per minute, requests at once, LLM tokens per UTC day; 429 with ``Retry-After`` when one
is spent, naming it.

Budgets hold across Ingress replicas: the counts live in one place, a :class:`BudgetLedger` that every replica of
an application asks (a named Ray actor in Serve, :func:`serve.deployments.ingress.budget_ledger`; in-process in the
unit tests). A request of a limited tenant costs one call before it starts (``admit``: the minute's window and the
requests at once) and one after it ends (``release``, with the LLM tokens its answer reported). A tenant with no
budget never calls it. The ledger holds tenant names and counts only, never a key; when its process is lost the
counts start again from zero (a budget is a guard against runaway use, not billing).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from serve.tenants import Tenant

WINDOW_S = 60.0
DAY_S = 86_400.0


@dataclass(frozen=True)
class Refusal:
    """A spent budget: which, and when to try again."""

    budget: str  # requests_per_minute | concurrent | tokens_per_day
    limit: int
    retry_after_s: float

    def message(self, tenant: str) -> str:
        what = {
            "requests_per_minute": f"{self.limit:,} requests per minute",
            "concurrent": f"{self.limit:,} requests at once",
            "tokens_per_day": f"{self.limit:,} LLM tokens per day (UTC)",
        }[self.budget]
        return f"the budget {self.budget} of tenant {tenant!r} is spent ({what}); retry after {self.retry_header} s"

    @property
    def retry_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after_s)))

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "limit": self.limit, "retry_after_s": self.retry_after_s}


class BudgetLedger:
    """The counts of every limited tenant (one per application; thread-unsafe by design: a Ray actor runs one call
    at a time, and the in-process ledger of the tests is driven from one event loop)."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._recent: dict[str, deque[float]] = {}  # tenant -> start times within the window
        self._running: dict[str, int] = {}
        self._tokens: dict[str, tuple[int, int]] = {}  # tenant -> (UTC day number, tokens spent that day)

    def admit(self, tenant: str, limits: dict[str, int | None]) -> dict[str, Any] | None:
        """Count a request in, or say which budget refuses it (as :meth:`Refusal.to_dict`)."""
        now = self._clock()
        day = int(now // DAY_S)
        per_day = limits.get("tokens_per_day")
        spent_day, spent = self._tokens.get(tenant, (day, 0))
        if per_day is not None and spent_day == day and spent >= per_day:
            return Refusal("tokens_per_day", per_day, (day + 1) * DAY_S - now).to_dict()
        at_once = limits.get("concurrent")
        if at_once is not None and self._running.get(tenant, 0) >= at_once:
            return Refusal("concurrent", at_once, 1.0).to_dict()
        per_minute = limits.get("requests_per_minute")
        recent = self._recent.setdefault(tenant, deque())
        while recent and recent[0] <= now - WINDOW_S:
            recent.popleft()
        if per_minute is not None and len(recent) >= per_minute:
            return Refusal("requests_per_minute", per_minute, recent[0] + WINDOW_S - now).to_dict()
        recent.append(now)
        self._running[tenant] = self._running.get(tenant, 0) + 1
        return None

    def release(self, tenant: str, tokens: int = 0) -> None:
        """A request of ``tenant`` ended, its answer having used ``tokens`` LLM tokens."""
        self._running[tenant] = max(0, self._running.get(tenant, 0) - 1)
        if tokens > 0:
            day = int(self._clock() // DAY_S)
            spent_day, spent = self._tokens.get(tenant, (day, 0))
            self._tokens[tenant] = (day, (spent if spent_day == day else 0) + tokens)

    def usage(self) -> dict[str, dict[str, int]]:
        """Per tenant: requests in the last minute, at once, tokens today."""
        day = int(self._clock() // DAY_S)
        names = set(self._recent) | set(self._running) | set(self._tokens)
        return {
            name: {
                "requests_last_minute": len(self._recent.get(name, ())),
                "running": self._running.get(name, 0),
                "tokens_today": self._tokens[name][1] if self._tokens.get(name, (day, 0))[0] == day else 0,
            }
            for name in sorted(names)
        }


def limits_of(tenant: Tenant) -> dict[str, int | None]:
    return {
        "requests_per_minute": tenant.requests_per_minute,
        "concurrent": tenant.concurrent,
        "tokens_per_day": tenant.tokens_per_day,
    }


class LocalBudgets:
    """A ledger in this process, behind the async interface the Ingress uses (tests; one replica)."""

    def __init__(self, ledger: BudgetLedger | None = None):
        self.ledger = ledger or BudgetLedger()

    async def admit(self, tenant: Tenant) -> Refusal | None:
        refusal = self.ledger.admit(tenant.name, limits_of(tenant))
        return None if refusal is None else Refusal(**refusal)

    async def release(self, tenant: Tenant, tokens: int = 0) -> None:
        self.ledger.release(tenant.name, tokens)


class ActorBudgets:
    """The ledger in a Ray actor every Ingress replica of the application shares (``handle``: its actor handle)."""

    def __init__(self, handle: Any):
        self.handle = handle

    async def admit(self, tenant: Tenant) -> Refusal | None:
        refusal = await self.handle.admit.remote(tenant.name, limits_of(tenant))
        return None if refusal is None else Refusal(**refusal)

    async def release(self, tenant: Tenant, tokens: int = 0) -> None:
        await self.handle.release.remote(tenant.name, tokens)
