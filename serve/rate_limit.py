"""A request-rate limit per API key: a token bucket for each key, answered with 429 and ``Retry-After`` when empty.

One leaked or runaway key must not take the endpoint from every other client. The buckets live in each Ingress
replica (no shared store on the request path), so a key's limit across the service is ``rate x Ingress replicas``;
the Serve args say so (``rate_limit_per_key``). Keys are known only by their position in the configured key list:
no key, not even a digest of one, is held here.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, Hashable


class KeyRateLimiter:
    """``rate_per_s`` requests per second per key, with bursts of up to ``burst`` requests."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        if rate_per_s <= 0 or burst < 1:
            raise ValueError(f"rate_per_s must be > 0 and burst >= 1 (got {rate_per_s}, {burst})")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # (tenant, key position) -> (tokens, when counted)
        self._lock = threading.Lock()

    def admit(self, key: Hashable) -> float:
        """Take a token for ``key``: 0.0 when the request may go on, else the seconds until a token is there."""
        now = self._clock()
        with self._lock:
            tokens, then = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate_per_s)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate_per_s


def retry_after_header(wait_s: float) -> str:
    """Whole seconds, rounded up (a client that waits exactly this long finds a token)."""
    return str(max(1, math.ceil(wait_s)))
