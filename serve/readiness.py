"""Whether the Ingress has lately seen the application able to answer (``/healthz``)."""

from __future__ import annotations

import time

# How long a seen-ready answer stands: probes in between cost the deployments nothing, and a Retriever lost since
# shows within this time.
READY_CACHE_S = 5.0


class Readiness:
    """The last time a Retriever answered the Ingress's health question; ``ever`` once it has."""

    def __init__(self, cache_s: float = READY_CACHE_S):
        self.cache_s = cache_s
        self.ever = False
        self._seen = float("-inf")

    def fresh(self) -> bool:
        return time.monotonic() - self._seen < self.cache_s

    def mark(self) -> None:
        self.ever = True
        self._seen = time.monotonic()
