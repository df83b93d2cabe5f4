"""The model deployments: the LLM (vLLM's async engine: continuous batching, streaming, abort) and the embedder
(``@serve.batch`` across requests)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator

import numpy as np
from ray import serve

from hxd2_ray.llm.base import LLMRequest, LLMResponse
from serve.metrics import Metrics
from serve.replica_failures import HEALTH_CHECK_PERIOD_S

log = logging.getLogger("hxd2.serve")


@serve.deployment(
    name="LLM",
    max_ongoing_requests=64,
    ray_actor_options={"num_cpus": 0.25},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
    health_check_timeout_s=60,
)
class LLMServer:
    """The generation engine: vLLM's async engine (continuous batching over every in-flight request, streaming,
    abort on disconnect), or the scripted fake (``llm.backend: scripted``) for tests and load tests."""

    def __init__(self, llm_cfg: dict[str, Any], scripted: dict[str, Any] | None = None):
        from pydantic import TypeAdapter

        from hxd2_ray.config import LLMConfig, OpenAILLMConfig, ScriptedLLMConfig

        cfg = TypeAdapter(LLMConfig).validate_python(llm_cfg)
        if isinstance(cfg, ScriptedLLMConfig):
            from hxd2_ray.llm.scripted_async import ScriptedAsyncEngine, ScriptedLatency

            self.backend: Any = ScriptedAsyncEngine(cfg, ScriptedLatency(**(scripted or {})))
        elif isinstance(cfg, OpenAILLMConfig):
            from hxd2_ray.llm.openai_backend import OpenAIAsyncEngine

            self.backend = OpenAIAsyncEngine(cfg)  # a client of a remote server: no engine in this replica
        else:
            from hxd2_ray.llm.vllm_async import AsyncVllmEngine

            self.backend = AsyncVllmEngine(cfg)
        self.kind = cfg.backend
        self.metrics = Metrics()

    async def complete(self, requests: list[LLMRequest]) -> list[LLMResponse]:
        try:
            out = await self.backend.complete(requests)
        except Exception:
            self.metrics.llm_requests.inc(len(requests), tags={"kind": "complete", "outcome": "error"})
            raise
        failed = sum(1 for r in out if r.error)
        if failed:
            self.metrics.llm_requests.inc(failed, tags={"kind": "complete", "outcome": "error"})
        if len(out) - failed:
            self.metrics.llm_requests.inc(len(out) - failed, tags={"kind": "complete", "outcome": "ok"})
        return out

    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        started = time.perf_counter()
        first = True
        outcome = "aborted"
        try:
            async for delta in self.backend.stream(request):
                if first:
                    first = False
                    self.metrics.llm_ttft.observe((time.perf_counter() - started) * 1000)
                yield delta
            outcome = "ok"
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            self.metrics.llm_requests.inc(tags={"kind": "stream", "outcome": outcome})

    async def stats(self) -> dict[str, Any]:
        return self.backend.snapshot()

    async def check_health(self) -> None:
        await self.backend.check_health()

    def __del__(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()


# ===================================================================================== embedder


@serve.deployment(
    name="Embedder",
    max_ongoing_requests=64,
    ray_actor_options={"num_cpus": 0.25},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
)
class EmbedderServer:
    """Query embeddings, batched across every caller with ``@serve.batch`` (one model call per batch)."""

    def __init__(self, emb_cfg: dict[str, Any], batch: dict[str, Any] | None = None):
        from pydantic import TypeAdapter

        from hxd2_ray.config import EmbeddingConfig
        from hxd2_ray.wiring import build_embedder

        cfg = TypeAdapter(EmbeddingConfig).validate_python(emb_cfg)
        self.embedder = build_embedder(cfg)
        self.cfg = cfg
        self.metrics = Metrics()
        self.batches = 0
        batch = batch or {}
        if "max_batch_size" in batch:
            self._embed_batch.set_max_batch_size(int(batch["max_batch_size"]))
        if "batch_wait_timeout_s" in batch:
            self._embed_batch.set_batch_wait_timeout_s(float(batch["batch_wait_timeout_s"]))

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.001)  # type: ignore[untyped-decorator]  # Serve's is
    async def _embed_batch(self, batches: list[list[str]]) -> list[np.ndarray]:
        flat = [t for texts in batches for t in texts]
        self.batches += 1
        self.metrics.embed_batch.observe(len(flat))
        # Hashing is microseconds; a model is not: off the loop either way, so the replica keeps accepting.
        vectors = await asyncio.to_thread(self.embedder.embed, flat)
        out, start = [], 0
        for texts in batches:
            out.append(vectors[start : start + len(texts)])
            start += len(texts)
        return out

    async def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.cfg.dim), dtype=np.float32)
        return await self._embed_batch(list(texts))

    async def info(self) -> dict[str, Any]:
        return {"model_id": self.embedder.model_id, "dim": self.embedder.dim, "batches": self.batches}
