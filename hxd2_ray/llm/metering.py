"""What the backend was actually asked: calls and tokens per request tag, counted below any cache.

:class:`MeteredLLM` wraps the backend itself (a cache, when there is one, sits above it), so a reply served from
the cache costs nothing here. A stage reads and resets the counts per batch with :meth:`MeteredLLM.take`.
"""

from __future__ import annotations

import time
from typing import Sequence

from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, LLMWrapper, TagUsage


class MeteredLLM(LLMWrapper):
    """Counts every request sent to the wrapped client by tag, and the seconds spent waiting for it."""

    def __init__(self, inner: LLMClient) -> None:
        super().__init__(inner)
        self.by_tag: dict[str, TagUsage] = {}
        self.seconds = 0.0

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        started = time.perf_counter()
        try:
            responses = self.inner.complete(requests)
        finally:
            self.seconds += time.perf_counter() - started
        for req, resp in zip(requests, responses):
            self.by_tag.setdefault(req.tag, TagUsage()).count(resp)
        return responses

    def take(self) -> tuple[dict[str, TagUsage], float]:
        """(usage by tag, seconds in the backend) since the last call."""
        taken = (self.by_tag, self.seconds)
        self.by_tag, self.seconds = {}, 0.0
        return taken
