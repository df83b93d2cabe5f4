"""Our Prometheus metrics (exported by Ray's metrics agent next to Serve's own, prefixed ``ray_``).

Outside a Serve replica (unit tests, no Ray) every metric is a no-op.
"""

from __future__ import annotations

from typing import Any, Sequence

from ray import serve
from ray.serve.exceptions import RayServeException

# Phases of a query whose latency is recorded (the flow's and the dual-level retrieval's timing keys).
TIMING_PHASES = (
    "question",
    "keywords",
    "embed",
    "vector_search",
    "fuzzy",
    "graph",
    "budget",
    "intent",
    "retrieve",
    "refusal",
    "logic_plan",
    "logic_execute",
    "logic_total",
    "verify",
    "generate",
    "total",
)
_LATENCY_BOUNDARIES_MS: list[float] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000]


class _Null:
    def inc(self, *args: Any, **kwargs: Any) -> None:
        pass

    def observe(self, *args: Any, **kwargs: Any) -> None:
        pass


class Metrics:
    """The app's counters and histograms; no-ops outside a replica."""

    def __init__(self, enabled: bool | None = None):
        if enabled is None:
            enabled = in_replica()
        self.enabled = enabled
        if enabled:
            from ray.serve.metrics import Counter, Histogram

            def counter(name: str, doc: str, tags: Sequence[str]) -> Any:
                return Counter(name, description=doc, tag_keys=tuple(tags))

            def hist(name: str, doc: str, tags: Sequence[str], bounds: list[float] | None = None) -> Any:
                return Histogram(
                    name, description=doc, boundaries=bounds or _LATENCY_BOUNDARIES_MS, tag_keys=tuple(tags)
                )
        else:

            def counter(name: str, doc: str, tags: Sequence[str]) -> Any:
                return _Null()

            def hist(name: str, doc: str, tags: Sequence[str], bounds: list[float] | None = None) -> Any:
                return _Null()

        self.http_requests = counter(
            "hxd2_http_requests", "HTTP requests by route, status and tenant", ["route", "status", "tenant"]
        )
        self.http_latency = hist("hxd2_http_latency_ms", "HTTP request latency (ms; streams: until the end)", ["route"])
        self.answers = counter("hxd2_answers", "Answers by index and path taken", ["index", "path"])
        self.fallbacks = counter("hxd2_fallbacks", "Answers that fell back (kind: what fell back)", ["index", "kind"])
        self.refusals = counter("hxd2_refusals", "Answers that refused to answer", ["index"])
        self.errors = counter("hxd2_query_errors", "Queries that failed, by status", ["index", "status"])
        self.prompt_tokens = counter("hxd2_prompt_tokens", "Prompt tokens of answers", ["index"])
        self.completion_tokens = counter("hxd2_completion_tokens", "Completion tokens of answers", ["index"])
        self.phase_latency = hist("hxd2_phase_latency_ms", "Latency of each phase of a query (ms)", ["phase"])
        self.part_calls = counter(
            "hxd2_part_calls", "Calls to the flow's part deployments by outcome", ["part", "outcome"]
        )
        self.part_latency = hist("hxd2_part_latency_ms", "Latency of a part deployment's call (ms)", ["part"])
        self.llm_requests = counter("hxd2_llm_requests", "LLM requests by kind and outcome", ["kind", "outcome"])
        self.llm_ttft = hist("hxd2_llm_ttft_ms", "LLM time to first streamed token (ms)", [])
        self.embed_batch = hist(
            "hxd2_embed_batch_texts", "Texts per embedder batch", [], [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        )


def replica_max_ongoing() -> int | None:
    try:
        return int(serve.get_replica_context()._deployment_config.max_ongoing_requests)  # noqa: SLF001
    except (RayServeException, AttributeError):  # outside a replica, or a Serve version without the field
        return None


def in_replica() -> bool:
    try:
        return serve.get_replica_context() is not None
    except RayServeException:  # outside a replica
        return False
