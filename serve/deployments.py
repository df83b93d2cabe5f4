"""The Serve deployments, the HTTP API they expose, and the metrics they record.

Request flow (``serve.app:build_app`` wires it)::

    HTTP ─► proxy ─► Ingress (FastAPI: auth, limits, OpenAI shapes, SSE)
                       │ handle: answer / answer_stream (index name, question, deadline)
                       ▼
                     Retriever ×N (opens every index read-only; runs THE pipeline object in a thread pool)
                       │ HandleLLM.complete/stream            │ HandleEmbedder.embed
                       ▼                                       ▼
                     LLM (AsyncVllmEngine: continuous        Embedder (@serve.batch across all callers)
                          batching, streaming, abort;
                          or the scripted LLM)
    optional (args.logic): LogicPlanner, LogicExecutor, LogicVerifier — thin wrappers of hxd2_ray.logic.
    args.embedder in_replica: no Embedder deployment; the Retriever / LogicExecutor replicas embed in-process
    (a CPU embedder: the hop costs more than batching across requests saves).

Where the pipeline runs: in the Retriever replicas, in worker threads (see :mod:`serve.handles` for why). The
pipeline object comes from ``args.pipeline`` (a factory taking a :class:`PipelineContext`); the default builds
the CLI's ``QueryPipeline``; a multi-stage pipeline only has to offer ``answer(question)`` and
``answer_stream(question)`` (yielding ``delta`` events then one ``final`` with an ``Answer``-like object).

How streaming flows: vLLM ``AsyncLLM.generate`` (DELTA outputs) ─► ``LLM.stream`` (async generator) ─►
Serve streaming handle ─► ``HandleLLM.stream`` (sync iterator in the pipeline thread) ─► pipeline
``answer_stream`` events ─► a queue into the Retriever's event loop ─► ``Retriever.answer_stream`` (async
generator) ─► Serve streaming handle ─► Ingress SSE ``data: {chunk}`` lines ─► client. When the client hangs up,
each stage cancels the one below it, down to ``AsyncLLM.abort``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterable, Sequence

import numpy as np
from fastapi import Request  # module level: FastAPI resolves the routes' string annotations in these globals
from ray import serve

from hxd2_ray.config import HxdConfig, validate_config
from hxd2_ray.errors import BackendError, HxdError, IndexNotFoundError
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from serve.handles import (
    DeadlineExceeded,
    HandleEmbedder,
    HandleLLM,
    HandleStage,
    RequestCancelled,
    RequestScope,
    cancel_soon,
    run_in_thread,
)

log = logging.getLogger("hxd2.serve")

STAGES = ("question", "keywords", "embed", "vector_search", "fuzzy", "graph", "budget", "generate", "total")
_LATENCY_BOUNDARIES_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000]


# ============================================================================================== metrics


class _Null:
    def inc(self, *args: Any, **kwargs: Any) -> None:
        pass

    def observe(self, *args: Any, **kwargs: Any) -> None:
        pass


class Metrics:
    """Our counters and histograms (exported by Ray's metrics agent next to Serve's own, prefixed ``ray_``).

    Outside a Serve replica (unit tests, no Ray) every metric is a no-op.
    """

    def __init__(self, enabled: bool | None = None):
        if enabled is None:
            enabled = _in_replica()
        self.enabled = enabled
        if enabled:
            from ray.serve.metrics import Counter, Histogram

            def counter(name: str, doc: str, tags: Sequence[str]) -> Any:
                return Counter(name, description=doc, tag_keys=tuple(tags))

            def hist(name: str, doc: str, tags: Sequence[str], bounds: list[float] = _LATENCY_BOUNDARIES_MS) -> Any:
                return Histogram(name, description=doc, boundaries=bounds, tag_keys=tuple(tags))
        else:
            def counter(name: str, doc: str, tags: Sequence[str]) -> Any:
                return _Null()

            def hist(name: str, doc: str, tags: Sequence[str], bounds: list[float] | None = None) -> Any:
                return _Null()

        self.http_requests = counter("hxd2_http_requests", "HTTP requests by route and status", ["route", "status"])
        self.http_latency = hist("hxd2_http_latency_ms", "HTTP request latency (ms; streams: until the end)",
                                 ["route"])
        self.answers = counter("hxd2_answers", "Answers by index and path taken", ["index", "path"])
        self.fallbacks = counter("hxd2_fallbacks", "Answers that fell back (kind: what fell back)",
                                 ["index", "kind"])
        self.refusals = counter("hxd2_refusals", "Answers that refused to answer", ["index"])
        self.errors = counter("hxd2_query_errors", "Queries that failed, by status", ["index", "status"])
        self.prompt_tokens = counter("hxd2_prompt_tokens", "Prompt tokens of answers", ["index"])
        self.completion_tokens = counter("hxd2_completion_tokens", "Completion tokens of answers", ["index"])
        self.stage_latency = hist("hxd2_stage_latency_ms", "Per-stage latency of a query (ms)", ["stage"])
        self.llm_requests = counter("hxd2_llm_requests", "LLM requests by kind and outcome", ["kind", "outcome"])
        self.llm_ttft = hist("hxd2_llm_ttft_ms", "LLM time to first streamed token (ms)", [])
        self.embed_batch = hist("hxd2_embed_batch_texts", "Texts per embedder batch", [],
                                [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])


def _replica_max_ongoing() -> int | None:
    try:
        return int(serve.get_replica_context()._deployment_config.max_ongoing_requests)  # noqa: SLF001
    except Exception:  # noqa: BLE001 - outside a replica, or a Serve version without the field
        return None


def _in_replica() -> bool:
    try:
        return serve.get_replica_context() is not None
    except Exception:  # noqa: BLE001 - RayServeException outside a replica
        return False


# ====================================================================================== pipeline wiring


@dataclass
class PipelineContext:
    """What a pipeline factory gets: one open index and the handle adapters, inside a Retriever replica."""

    index_name: str
    index: Any  # hxd2_ray.retrieval.OpenIndex
    llm: HandleLLM
    embedder: Any  # HandleEmbedder, or the embedder itself when args.embedder is in_replica
    cfg: HxdConfig
    stages: dict[str, HandleStage] = field(default_factory=dict)  # logic deployments, when deployed


def embedder_for(handle: Any, cfg: HxdConfig) -> Any:
    """The Embedder deployment behind its adapter, or (no handle: ``args.embedder`` is in_replica) the configured
    embedder built in this replica."""
    if handle is None:
        from hxd2_ray.wiring import build_embedder

        return build_embedder(cfg.embedding)
    return HandleEmbedder(handle, cfg.embedding)


def default_pipeline(ctx: PipelineContext) -> Any:
    """The CLI's pipeline: dual-level retrieval and a grounded answer."""
    from hxd2_ray.retrieval import QueryPipeline
    from hxd2_ray.wiring import build_reranker

    return QueryPipeline(ctx.index, ctx.llm, ctx.embedder, ctx.cfg.retrieval, reranker=build_reranker(ctx.cfg.rerank))


def import_string(path: str) -> Callable[..., Any]:
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"import path {path!r} must look like 'package.module:function'")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def describe_answer(answer: Any) -> dict[str, Any]:
    """Path taken, fallback and refusal of an answer, from whatever the pipeline recorded.

    A pipeline may set ``path`` (e.g. ``logic_form``, ``dual_level``, ``refused``), ``fallback`` (a reason, or
    True) and ``refused`` on its answer; for ``QueryPipeline`` (which sets none) the path is ``dual_level``, and a
    keyword reply that could not be used (the search ran on the question alone) counts as a fallback.
    """
    path = getattr(answer, "path", None) or "dual_level"
    refused = bool(getattr(answer, "refused", False)) or path == "refused"
    fallback = getattr(answer, "fallback", None)
    if fallback is True:
        fallback = "fallback"
    if not fallback:
        retrieval = getattr(answer, "retrieval", None)
        keywords = getattr(retrieval, "keywords", None)
        if keywords is not None and (not keywords.parsed or keywords.empty):
            fallback = "keywords"
        elif retrieval is not None and not (retrieval.entities or retrieval.relations or retrieval.chunks):
            fallback = "empty_context"
    return {"path": str(path), "fallback": fallback or None, "refused": refused}


def answer_payload(index: str, answer: Any, trace: bool, seconds: float) -> dict[str, Any]:
    """JSON-ready result of one query (what the Retriever hands the Ingress)."""
    out = answer.to_dict(trace=trace) if hasattr(answer, "to_dict") else {"answer": str(answer)}
    out.update(describe_answer(answer))
    out["index"] = index
    retrieval = getattr(answer, "retrieval", None)
    timings = dict(getattr(retrieval, "timings_ms", None) or {})
    retrieval_total = timings.pop("total", None)
    total = seconds * 1000
    if retrieval_total is not None:
        timings["generate"] = max(0.0, total - retrieval_total)
    timings["total"] = total
    out["timings_ms"] = {k: round(v, 2) for k, v in timings.items()}
    return out


def _error(status: int, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"status": status, "message": message, **extra}}


def error_of(exc: BaseException) -> dict[str, Any] | None:
    """Known failures as an error payload (the Ingress maps ``status`` to HTTP); None for unexpected ones."""
    from ray.exceptions import RayActorError
    from ray.serve.exceptions import BackPressureError

    from hxd2_ray.retrieval import EmptyQuestionError

    if isinstance(exc, EmptyQuestionError):
        return _error(400, str(exc))
    if isinstance(exc, DeadlineExceeded):
        return _error(504, str(exc) or "the request deadline passed")
    if isinstance(exc, RequestCancelled):
        return _error(499, "the request was cancelled")
    if isinstance(exc, BackPressureError):
        return _error(503, f"a stage is at capacity: {exc}", retry_after=exc.retry_after_s)
    if isinstance(exc, RayActorError):
        return _error(503, f"a stage's replica went away: {type(exc).__name__}")
    if isinstance(exc, BackendError):
        return _error(502, str(exc))
    if isinstance(exc, HxdError):
        return _error(500, str(exc))
    return None


# ========================================================================================== LLM


_NAME_RE = re.compile(r"[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*|[\u4e00-\u9fff]{2,}")
_STOP = frozenset("A An And As At But By For From How If In Is It Of On Or The What When Where Which Who Why "
                  "With Does Did Do Are Was Were Tell Give List Name".split())


def _names(text: str) -> list[str]:
    names: dict[str, str] = {}
    for match in _NAME_RE.finditer(text):
        words = match.group(0).split()
        while words and words[0] in _STOP:
            words = words[1:]
        if words:
            name = " ".join(words)
            names.setdefault(name.casefold(), name)
    return list(names.values())[:8]


def _section(text: str, header: str) -> list[str]:
    lines = text.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == header) + 1
    except StopIteration:
        return []
    out = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        if line.strip():
            out.append(line)
    return out


def serving_script(req: LLMRequest) -> str:
    """Deterministic replies for serving with the scripted LLM (tests, load tests, overhead benchmark).

    keywords: the question's capitalised names as low-level keywords; answer: a sentence naming the question
    and the entities the context holds; anything else: the first allowed choice, or an echo.
    """
    import json

    last = req.messages[-1]["content"] if req.messages else ""
    if req.tag == "keywords":
        question = last.split(":", 1)[-1] if ":" in last else last
        question = question.split("：", 1)[-1]
        return json.dumps({"high_level_keywords": [], "low_level_keywords": _names(question)}, ensure_ascii=False)
    if req.tag == "answer":
        question = " ".join(_section(last, "## Question")) or " ".join(_section(last, "## 问题"))
        rows = _section(last, "## Entities")[1:]  # the first line is the CSV header (or "(none)")
        entities = [r.split(",")[1] for r in rows if r.count(",") >= 2][:3]
        known = ", ".join(entities) if entities else "nothing relevant"
        return f"Scripted answer to: {question.strip()[:200]} The context names {known}."
    if req.choices:
        return req.choices[0]
    return "scripted echo: " + " ".join(last.split()[:32])


class ScriptedServing:
    """The scripted LLM with the async engine's surface (complete / stream / stats) and injectable latency."""

    supports_json_schema = True

    def __init__(self, cfg: Any, options: Any):
        from hxd2_ray.llm.scripted import ScriptedLLM

        self.options = options
        self.llm = ScriptedLLM(serving_script, model_id=cfg.model_id, tokens_per_word=cfg.tokens_per_word,
                               fail_when=cfg.fail_when, record=False)
        self.model_id = cfg.model_id
        self.stats = {"started": 0, "finished": 0, "aborted": 0, "failed": 0, "streaming": 0}

    def _delay(self, req: LLMRequest, per_token: bool) -> float:
        o = self.options
        base = o.token_delay_s if per_token else o.delay_s
        if o.slow_marker and any(o.slow_marker in m["content"] for m in req.messages):
            base += o.slow_delay_s
        return base

    async def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        self.stats["started"] += len(requests)
        delay = max((self._delay(r, False) for r in requests), default=0.0)
        if delay:
            await asyncio.sleep(delay)
        out = self.llm.complete(requests)
        self.stats["finished"] += len(requests)
        self.stats["failed"] += sum(1 for r in out if r.error)
        return out

    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        self.stats["started"] += 1
        self.stats["streaming"] += 1
        finished = False
        try:
            first = self._delay(request, False)
            if first:
                await asyncio.sleep(first)
            response = self.llm.complete([request])[0]
            if response.error:
                self.stats["failed"] += 1
                raise BackendError(f"the LLM failed: {response.error}")
            words = response.text.split(" ")
            per_token = self._delay(request, True)
            for i, word in enumerate(words):
                if per_token:
                    await asyncio.sleep(per_token)
                yield word if i == 0 else " " + word
            finished = True
        finally:
            self.stats["streaming"] -= 1
            if finished:
                self.stats["finished"] += 1
            else:
                self.stats["aborted"] += 1

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.stats, backend="scripted", model_id=self.model_id, unfinished=self.stats["streaming"])

    async def check_health(self) -> None:
        return None

    def close(self) -> None:
        return None


@serve.deployment(
    name="LLM",
    max_ongoing_requests=64,
    ray_actor_options={"num_cpus": 0.25},
    health_check_period_s=10,
    health_check_timeout_s=60,
)
class LLMServer:
    """The generation engine: vLLM's async engine (continuous batching over every in-flight request, streaming,
    abort on disconnect), or the scripted LLM (``llm.backend: scripted``) for tests and load tests."""

    def __init__(self, llm_cfg: dict[str, Any], scripted: dict[str, Any] | None = None):
        from pydantic import TypeAdapter

        from hxd2_ray.config import LLMConfig, ScriptedLLMConfig
        from serve.schemas import ScriptedServeOptions

        cfg = TypeAdapter(LLMConfig).validate_python(llm_cfg)
        if isinstance(cfg, ScriptedLLMConfig):
            self.backend: Any = ScriptedServing(cfg, ScriptedServeOptions(**(scripted or {})))
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
        if isinstance(self.backend, ScriptedServing):
            return self.backend.snapshot()
        snap = self.backend.stats.to_dict()
        snap.update(backend="vllm", model_id=self.backend.model_id, unfinished=self.backend.num_unfinished(),
                    max_model_len=self.backend.max_model_len)
        return snap

    async def check_health(self) -> None:
        await self.backend.check_health()

    def __del__(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()


# ===================================================================================== embedder


@serve.deployment(name="Embedder", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.25})
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

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.001)
    async def _embed_batch(self, batches: list[list[str]]) -> list[np.ndarray]:
        flat = [t for texts in batches for t in texts]
        self.batches += 1
        self.metrics.embed_batch.observe(len(flat))
        # Hashing is microseconds; a model is not: off the loop either way, so the replica keeps accepting.
        vectors = await asyncio.to_thread(self.embedder.embed, flat)
        out, start = [], 0
        for texts in batches:
            out.append(vectors[start:start + len(texts)])
            start += len(texts)
        return out

    async def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.cfg.dim), dtype=np.float32)
        return await self._embed_batch(list(texts))

    async def info(self) -> dict[str, Any]:
        return {"model_id": self.embedder.model_id, "dim": self.embedder.dim, "batches": self.batches}


# ===================================================================================== retriever


def _open_indexes(locations: dict[str, str], cfg: HxdConfig) -> dict[str, Any]:
    from hxd2_ray.retrieval import open_index

    opened: dict[str, Any] = {}
    try:
        for name, location in locations.items():
            opened[name] = open_index(location, cfg)  # s3:// → copied to this replica's disk; manifest checked
    except BaseException:
        for index in opened.values():
            index.close()
        raise
    return opened


@serve.deployment(
    name="Retriever",
    max_ongoing_requests=16,
    max_queued_requests=64,
    ray_actor_options={"num_cpus": 0.5},
    health_check_period_s=10,
)
class Retriever:
    """Dual-level retrieval + grounded answers over the read-only indexes: the pipeline object, in threads."""

    def __init__(self, cfg_json: dict[str, Any], indexes: dict[str, str], llm: Any, embedder: Any,
                 pipeline: str = "serve.deployments:default_pipeline", threads: int = 16,
                 stages: dict[str, Any] | None = None):
        import sys

        # Pipeline threads hand off to the replica's event loop and the handle router's loop on every stage;
        # with the default 5 ms GIL switch interval a busy thread can hold those hand-offs up by milliseconds.
        sys.setswitchinterval(0.0005)
        self.cfg = validate_config(cfg_json, source="serve args")
        self.llm = HandleLLM(llm, self.cfg.llm)
        self.embedder = embedder_for(embedder, self.cfg)
        self.stages = {name: HandleStage(h) for name, h in (stages or {}).items()}
        factory = import_string(pipeline)
        self.indexes = _open_indexes(indexes, self.cfg)
        self.pipelines = {
            name: factory(PipelineContext(name, index, self.llm, self.embedder, self.cfg, self.stages))
            for name, index in self.indexes.items()
        }
        # One thread per request the replica may hold (a Serve config may raise max_ongoing_requests).
        threads = max(threads, _replica_max_ongoing() or 0)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hxd2-pipeline")
        self.metrics = Metrics()
        self.served = 0

    # -- helpers -------------------------------------------------------------------------------------

    def _pipeline(self, index: str) -> Any:
        try:
            return self.pipelines[index]
        except KeyError:
            raise IndexNotFoundError(f"unknown index {index!r}; served: {', '.join(self.pipelines)}") from None

    def _record(self, index: str, payload: dict[str, Any]) -> None:
        m = self.metrics
        self.served += 1
        m.answers.inc(tags={"index": index, "path": payload["path"]})
        if payload.get("fallback"):
            m.fallbacks.inc(tags={"index": index, "kind": str(payload["fallback"])})
        if payload.get("refused"):
            m.refusals.inc(tags={"index": index})
        usage = payload.get("usage") or {}
        if usage.get("prompt_tokens"):
            m.prompt_tokens.inc(usage["prompt_tokens"], tags={"index": index})
        if usage.get("completion_tokens"):
            m.completion_tokens.inc(usage["completion_tokens"], tags={"index": index})
        for stage, ms in payload.get("timings_ms", {}).items():
            if stage in STAGES:
                m.stage_latency.observe(ms, tags={"stage": stage})

    def _failed(self, index: str, exc: BaseException) -> dict[str, Any]:
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit
        payload = error_of(exc)
        if payload is None:
            log.error("query on %s failed", index, exc_info=exc)
            payload = _error(500, f"internal error: {type(exc).__name__}: {exc}"[:1000])
        self.metrics.errors.inc(tags={"index": index, "status": str(payload["error"]["status"])})
        return payload

    # -- API -------------------------------------------------------------------------------------------

    async def answer(self, index: str, question: str, trace: bool = False,
                     deadline: float | None = None) -> dict[str, Any]:
        """One whole answer as a JSON-ready dict, or ``{"error": {"status", "message"}}`` for known failures."""
        try:
            pipeline = self._pipeline(index)
        except IndexNotFoundError as exc:
            return _error(404, str(exc))
        scope = RequestScope(deadline)
        started = time.perf_counter()
        try:
            answer = await run_in_thread(self.pool, scope, pipeline.answer, question)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - mapped to a status
            return self._failed(index, exc)
        payload = answer_payload(index, answer, trace, time.perf_counter() - started)
        self._record(index, payload)
        return payload

    async def answer_stream(self, index: str, question: str, trace: bool = False,
                            deadline: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """``{"type": "delta", "text"}`` events, then one ``{"type": "final", **payload}`` (or ``"error"``)."""
        try:
            pipeline = self._pipeline(index)
        except IndexNotFoundError as exc:
            yield {"type": "error", **_error(404, str(exc))}
            return
        scope = RequestScope(deadline)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        started = time.perf_counter()

        def put(kind: str, item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, item))

        def pump() -> None:
            events = pipeline.answer_stream(question)
            try:
                for event in events:
                    if scope.cancelled:
                        break
                    put("event", event)
            except BaseException as exc:  # noqa: BLE001 - handed to the async side
                put("error", exc)
            finally:
                close = getattr(events, "close", None)
                if callable(close):
                    close()  # a generator stopped early: closes the LLM stream under it (abort)
                put("end", None)

        task = asyncio.ensure_future(run_in_thread(self.pool, scope, pump))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved" noise
        finished = False
        try:
            while True:
                timeout = None if deadline is None else max(0.0, deadline - time.time())
                try:
                    kind, item = await asyncio.wait_for(queue.get(), timeout)
                except asyncio.TimeoutError:
                    cancel_soon(scope)
                    yield {"type": "error", **self._failed(index, DeadlineExceeded("the request deadline passed"))}
                    finished = True
                    return
                if kind == "end":
                    finished = True
                    return
                if kind == "error":
                    finished = True
                    yield {"type": "error", **self._failed(index, item)}
                    return
                if item.kind == "delta":
                    if item.text:
                        yield {"type": "delta", "text": item.text}
                else:
                    payload = answer_payload(index, item.answer, trace, time.perf_counter() - started)
                    self._record(index, payload)
                    yield {"type": "final", **payload}
        finally:
            if not finished:
                cancel_soon(scope)  # the consumer went away: stop the pipeline and abort the generation
            task.cancel()

    async def info(self) -> dict[str, Any]:
        return {
            "indexes": {name: {"location": ix.location, "root": str(ix.root),
                               "fingerprint": ix.manifest.fingerprint,
                               "embedding_model": ix.manifest.embedding_model_id,
                               "created_at": ix.manifest.created_at}
                        for name, ix in self.indexes.items()},
            "served": self.served,
        }

    def check_health(self) -> None:
        if self.pool._shutdown:  # noqa: SLF001
            raise RuntimeError("the pipeline pool is shut down")

    def __del__(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        for index in getattr(self, "indexes", {}).values():
            try:
                index.close()
            except Exception:  # noqa: BLE001
                pass


# ========================================================================================= logic


@serve.deployment(name="LogicPlanner", max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.1})
class LogicPlanner:
    """``plan(question)`` → ``PlanResult.to_dict()`` (LogicFormPlanner over the LLM deployment)."""

    def __init__(self, cfg_json: dict[str, Any], llm: Any):
        from hxd2_ray.logic import LogicFormPlanner

        cfg = validate_config(cfg_json, source="serve args")
        self.planner = LogicFormPlanner(HandleLLM(llm, cfg.llm))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="hxd2-plan")

    async def plan(self, question: str, language: str | None = None, relations: Sequence[str] = (),
                   deadline: float | None = None) -> dict[str, Any]:
        result = await run_in_thread(self.pool, RequestScope(deadline), self.planner.plan, question,
                                     language=language, relations=tuple(relations))
        return result.to_dict()


@serve.deployment(name="LogicExecutor", max_ongoing_requests=8, ray_actor_options={"num_cpus": 0.1})
class LogicExecutor:
    """``execute(index, plan, question)`` → evidence (LogicFormExecutor over the index's graph, read-only)."""

    def __init__(self, cfg_json: dict[str, Any], indexes: dict[str, str], llm: Any, embedder: Any):
        import threading

        from hxd2_ray.logic import EntityLinker, GraphQueries, LogicFormExecutor

        cfg = validate_config(cfg_json, source="serve args")
        self.indexes = _open_indexes(indexes, cfg)
        llm_adapter, emb = HandleLLM(llm, cfg.llm), embedder_for(embedder, cfg)
        self.executors = {}
        for name, index in self.indexes.items():
            queries = GraphQueries(index.graph)
            linker = EntityLinker(queries, embedder=emb, name_index=index.family("entity_name"))
            self.executors[name] = LogicFormExecutor(queries, linker, llm_adapter)
        # An executor keeps per-run trace state: one run at a time per index.
        self.locks = {name: threading.Lock() for name in self.executors}
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="hxd2-exec")

    async def execute(self, index: str, plan: Any, question: str = "",
                      deadline: float | None = None) -> dict[str, Any]:
        from hxd2_ray.logic import Plan, validate_plan

        if index not in self.executors:
            return _error(404, f"unknown index {index!r}; served: {', '.join(self.executors)}")
        checked = validate_plan(plan)
        if not isinstance(checked, Plan):
            return _error(400, f"invalid plan: {checked}")

        def run() -> Any:
            with self.locks[index]:
                return self.executors[index].execute(checked, question)

        evidence = await run_in_thread(self.pool, RequestScope(deadline), run)
        return {"ok": evidence.ok, "evidence": evidence.to_dict(), "text": evidence.format()}


@serve.deployment(name="LogicVerifier", max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.1})
class LogicVerifier:
    """``verify(question, evidence, answer=None, mode="pre")`` → verdict (EvidenceVerifier over the LLM)."""

    def __init__(self, cfg_json: dict[str, Any], llm: Any):
        from hxd2_ray.logic import EvidenceVerifier

        cfg = validate_config(cfg_json, source="serve args")
        adapter = HandleLLM(llm, cfg.llm)
        self.verifiers = {mode: EvidenceVerifier(adapter, mode) for mode in ("pre", "post")}
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="hxd2-verify")

    async def verify(self, question: str, evidence: str, answer: str | None = None, mode: str = "pre",
                     deadline: float | None = None) -> dict[str, Any]:
        if mode not in self.verifiers:
            return _error(400, f"mode must be 'pre' or 'post', got {mode!r}")
        verdict = await run_in_thread(self.pool, RequestScope(deadline), self.verifiers[mode].verify, question,
                                      evidence, answer)
        return {"supported": verdict.supported, "reason": verdict.reason, "raw": verdict.raw, "mode": verdict.mode}


# ===================================================================================== HTTP API


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_ or _ERROR_TYPES.get(status, "server_error")
        self.code = code
        self.headers = headers or {}


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                413: "invalid_request_error", 422: "invalid_request_error", 499: "cancelled",
                502: "upstream_error", 503: "overloaded_error", 504: "timeout_error"}


@dataclass(frozen=True)
class ApiSettings:
    indexes: tuple[str, ...]
    default_index: str
    request_deadline_s: float = 120.0
    retry_after_s: int = 1
    max_body_bytes: int = 1 << 20
    max_question_chars: int = 32_000
    model_created: int = field(default_factory=lambda: int(time.time()))


DEADLINE_HEADER = "x-hxd2-deadline-s"


class RetrieverBackend:
    """The Ingress's view of the Retriever deployment: deadlines, one retry on a dead replica, status mapping."""

    def __init__(self, handle: Any, retry_after_s: int):
        self.handle = handle
        self.stream_handle = handle.options(stream=True)
        self.retry_after_s = retry_after_s

    def _overloaded(self, message: str, retry_after: float | None = None) -> ApiError:
        seconds = self.retry_after_s if retry_after is None else max(0, int(-(-retry_after // 1)))
        return ApiError(503, message, code="overloaded", headers={"Retry-After": str(seconds)})

    def _raise_payload_error(self, payload: dict[str, Any]) -> None:
        err = payload["error"]
        status = int(err.get("status", 500))
        if status == 503:
            raise self._overloaded(err.get("message", "overloaded"), err.get("retry_after"))
        raise ApiError(status, err.get("message", "error"))

    async def answer(self, index: str, question: str, trace: bool, deadline: float) -> dict[str, Any]:
        from ray.exceptions import RayActorError
        from ray.serve.exceptions import BackPressureError

        for attempt in (0, 1):
            response = self.handle.answer.remote(index, question, trace, deadline)
            try:
                # A little beyond the deadline: the retriever answers 504 itself, with its reason, when it can.
                result = await asyncio.wait_for(response, max(0.0, deadline - time.time()) + 1.0)
            except asyncio.TimeoutError:
                response.cancel()
                raise ApiError(504, "the request deadline passed") from None
            except asyncio.CancelledError:
                response.cancel()  # the client went away: stop the work downstream
                raise
            except BackPressureError as exc:
                raise self._overloaded(f"the retriever is at capacity ({exc})", exc.retry_after_s) from None
            except RayActorError as exc:
                # The replica died under this (read-only, idempotent) query: retry once on another replica.
                if attempt == 0 and time.time() < deadline:
                    log.warning("retriever replica failed (%s); retrying once", type(exc).__name__)
                    continue
                raise self._overloaded(f"the retriever replica went away ({type(exc).__name__})") from None
            except Exception as exc:  # noqa: BLE001 - a JSON 500 rather than a bare one
                log.error("retriever call failed", exc_info=exc)
                raise ApiError(500, f"internal error: {type(exc).__name__}") from None
            if "error" in result:
                self._raise_payload_error(result)
            return result
        raise AssertionError("unreachable")

    async def answer_stream(self, index: str, question: str, trace: bool,
                            deadline: float) -> AsyncIterator[dict[str, Any]]:
        """Events from the retriever. Errors before the first event raise :class:`ApiError` (a real status);
        later ones arrive as ``{"type": "error"}`` events. Closing this generator cancels the stream below."""
        from ray.exceptions import RayActorError
        from ray.serve.exceptions import BackPressureError

        gen = self.stream_handle.answer_stream.remote(index, question, trace, deadline)
        first = True
        done = False
        try:
            while True:
                timeout = max(0.0, deadline - time.time()) + 1.0
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
                    raise self._overloaded(f"the retriever is at capacity ({exc})", exc.retry_after_s) from None
                except RayActorError as exc:
                    if first:
                        raise self._overloaded(f"the retriever replica went away ({type(exc).__name__})") from None
                    yield {"type": "error", "error": {"status": 503, "message": "the retriever replica went away"}}
                    return
                except ApiError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a JSON error rather than a broken stream
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
                if event.get("type") in ("final", "error"):
                    done = True
                yield event
        finally:
            if not done:
                gen.cancel()

    async def health(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.handle.info.remote(), 5.0)


def _sse(data: Any) -> bytes:
    import json

    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


class HttpMetricsMiddleware:
    """Counts every HTTP request by route and status and times it (streams: until their last byte)."""

    def __init__(self, app: Any, metrics: Metrics, routes: Iterable[str]):
        self.app = app
        self.metrics = metrics
        self.routes = frozenset(routes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        route = path if path in self.routes else "other"
        status = {"code": 500}
        started = time.perf_counter()

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.http_requests.inc(tags={"route": route, "status": str(status["code"])})
            self.metrics.http_latency.observe((time.perf_counter() - started) * 1000, tags={"route": route})


ROUTES = ("/v1/chat/completions", "/v1/query", "/v1/models", "/healthz")


def make_api(backend: Any, settings: ApiSettings, keys: Any, metrics: Metrics | None = None) -> Any:
    """The ASGI app: FastAPI routes behind the auth/size guard and the HTTP metrics.

    ``backend`` offers ``answer(index, question, trace, deadline)``, ``answer_stream(...)`` (async iterator of
    events) and ``health()``: a :class:`RetrieverBackend` in Serve, a fake in unit tests.
    """
    import json

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import ValidationError

    from serve.auth import GuardMiddleware
    from serve.schemas import (
        AssistantMessage,
        ChatCompletion,
        ChatCompletionChunk,
        ChatCompletionRequest,
        Choice,
        ChunkChoice,
        Delta,
        ModelCard,
        ModelList,
        QueryRequest,
        QueryResponse,
        Usage,
        completion_id,
        error_body,
    )

    metrics = metrics or Metrics(enabled=False)
    api = FastAPI(title="hxd2", docs_url=None, redoc_url=None, openapi_url=None)

    @api.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.message, exc.type, exc.code), status_code=exc.status,
                            headers=exc.headers)

    async def parse(request: Request, model: Any) -> Any:
        raw = await request.body()
        try:
            data = json.loads(raw or b"")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                                 for e in exc.errors()[:10])
            raise ApiError(422, f"invalid request: {problems}", code="invalid_request") from None

    def deadline_of(request: Request) -> float:
        seconds = settings.request_deadline_s
        asked = request.headers.get(DEADLINE_HEADER)
        if asked:
            try:
                seconds = min(seconds, max(0.001, float(asked)))
            except ValueError:
                raise ApiError(400, f"{DEADLINE_HEADER} must be a number of seconds") from None
        return time.time() + seconds

    def check_question(index: str, question: str) -> None:
        if index not in settings.indexes:
            raise ApiError(404, f"unknown model/index {index!r}; served: {', '.join(settings.indexes)}",
                           code="model_not_found")
        if not question.strip():
            raise ApiError(400, "the question is empty: send a user message with text", code="empty_question")
        if len(question) > settings.max_question_chars:
            raise ApiError(413, f"the question has {len(question):,} characters, over the limit of "
                                f"{settings.max_question_chars:,}", code="question_too_long")

    @api.get("/healthz")
    async def healthz(deep: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"status": "ok", "indexes": list(settings.indexes)}
        if deep:
            try:
                info = await backend.health()
                out["served"] = info.get("served")
            except Exception as exc:  # noqa: BLE001
                raise ApiError(503, f"the retriever is not answering: {type(exc).__name__}",
                               headers={"Retry-After": str(settings.retry_after_s)}) from None
        return out

    @api.get("/v1/models")
    async def models() -> dict[str, Any]:
        cards = [ModelCard(id=name, created=settings.model_created) for name in settings.indexes]
        return ModelList(data=cards).model_dump()

    @api.post("/v1/query")
    async def query(request: Request) -> dict[str, Any]:
        req = await parse(request, QueryRequest)
        index = req.index or settings.default_index
        check_question(index, req.question)
        result = await backend.answer(index, req.question, req.trace, deadline_of(request))
        return QueryResponse(
            index=index, question=result.get("question", req.question), answer=result.get("answer", ""),
            path=result.get("path", "dual_level"), references=result.get("references", []),
            notices=result.get("notices", []), usage=result.get("usage", {}),
            timings_ms=result.get("timings_ms", {}), trace=result.get("trace") if req.trace else None,
        ).model_dump(exclude_none=True)

    @api.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        req = await parse(request, ChatCompletionRequest)
        question = req.question()
        check_question(req.model, question)
        deadline = deadline_of(request)
        cid = completion_id()
        if not req.stream:
            result = await backend.answer(req.model, question, req.trace, deadline)
            usage = result.get("usage", {})
            return ChatCompletion(
                id=cid, model=req.model,
                choices=[Choice(message=AssistantMessage(content=result.get("answer", "")),
                                finish_reason=_finish_reason(usage.get("finish_reason")))],
                usage=Usage.of(usage), path=result.get("path"), references=result.get("references"),
                notices=result.get("notices") or None, trace=result.get("trace") if req.trace else None,
            ).model_dump(exclude_none=True)

        events = backend.answer_stream(req.model, question, req.trace, deadline)
        try:
            first = await events.__anext__()  # errors before the first event still get a real status
        except StopAsyncIteration:
            raise ApiError(502, "the answer stream ended without an answer") from None
        created = int(time.time())
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def chunk(delta: Delta, finish: str | None = None, **extra: Any) -> bytes:
            body = ChatCompletionChunk(id=cid, created=created, model=req.model,
                                       choices=[ChunkChoice(delta=delta, finish_reason=finish)], **extra)
            return _sse(body.model_dump(exclude_none=True))

        async def sse() -> AsyncIterator[bytes]:
            try:
                yield chunk(Delta(role="assistant", content=""))
                event: dict[str, Any] | None = first
                while event is not None:
                    kind = event.get("type")
                    if kind == "delta":
                        yield chunk(Delta(content=event["text"]))
                    elif kind == "final":
                        usage = event.get("usage", {})
                        yield chunk(Delta(), _finish_reason(usage.get("finish_reason")),
                                    path=event.get("path"), references=event.get("references"))
                        if include_usage:
                            yield _sse(ChatCompletionChunk(id=cid, created=created, model=req.model, choices=[],
                                                           usage=Usage.of(usage)).model_dump(exclude_none=True))
                    elif kind == "error":
                        err = event["error"]
                        yield _sse(error_body(err.get("message", "error"),
                                              _ERROR_TYPES.get(int(err.get("status", 500)), "server_error"),
                                              err.get("status")))
                        break
                    event = await events.__anext__() if kind not in ("final",) else None
                yield _sse("[DONE]")
            except StopAsyncIteration:
                yield _sse("[DONE]")
            finally:
                await events.aclose()  # on a client disconnect too: cancels the retriever stream → engine abort

        return StreamingResponse(sse(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    guarded = GuardMiddleware(api, keys=keys, max_body_bytes=settings.max_body_bytes,
                              on_reject=lambda status, path: None)
    return HttpMetricsMiddleware(guarded, metrics, ROUTES)


def _finish_reason(reason: str | None) -> str:
    return reason if reason in ("stop", "length", "content_filter") else "stop"


@serve.deployment(
    name="Ingress",
    max_ongoing_requests=64,
    max_queued_requests=128,
    backpressure_config={"retry_after_s": 1},
    ray_actor_options={"num_cpus": 0.25},
)
@serve.ingress()
class Ingress:
    """HTTP ingress: OpenAI-compatible chat completions (SSE streaming), /v1/query, /v1/models, /healthz."""

    def __init__(self, retriever: Any, settings: dict[str, Any]):
        from serve.auth import ApiKeys, AuthConfigError, load_api_keys

        self.settings = ApiSettings(
            indexes=tuple(settings["indexes"]), default_index=settings["default_index"],
            request_deadline_s=float(settings["request_deadline_s"]), retry_after_s=int(settings["retry_after_s"]),
            max_body_bytes=int(settings["max_body_bytes"]), max_question_chars=int(settings["max_question_chars"]),
        )
        self.keys = None
        if settings.get("auth", True):
            keys = load_api_keys(settings.get("api_keys_env"), settings.get("api_keys_file"))
            if not keys:
                raise AuthConfigError(
                    f"auth is on but no API key is configured: set ${settings.get('api_keys_env')} (comma-separated)"
                    " or api_keys_file on the replicas, or set auth: false for a local-only server")
            self.keys = ApiKeys(keys)
            log.info("ingress: %d API key(s) loaded", len(self.keys))
        else:
            log.warning("ingress: auth is OFF (auth: false); bind to 127.0.0.1 only")
        self.backend = RetrieverBackend(retriever, self.settings.retry_after_s)
        self.metrics = Metrics()

    def __serve_build_asgi_app__(self) -> Any:
        return make_api(self.backend, self.settings, self.keys, self.metrics)
